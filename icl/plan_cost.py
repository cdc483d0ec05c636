"""What a plan costs, printed before anything runs (`--dry-run`, the catalog): per study its
trials, packing, resources, device-hours by the cost model (icl_core.planning.cost; on a plan without
GPUs, also its wall time on one GPU by the same model), the peak memory of its largest member
(icl_core.planning.memory), with the grid values, the base config off its defaults and what is already
finished; in total the wall time on the planned cluster (icl_core.planning.schedule, one pool longest
first) against the lower bound. And the size limit above which a launch needs --yes.
"""

from __future__ import annotations

from icl_core.planning.schedule import SimTrial
from icl_core.running.plans import Plan, plan_gpu_seconds
from icl_core.running.trial_pool import cluster_cpus, study_trials
from icl_core.spec.config import ConfigError

LAUNCH_LIMITS = (10_000, 1_000.0)  # configs, GPU-hours: above either, a launch needs --yes


def check_size(plans: list[Plan], args) -> None:
    """A plan above LAUNCH_LIMITS is launched only with --yes (a typo in a grid can ask for
    thousands of GPU-hours)."""
    configs = sum(p.trials for p in plans)
    hours = sum(plan_gpu_seconds(p) for p in plans) / 3600
    if not args.yes and (configs > LAUNCH_LIMITS[0] or hours > LAUNCH_LIMITS[1]):
        raise ConfigError(
            f"this plan is {configs} configs, ~{hours:.0f} GPU-hours by the cost model (limits "
            f"{LAUNCH_LIMITS[0]} configs, {LAUNCH_LIMITS[1]:.0f} h): check it with --dry-run, "
            "then pass --yes to launch it")


def gpu_time(seconds: float) -> str:
    return f"~{seconds / 60:.1f} GPU-min" + (f" ({seconds / 3600:.1f} GPU-h)"
                                             if seconds >= 3600 else "")


def planned_cluster(args) -> tuple[float, float]:
    """(GPUs, CPUs) the plan is for: --plan-gpus / --plan-cpus, else this machine's."""
    from icl_core.running.plans import planned_gpus

    gpus = planned_gpus(args.plan_gpus)
    cpus = args.plan_cpus if args.plan_cpus is not None else cluster_cpus()
    return gpus, cpus


def print_plan(sweep, plans: list[Plan], args, store=None) -> PlanCost:
    """Per study: trials, members per trial (and whether they stack), resources, the cost
    model's device-hours (on a plan without GPUs, also its time on one GPU: `on_one_gpu`) and
    its largest member's peak memory (`memory_line`); with the store, also each study's grid
    values, its base config's fields off their defaults and what is already finished
    (`plan_details`). Returns the plan's cost (its total: `PlanCost.summary`)."""
    from icl_core.running.trial_pool import cost_model
    from icl_core.training.stack_rules import stack_groups, trial_stack_mode

    gpus, cpus = planned_cluster(args)
    cost = PlanCost(gpus, cpus)
    for plan in plans:
        study = plan.study
        model = cost_model(gpus, max(1, int(study.cpus_per_trial)), store,
                           [(sweep.name, study.name, plan.members)] if store else ())
        estimate = plan_gpu_seconds(plan, model if gpus else None)
        label = f"{sweep.name}/{study.name}"
        if plan.is_search:
            trials = [SimTrial(label, model.member_seconds(p), *member_share(p, gpus, study))
                      for p in plan.members for _ in range(plan.num_samples)]
            cost.add(plan, estimate, trials)
            print(f"{sweep.name}/{study.name} [{args.preset}]: {plan.trials} trials "
                  f"({len(plan.members)} searches x {plan.num_samples} Optuna trials), "
                  f"1 member per trial, {cost.hours(trials)}{on_one_gpu(estimate, gpus)} -- "
                  f"{study.doc}")
            print(memory_line(plan, gpus))
            if store is not None:
                plan_details(sweep, plan, args, store)
            continue
        launch = args.launch()
        planned = study_trials(plan, gpus, cpus, launch.pack, launch.stack, launch.target_s,
                               model=model)
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
                      if stacked else "one after another")
                   + (", a trial's stacks side by side in one process"
                      if any(t.interleave for t in planned) else ""))
        print(f"{sweep.name}/{study.name} [{args.preset}]: {len(planned)} trials "
              f"({len(plan.members)} configs), {packing}, {' | '.join(kinds)} per trial, "
              f"{cost.hours(trials)}{on_one_gpu(estimate, gpus)} -- {study.doc}")
        print(memory_line(plan, gpus))
        if store is not None:
            plan_details(sweep, plan, args, store)
    return cost


