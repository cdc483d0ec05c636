"""The one command line every sweep file shares (`python sweeps/<axis>.py --help`): it parses
the options and reports; icl_core.orchestrate plans and runs.

Everything is validated (plans expanded, configs resolved, storage probed) before Ray starts.
"""

from __future__ import annotations

import argparse
import os
import sys

from icl_core.config import ConfigError
from icl_core.orchestrate import (
    Plan,
    cluster_cpus,
    make_plans,
    plan_gpu_seconds,
    run_plans,
    run_standalone,
    study_trials,
)
from icl_core.stacked import STACK_MODES
from icl_core.study import PRESETS

DEFAULT_STORAGE = "results"
JOB_STORAGE = "~/icl_results"  # under `ray job submit` the cwd is a temporary copy


def default_storage() -> str:
    from icl_core.launch import in_ray_job

    env = os.environ.get("ICL_STORAGE")
    if env:
        return env
    return JOB_STORAGE if in_ray_job() else DEFAULT_STORAGE


def pack_arg(text: str) -> int | str:
    """--pack: an integer or 'auto' (checked in make_plans, so the error is ours)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        return text


def build_parser(sweep) -> argparse.ArgumentParser:
    studies = "\n".join(f"  {s.name}: {s.doc}" for s in sweep.studies)
    parser = argparse.ArgumentParser(
        prog=f"sweeps/{sweep.name}.py",
        description=f"Sweep {sweep.name!r}. Studies:\n{studies}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--preset", default="cpu", help=f"one of {', '.join(PRESETS)} (default: cpu)")
    add("--study", help="run one study (default: all studies of this file)")
    add("--storage", help="where rows go: a path or URI (s3://, gs://); default $ICL_STORAGE, "
        f"else ./results ({JOB_STORAGE} under ray job submit)")
    add("--address", help="Ray cluster address (default: embedded local Ray)")
    add("--dry-run", action="store_true", help="print the plan, run nothing")
    add("--plan-gpus", type=float, default=None,
        help="--dry-run: plan for a cluster with this many GPUs (default: this machine's)")
    add("--resume", action="store_true",
        help="searches: finish an interrupted search (Tuner.restore), then add trials up to "
        "--num-samples (extends a finished one); grids always skip finished configs, so a "
        "plain re-run resumes them")
    add("--max-concurrent", type=int, default=None, help="max trials at once")
    add("--num-samples", type=int, default=None,
        help="grids: seeds 0..K-1 (replaces the seed axis); searches: trials per search")
    add("--pack", type=pack_arg, default="auto",
        help="members per trial, or auto (default): about 4 trials per CPU/GPU slot, so "
        "start-up is paid once per trial, not per member")
    add("--stack", choices=STACK_MODES, default="auto",
        help="train a trial's members that differ only in their seeds at once, weights "
        "stacked: auto (default) on GPUs, always, never (one after another)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config field, e.g. --set model.width=128 (repeatable)")
    add("--optuna-journal", metavar="FILE",
        help="searches without Ray: plain Optuna with a JournalStorage file")
    add("--seed", type=int, default=None,
        help="searches: the Optuna sampler's seed (default 0); grids take --num-samples")
    add("--figures", default="figures", help="figure output folder (default: figures)")
    add("--no-figures", action="store_true", help="skip figure regeneration")
    return parser


def main(sweep, argv: list[str] | None = None) -> int:
    """Parse, plan, then print the plan (--dry-run) or run it; the exit status. Every input
    is checked before Ray starts: a bad one is one line on stderr and exit status 2."""
    args = build_parser(sweep).parse_args(argv)
    try:
        plans, store = preflight(sweep, args)
        if args.dry_run:
            print_plan(sweep, plans, args, store)
            return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.optuna_journal:
        return run_standalone(sweep, plans, store, args)
    if not any(plan.members for plan in plans):
        return 0  # every search already has its trials (said above): nothing to start
    return run_plans(sweep, plans, store, args)


def preflight(sweep, args):
    """(plans, store): every member validated, the storage, Ray address and figures folder
    checked (icl_core.preflight); nothing is written and Ray is not started."""
    from icl_core.preflight import check_writable_dir, open_store, probe_address

    plans = make_plans(sweep, args)
    store = open_store(args.storage or default_storage())
    if not args.dry_run:
        try:
            store.check_writable()
        except OSError as exc:
            raise ConfigError(f"--storage: cannot write to {store.uri!r} ({exc})") from None
        if not args.no_figures:
            check_writable_dir("figures", args.figures)
        if not args.optuna_journal:
            probe_address(args.address)
            skip_finished_searches(sweep, plans, store, args)
    return plans, store


def skip_finished_searches(sweep, plans, store, args) -> None:
    """Drop the grid points whose search already has its trials (said, one line each); an
    unfinished search run that exists needs --resume. Before Ray starts."""
    from icl_core.search import finished_points

    for plan in plans:
        if not plan.is_search:
            continue
        search = plan.study
        done = finished_points(sweep.name, search, plan.members, store.uri, plan.num_samples)
        plan.members = [p for p in plan.members if p not in done]
        if args.resume:
            continue
        from ray import tune

        for point in plan.members:
            path = f"{store.uri}/{sweep.name}/{search.name}/tune/search-{point.hash}"
            if tune.Tuner.can_restore(path):
                raise ConfigError(f"{sweep.name}/{search.name}@{point.hash[:8]}: a search "
                                  f"already exists at {path}; pass --resume to finish it "
                                  "(--resume --num-samples N: extend it to N trials)")


def gpu_time(seconds: float) -> str:
    return f"~{seconds / 60:.1f} GPU-min" + (f" ({seconds / 3600:.1f} GPU-h)"
                                             if seconds >= 3600 else "")


def print_plan(sweep, plans: list[Plan], args, store=None) -> float:
    """Trials, members per trial (and whether they stack), resources and the estimated time
    on one H100-class GPU per study; with the store, also each study's grid values, its base
    config's fields off their defaults and what is already finished (`plan_details`);
    returns the total estimate in seconds."""
    import torch

    from icl_core.stacked import stack_groups, trial_stack_mode

    gpus = args.plan_gpus if args.plan_gpus is not None else float(torch.cuda.device_count())
    cpus = cluster_cpus()
    total, seconds = 0, 0.0
    for plan in plans:
        study = plan.study
        estimate = plan_gpu_seconds(plan)
        seconds += estimate
        if plan.is_search:
            print(f"{sweep.name}/{study.name} [{args.preset}]: {plan.trials} trials "
                  f"({len(plan.members)} searches x {plan.num_samples} Optuna trials), "
                  f"1 member per trial, {gpu_time(estimate)} on one H100 -- {study.doc}")
            total += plan.trials
            if store is not None:
                plan_details(sweep, plan, args, store)
            continue
        trials = study_trials(plan, args, gpus, cpus)
        kinds = sorted({str(r) for _, r in trials})
        sizes = sorted({len(group) for group, _ in trials})
        how = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        stacks = [len(g) for group, res in trials
                  for g in stack_groups(group, trial_stack_mode(args.stack, res.gpu))]
        stacked = sum(1 for n in stacks if n > 1)
        packing = (f"{how} member(s) per trial (--pack {args.pack}), "
                   + (f"{stacked} stacks of {max(stacks)} or fewer trained at once"
                      if stacked else "one after another"))
        print(f"{sweep.name}/{study.name} [{args.preset}]: {len(trials)} trials "
              f"({len(plan.members)} configs), {packing}, {' | '.join(kinds)} per trial, "
              f"{gpu_time(estimate)} on one H100 -- {study.doc}")
        total += len(trials)
        if store is not None:
            plan_details(sweep, plan, args, store)
    where = f"{gpus:g} GPU(s)" if gpus else "CPU only (no GPU)"
    print(f"total: {total} trials in {len(plans)} studies, planned for {cpus:g} CPU(s), {where}; "
          f"{gpu_time(seconds)} on one H100-class GPU (planner estimate, stacks one after "
          "another)")
    return seconds


def plan_details(sweep, plan: Plan, args, store) -> None:
    """Under a study's plan line: the grid's values, the base config's fields off their
    defaults (names of task and model always) and how much is already finished."""
    from icl_core.config import flatten
    from icl_core.orchestrate import parse_sets
    from icl_core.study import apply_preset

    study = plan.study
    _, grid = apply_preset(study.base, study.grid, study.presets, args.preset,
                           parse_sets(args.set))
    if plan.is_search:
        grid = {k: v for k, v in grid.items() if k != "seed"}
    axes = {k for key in grid for k in (key if isinstance(key, tuple) else (key,))}
    axes |= set(getattr(study, "space", ()))  # a search's sampled fields
    if grid:
        print("  grid: " + "; ".join(f"{','.join(k) if isinstance(k, tuple) else k} = {v}"
                                     for k, v in grid.items()))
    if plan.is_search:
        print("  searched: " + "; ".join(f"{k} {v}" for k, v in study.space.items()))
    first = plan.members[0]
    defaults, flat = first.defaults(), flatten(first.to_dict())
    off = {k: v for k, v in flat.items() if k not in axes and (
        k in ("task.name", "model.name") or k not in defaults or defaults[k] != v)}
    print("  base (off the defaults): " + ", ".join(f"{k}={v}" for k, v in off.items()))
    if plan.is_search:
        from icl_core.searcher import finished_trials, journal_path, study_name

        journal = journal_path(store.uri, sweep.name, study.name)
        done = [finished_trials(journal, study_name(study.name, p)) for p in plan.members]
        print(f"  finished: {sum(done)} of {plan.trials} Optuna trials in {store.uri}")
        return
    finished = store.finished(sweep.name, study.name)
    done = sum(1 for m in plan.members if m.hash in finished)
    print(f"  finished: {done} of {len(plan.members)} configs in {store.uri} "
          f"(a run trains the other {len(plan.members) - done})")
