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
from icl_core.schedule import SimTrial
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
    add("--plan-cpus", type=float, default=None,
        help="--dry-run: plan for a cluster with this many CPUs (default: this machine's)")
    add("--trial-minutes", type=float, default=None,
        help="--pack auto: a trial's planned duration (default: 3 on CPUs, 15 on GPUs)")
    add("--yes", action="store_true",
        help="launch a plan above 10,000 configs or 1,000 H100-hours (see --dry-run)")
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


def main(sweep, argv: list[str] | None = None) -> int:
    """Parse, plan, then print the plan (--dry-run) or run it; the exit status."""
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
        cost = print_plan(sweep, plans, args)
        print(f"total: {cost.summary()}")
        return 0
    if args.optuna_journal:
        return run_standalone(sweep, plans, store, args)
    try:
        check_size(plans, args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_plans([(sweep, plans)], store, args)


LAUNCH_LIMITS = (10_000, 1_000.0)  # configs, H100-hours: above either, a launch needs --yes


def check_size(plans: list[Plan], args) -> None:
    """A plan above LAUNCH_LIMITS is launched only with --yes (a typo in a grid can ask for
    thousands of GPU-hours)."""
    configs = sum(p.trials for p in plans)
    hours = sum(plan_gpu_seconds(p) for p in plans) / 3600
    if not args.yes and (configs > LAUNCH_LIMITS[0] or hours > LAUNCH_LIMITS[1]):
        raise ConfigError(
            f"this plan is {configs} configs, ~{hours:.0f} H100-hours (limits "
            f"{LAUNCH_LIMITS[0]} configs, {LAUNCH_LIMITS[1]:.0f} h): check it with --dry-run, "
            "then pass --yes to launch it")


def gpu_time(seconds: float) -> str:
    return f"~{seconds / 60:.1f} GPU-min" + (f" ({seconds / 3600:.1f} GPU-h)"
                                             if seconds >= 3600 else "")


def planned_cluster(args) -> tuple[float, float]:
    """(GPUs, CPUs) the plan is for: --plan-gpus / --plan-cpus, else this machine's."""
    import torch

    gpus = args.plan_gpus if args.plan_gpus is not None else float(torch.cuda.device_count())
    cpus = args.plan_cpus if getattr(args, "plan_cpus", None) is not None else cluster_cpus()
    return gpus, cpus


def print_plan(sweep, plans: list[Plan], args) -> PlanCost:
    """Per study: trials, members per trial (and whether they stack), resources, the cost
    model's device-hours and the estimate on one H100-class GPU; then the file's total with
    its wall time on the planned cluster (`print_total`). Returns the plan's cost."""
    from icl_core.pool import cost_model
    from icl_core.stacked import stack_groups, trial_stack_mode

    gpus, cpus = planned_cluster(args)
    cost = PlanCost(gpus, cpus)
    for plan in plans:
        study = plan.study
        model = cost_model(gpus, max(1, int(study.cpus_per_trial)))
        estimate = plan_gpu_seconds(plan)
        label = f"{sweep.name}/{study.name}"
        if plan.is_search:
            trials = [SimTrial(label, model.member_seconds(p), *member_share(p, gpus, study))
                      for p in plan.members for _ in range(plan.num_samples)]
            cost.add(plan, estimate, trials)
            print(f"{sweep.name}/{study.name} [{args.preset}]: {plan.trials} trials "
                  f"({len(plan.members)} searches x {plan.num_samples} Optuna trials), "
                  f"1 member per trial, {cost.hours(trials)}, {gpu_time(estimate)} on one "
                  f"H100 -- {study.doc}")
            continue
        planned = study_trials(plan, args, gpus, cpus)
        trials = [SimTrial(label, t.seconds, t.res.gpu, t.res.cpu, len(t.members))
                  for t in planned]
        cost.add(plan, estimate, trials)
        kinds = sorted({str(t.res) for t in planned})
        sizes = sorted({len(t.members) for t in planned})
        how = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        stacks = [len(g) for t in planned
                  for g in stack_groups(t.members, trial_stack_mode(t.stack, t.res.gpu))]
        stacked = sum(1 for n in stacks if n > 1)
        packing = (f"{how} member(s) per trial (--pack {args.pack}), "
                   + (f"{stacked} stacks of {max(stacks)} or fewer trained at once"
                      if stacked else "one after another"))
        print(f"{sweep.name}/{study.name} [{args.preset}]: {len(planned)} trials "
              f"({len(plan.members)} configs), {packing}, {' | '.join(kinds)} per trial, "
              f"{cost.hours(trials)}, {gpu_time(estimate)} on one H100 -- {study.doc}")
    return cost


STARTUP_S = 10.0  # a trial's start-up in the dry run's schedule (a Ray worker, imports)


def device_hours(trials: list[SimTrial]) -> float:
    """Share x seconds: a trial on 1/4 GPU for an hour is 0.25 GPU-h; on CPUs, CPUs x hours."""
    return sum((t.gpu or t.cpu) * t.seconds for t in trials) / 3600


def member_share(member, gpus: float, study) -> tuple[float, float]:
    """(GPU share, CPUs) of a one-member trial (a search's)."""
    from icl_core.resources import member_resources

    res = member_resources(member, gpus, study.cpus_per_trial)
    return res.gpu, res.cpu


class PlanCost:
    """The cost of a plan (one or several files): its trials (icl_core.schedule.SimTrial), the
    H100 estimate, configs; `summary` simulates them as one pool, longest first, on the
    planned cluster (icl_core.schedule) against the lower bound."""

    def __init__(self, gpus: float, cpus: float):
        self.gpus, self.cpus = gpus, cpus
        self.trials: list[SimTrial] = []
        self.h100_s, self.configs, self.studies = 0.0, 0, 0

    def add(self, plan: Plan, h100_s: float, trials: list) -> None:
        self.trials += trials
        self.h100_s += h100_s
        self.configs += plan.trials
        self.studies += 1

    def merge(self, other: PlanCost) -> None:
        self.trials += other.trials
        self.h100_s += other.h100_s
        self.configs += other.configs
        self.studies += other.studies

    @property
    def unit(self) -> str:
        return "GPU-h" if self.gpus else "CPU-h"

    def hours(self, trials: list) -> str:
        return f"~{device_hours(trials):.3g} {self.unit} by the cost model"

    @property
    def device_hours(self) -> float:
        return device_hours(self.trials)

    def summary(self) -> str:
        from icl_core.schedule import simulate

        devices = max(1, int(self.gpus or self.cpus))
        where = f"{self.gpus:g} GPU(s)" if self.gpus else f"{self.cpus:g} CPU(s), no GPU"
        sched = simulate(self.trials, devices, "pool", startup_s=STARTUP_S)
        return (f"{len(self.trials)} trials in {self.studies} studies: {self.device_hours:.3g} "
                f"{self.unit} of work; on {where}, one pool longest first: "
                f"~{sched.makespan_s / 3600:.3g} h wall, utilisation "
                f"{sched.utilisation:.0%}, lower bound {sched.lower_bound_s / 3600:.3g} h "
                f"(x{sched.makespan_s / max(sched.lower_bound_s, 1e-9):.2f}); "
                f"{gpu_time(self.h100_s)} on one H100-class GPU (planner estimate)")