def on_one_gpu(seconds: float, gpus: float) -> str:
    """A plan without GPUs also says its time on one GPU by the same cost model (on a GPU plan
    its device-hours are that already)."""
    return "" if gpus else f", {gpu_time(seconds)} on one GPU"


def largest_memory(plan: Plan, gpus: float):
    """(largest member, its MemoryEstimate, the bytes it must fit, where) of a study
    (icl_core.planning.memory), or None when nothing is left to run."""
    from icl_core.planning.memory import member_memory, memory_limit

    if not plan.members:
        return None
    member = max(plan.members, key=lambda m: member_memory(m).total)
    limit, where = memory_limit(member, gpus)
    return member, member_memory(member), limit, where


def memory_line(plan: Plan, gpus: float) -> str:
    """The peak memory of a study's largest member (icl_core.planning.memory) and what it must fit."""
    from icl_core.planning.memory import human

    found = largest_memory(plan, gpus)
    if found is None:
        return "  memory: nothing left to run"
    member, estimate, limit, where = found
    return (f"  memory: ~{estimate} at peak, largest member "
            f"{member.hash[:8]}; fits {human(limit)} ({where})")


STARTUP_S = 10.0  # a trial's start-up in the dry run's schedule (a Ray worker, imports)


def device_hours(trials: list[SimTrial]) -> float:
    """Share x seconds: a trial on 1/4 GPU for an hour is 0.25 GPU-h; on CPUs, CPUs x hours."""
    return sum((t.gpu or t.cpu) * t.seconds for t in trials) / 3600


def member_share(member, gpus: float, study) -> tuple[float, float]:
    """(GPU share, CPUs) of a one-member trial (a search's)."""
    from icl_core.planning.resources import member_resources

    res = member_resources(member, gpus, study.cpus_per_trial)
    return res.gpu, res.cpu


class PlanCost:
    """The cost of a plan (one or several files): its trials (icl_core.planning.schedule.SimTrial), the
    H100 estimate, configs; `summary` simulates them as one pool, longest first, on the
    planned cluster (icl_core.planning.schedule) against the lower bound."""

    def __init__(self, gpus: float, cpus: float):
        self.gpus, self.cpus = gpus, cpus
        self.trials: list[SimTrial] = []
        self.h100_s, self.configs, self.studies = 0.0, 0, 0
        self.by_study: list[tuple] = []  # (plan, H100 seconds, trials): icl.outcome

    def add(self, plan: Plan, h100_s: float, trials: list) -> None:
        self.trials += trials
        self.h100_s += h100_s
        self.configs += plan.trials
        self.studies += 1
        self.by_study.append((plan, h100_s, trials))

    def merge(self, other: PlanCost) -> None:
        self.trials += other.trials
        self.h100_s += other.h100_s
        self.configs += other.configs
        self.studies += other.studies
        self.by_study += other.by_study

    @property
    def unit(self) -> str:
        return "GPU-h" if self.gpus else "CPU-h"

    def hours(self, trials: list) -> str:
        return f"~{device_hours(trials):.3g} {self.unit} by the cost model"

    @property
    def device_hours(self) -> float:
        return device_hours(self.trials)

    def schedule(self, trials: list | None = None):
        """`trials` (default: all of the plan) as one pool, longest first, on the planned
        cluster (icl_core.planning.schedule.SimResult)."""
        from icl_core.planning.schedule import simulate

        devices = max(1, int(self.gpus or self.cpus))
        return simulate(self.trials if trials is None else trials, devices, "pool",
                        startup_s=STARTUP_S)

    def summary(self) -> str:
        where = f"{self.gpus:g} GPU(s)" if self.gpus else f"{self.cpus:g} CPU(s), no GPU"
        sched = self.schedule()
        return (f"{len(self.trials)} trials in {self.studies} studies: {self.device_hours:.3g} "
                f"{self.unit} of work; on {where}, one pool longest first: "
                f"~{sched.makespan_s / 3600:.3g} h wall, utilisation "
                f"{sched.utilisation:.0%}, lower bound {sched.lower_bound_s / 3600:.3g} h "
                f"(x{sched.makespan_s / max(sched.lower_bound_s, 1e-9):.2f})"
                + ("" if self.gpus else f"; {gpu_time(self.h100_s)} on one GPU by the cost "
                   "model"))


