"""The one command line every sweep file shares (`python sweeps/<axis>.py --help`).

Everything is validated (plans expanded, configs resolved, storage probed) before Ray starts.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass

from icl_core.config import ConfigError
from icl_core.stacked import STACK_MODES
from icl_core.sweep import PRESETS, Sweep

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


def build_parser(sweep: Sweep) -> argparse.ArgumentParser:
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
        help="searches: finish an interrupted search (Tuner.restore); grids always skip "
        "finished configs, so a plain re-run resumes them")
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
    add("--seed", type=int, default=0, help="searches: sampler seed (default 0)")
    add("--figures", default="figures", help="figure output folder (default: figures)")
    add("--no-figures", action="store_true", help="skip figure regeneration")
    return parser


# (flag, other flag, why they cannot go together): refused before anything starts
CONFLICTS = (
    ("optuna_journal", "address", "the journal runs searches without Ray"),
    ("optuna_journal", "resume", "a journal search resumes by running it again"),
)


def parse_sets(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


@dataclass
class Plan:
    study: object  # Study or Search
    members: list  # grid: every member; search: the base member of each search
    num_samples: int = 0  # searches only

    @property
    def is_search(self) -> bool:
        return hasattr(self.study, "space")

    @property
    def trials(self) -> int:
        return len(self.members) * self.num_samples if self.is_search else len(self.members)


def make_plans(sweep: Sweep, args) -> list[Plan]:
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError("--max-concurrent: must be >= 1")
    if args.pack != "auto" and (not isinstance(args.pack, int) or args.pack < 1):
        raise ConfigError(f"--pack: must be an integer >= 1 or auto, got {args.pack!r}")
    for flag, other, why in CONFLICTS:
        if getattr(args, flag) and getattr(args, other):
            raise ConfigError(f"--{flag.replace('_', '-')}: conflicts with "
                              f"--{other.replace('_', '-')} ({why})")
    if args.plan_gpus is not None and not args.dry_run:
        raise ConfigError("--plan-gpus: only plans; use it with --dry-run")
    sets = parse_sets(args.set)
    studies = [sweep.study(args.study)] if args.study else list(sweep.studies)
    if args.optuna_journal and not any(hasattr(s, "space") for s in studies):
        raise ConfigError("--optuna-journal: only searches use it; this file has none")
    plans = []
    for study in studies:
        if hasattr(study, "space"):
            points = study.points(args.preset, sets)
            plans.append(Plan(study, points, study.num_samples(args.preset, args.num_samples)))
        else:
            plans.append(Plan(study, study.members(args.preset, sets, args.num_samples)))
    return plans


def main(sweep: Sweep, argv: list[str] | None = None) -> int:
    from icl_core.store import Store

    args = build_parser(sweep).parse_args(argv)
    try:
        plans = make_plans(sweep, args)
        store = Store(args.storage or default_storage())
        if not args.dry_run:
            try:
                store.check_writable()
            except OSError as exc:
                raise ConfigError(f"--storage: cannot write to {store.uri!r} ({exc})") from None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.dry_run:
        print_plan(sweep, plans, args)
        return 0
    if args.optuna_journal:
        return run_standalone(sweep, plans, store, args)

    from icl_core.launch import init_ray
    from icl_core.provenance import driver_provenance

    started = init_ray(args.address)
    print(f"storage: {store.uri}", flush=True)
    provenance = driver_provenance()
    exit_code = 0
    try:
        for plan in plans:
            runner = run_search if plan.is_search else run_study
            try:
                exit_code |= runner(sweep, plan, store, provenance, args)
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr)
                exit_code |= 2
    finally:
        if started:
            import ray

            ray.shutdown()
    return exit_code


def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0


def cluster_cpus() -> float:
    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    return float(os.cpu_count() or 1)


def study_trials(plan: Plan, args, gpus: float, cpus: float, members=None) -> list:
    """The planned trials of a grid study: (members, resources) per trial."""
    from icl_core.resources import plan_trials

    return plan_trials(plan.members if members is None else members, gpus,
                       plan.study.cpus_per_trial, args.pack, cpus, args.stack)


def plan_gpu_seconds(plan: Plan) -> float:
    """The planner's wall-time estimate of a study on one H100-class GPU, stacked
    (icl_core.resources.estimate_gpu_seconds); a search counts every Optuna trial to its end."""
    from icl_core.resources import estimate_gpu_seconds

    if plan.is_search:  # trials differ in their sampled settings: none stack
        return plan.num_samples * sum(estimate_gpu_seconds([p]) for p in plan.members)
    return estimate_gpu_seconds(plan.members)


def gpu_time(seconds: float) -> str:
    return f"~{seconds / 60:.1f} GPU-min" + (f" ({seconds / 3600:.1f} GPU-h)"
                                             if seconds >= 3600 else "")


def print_plan(sweep: Sweep, plans: list[Plan], args) -> float:
    """Trials, members per trial (and whether they stack), resources and the estimated time
    on one H100-class GPU per study; returns the total estimate in seconds."""
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
    where = f"{gpus:g} GPU(s)" if gpus else "CPU only (no GPU)"
    print(f"total: {total} trials in {len(plans)} studies, planned for {cpus:g} CPU(s), {where}; "
          f"{gpu_time(seconds)} on one H100-class GPU (planner estimate, stacks one after "
          "another)")
    return seconds


def run_study(sweep, plan: Plan, store, provenance, args) -> int:
    from icl_core.launch import run_tune
    from icl_core.trial import TrialSpec

    study, members = plan.study, plan.members
    label = f"{sweep.name}/{study.name}"
    done = store.finished(sweep.name, study.name)
    todo = [m for m in members if m.hash not in done]
    print(f"[{label}] {len(members)} configs, {len(members) - len(todo)} already finished, "
          f"running {len(todo)}", flush=True)
    if todo:
        specs = [
            TrialSpec(sweep.name, study.name, store.uri, [m.to_dict() for m in group],
                      threads=max(1, int(res.cpu)), gpu=res.gpu, provenance=provenance,
                      stack=args.stack)
            for group, res in study_trials(plan, args, cluster_gpus(), cluster_cpus(), todo)
        ]
        print(f"[{label}] {len(specs)} trials of up to {max(len(s.members) for s in specs)} "
              f"members (--pack {args.pack}, --stack {args.stack})", flush=True)
        tune_dir = f"{store.uri}/{sweep.name}/{study.name}/tune"
        run_tune(specs, label, tune_dir, args.max_concurrent)
    statuses = store.member_status(sweep.name, study.name, [m.hash for m in members])
    return report_statuses(label, statuses, sweep, study, store, args)


def report_statuses(label, statuses, sweep, study, store, args) -> int:
    kinds = ("ok", "diverged", "pruned", "failed", "missing")
    counts = {s: sum(1 for v in statuses.values() if v[0] == s) for s in kinds}
    print(f"[{label}] finished: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "pruned"),
          flush=True)
    for h, (status, reason) in statuses.items():
        if status in ("failed", "diverged", "missing"):
            print(f"[{label}]   {status} {h}: {reason}", flush=True)
    failed_figure = False
    if study.figure and not args.no_figures and counts["ok"]:
        from analysis.regenerate import regenerate

        try:
            regenerate(sweep.name, study.name, storage=store.uri, out=args.figures)
        except Exception as exc:  # the rows are stored; say what failed and how to retry
            failed_figure = True
            print(f"[{label}] figure failed ({type(exc).__name__}: {exc}); the rows are stored: "
                  f"python -m analysis.regenerate {sweep.name} --study {study.name} "
                  f"--storage {store.uri}", file=sys.stderr, flush=True)
    return 1 if counts["failed"] or counts["missing"] or failed_figure else 0


def search_template(sweep, plan, point, store, provenance, res):
    from icl_core.trial import TrialSpec

    return TrialSpec(sweep.name, plan.study.name, store.uri, [point.to_dict()],
                     threads=max(1, int(res.cpu)), gpu=res.gpu, provenance=provenance)


def run_search(sweep, plan: Plan, store, provenance, args) -> int:
    from icl_core.resources import member_resources
    from icl_core.search import run_search_tune

    search = plan.study
    tune_dir = f"{store.uri}/{sweep.name}/{search.name}/tune"
    for point in plan.members:
        label = f"{sweep.name}/{search.name}@{point.hash[:8]}"
        print(f"[{label}] Optuna search: {plan.num_samples} trials", flush=True)
        res = member_resources(point, cluster_gpus(), search.cpus_per_trial)
        template = search_template(sweep, plan, point, store, provenance, res)
        run_search_tune(search, point, template, tune_dir, plan.num_samples, args.seed,
                        args.resume, args.max_concurrent, res, label)
    return summarize_search(sweep, search, store)


def summarize_search(sweep, search, store) -> int:
    hashes = sorted(store.finished(sweep.name, search.name))
    statuses = store.member_status(sweep.name, search.name, hashes)
    counts = {}
    for status, _ in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"[{sweep.name}/{search.name}] stored trials: "
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), flush=True)
    return 0


def run_standalone(sweep, plans, store, args) -> int:
    """--optuna-journal: plain Optuna in this process, no Ray."""
    from icl_core.provenance import driver_provenance
    from icl_core.search import run_search_optuna

    provenance = driver_provenance()
    searches = [plan for plan in plans if plan.is_search]
    for plan in searches:
        runner = standalone_runner(sweep, plan, store, provenance)
        for point in plan.members:
            study = run_search_optuna(plan.study, point, args.optuna_journal, plan.num_samples,
                                      args.seed, runner)
            print(f"[{sweep.name}/{plan.study.name}@{point.hash[:8]}] best {study.best_value:.4g}"
                  f" with {study.best_params} (journal: {args.optuna_journal})", flush=True)
        summarize_search(sweep, plan.study, store)
    return 0


def standalone_runner(sweep, plan: Plan, store, provenance):
    """objective(member, optuna_trial) -> final training loss; prunes through trial.report."""
    import optuna

    from icl_core.resources import TrialResources
    from icl_core.trial import StopMember, run_trial

    name = plan.study.name
    res = TrialResources(cpu=plan.study.cpus_per_trial, gpu=0.0)

    def runner(member, trial) -> float:
        spec = search_template(sweep, plan, member, store, provenance, res)

        def report(metrics, _state):
            if not metrics.get("member_done") and math.isfinite(metrics.get("loss", math.nan)):
                trial.report(metrics["loss"], metrics["step"])
                if trial.should_prune():
                    raise StopMember(f"pruned by Optuna at step {metrics['step']}")

        run_trial(spec, report)
        status, reason = store.member_status(sweep.name, name, [member.hash])[member.hash]
        if status == "pruned":
            raise optuna.TrialPruned(reason)
        if status != "ok":
            raise RuntimeError(f"{member.hash}: {status}: {reason}")
        return final_loss(store, sweep.name, name, member.hash)

    return runner


def final_loss(store, sweep: str, study: str, config_hash: str) -> float:
    import pyarrow.parquet as pq

    with store.fs.open_input_file(store.rows_path(sweep, study, config_hash)) as f:
        table = pq.read_table(f, columns=["metric", "value", "step"]).to_pylist()
    losses = sorted((r["step"], r["value"]) for r in table if r["metric"] == "train_loss")
    return losses[-1][1]