def study_grid(plan: Plan, args) -> dict:
    """A study's grid as planned, by axis ("a,b" for a zipped axis, its values pairs): as
    make_plans built the members (--set, --sweep; --num-samples replaces the seed axis); a
    search's without its seeds (its --num-samples counts its trials)."""
    from icl_core.running.plans import parse_sets, parse_sweeps
    from icl_core.spec.study import apply_preset

    study = plan.study
    if plan.is_search:
        _, grid = apply_preset(study.base, study.grid, study.presets, args.preset,
                               parse_sets(args.set))
        grid = {k: v for k, v in grid.items() if k != "seed"}
    else:
        _, grid = study.base_and_grid(args.preset, parse_sets(args.set), args.num_samples,
                                      parse_sweeps(args.sweep))
    return {",".join(k) if isinstance(k, tuple) else k: v for k, v in grid.items()}


def finished_count(sweep, plan, store) -> int:
    """Configs (a search: Optuna trials) of the plan already in the store."""
    if not plan.is_search:
        return len(store.finished(sweep.name, plan.study.name, [m.hash for m in plan.members]))
    from icl_core.running.optuna_searcher import finished_trials, journal_path, journal_study_name

    journal = journal_path(store.uri, sweep.name, plan.study.name)
    return sum(finished_trials(journal, journal_study_name(journal, sweep.name, plan.study.name, p))
               for p in plan.members)


def plan_details(sweep, plan: Plan, args, store) -> None:
    """Under a study's plan line: the grid's values, the base config's fields off their
    defaults (names of task and model always) and how much is already finished (and how many
    of the others go on from a checkpoint)."""
    from icl_core.running.store_checkpoints import resumable
    from icl_core.spec.config import flatten

    study = plan.study
    grid = study_grid(plan, args)
    if grid:
        print("  grid: " + "; ".join(f"{k} = {v}" for k, v in grid.items()))
    if plan.is_search:
        print("  searched: " + "; ".join(f"{k} {v}" for k, v in study.space.items()))
    axes = {k for key in grid for k in key.split(",")} | set(getattr(study, "space", ()))
    first = plan.members[0]
    defaults, flat = first.defaults(), flatten(first.to_dict())
    off = {k: v for k, v in flat.items() if k not in axes and (
        k in ("task.name", "model.name") or k not in defaults or defaults[k] != v)}
    print("  base (off the defaults): " + ", ".join(f"{k}={v}" for k, v in off.items()))
    done = finished_count(sweep, plan, store)
    if plan.is_search:
        print(f"  finished: {done} of {plan.trials} Optuna trials in {store.redacted}")
        return
    resuming = len(resumable(store, sweep.name, plan.study.name, [m.hash for m in plan.members]))
    print(f"  finished: {done} of {len(plan.members)} configs in {store.redacted} "
          f"(a run trains the other {len(plan.members) - done}"
          + (f", {resuming} with a checkpoint to go on from)" if resuming else ")"))
