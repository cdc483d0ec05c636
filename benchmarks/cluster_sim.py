"""Cluster simulator: how long would a sweep take on N GPUs, study by study or as one pool?

    python benchmarks/cluster_sim.py                        # every file's paper preset, 8/64/256 GPUs
    python benchmarks/cluster_sim.py --gpus 64 --only depth_scaling/least_squares
    python benchmarks/cluster_sim.py --cpus 2 --preset cpu --only preconditioned_gd

The interface is small so that a calibrated cost model, cost-balanced packing or a one-pool
launcher can be swapped in: a trial is a `SimTrial` (study, estimated seconds, GPU and CPU
share), `simulate(trials, devices, policy)` returns a `SimResult`; `plan_trials_for` builds the
trials from the real planner (benchmarks/cluster_plan.py: resources.plan_trials with the cost
model, icl_core.planning.cost).

The model (placement, order, start-up, failures, accounting) is stated in icl_core/planning/schedule.py,
where the simulator lives (`--dry-run` uses it too).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from icl_core.planning.schedule import POLICIES, SimResult, SimTrial, lower_bound, simulate  # noqa: E402,F401


def plan_trials_for(sweep_names, preset: str, gpus: int, cpus: float | None = None,
                    only=None) -> list[SimTrial]:
    """SimTrials from the real planner (benchmarks/cluster_plan.py states how)."""
    return _planner().plan_trials_for(SimTrial, sweep_names, preset, gpus, cpus, only)


def _planner():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cluster_plan

    return cluster_plan


# ------------------------------------------------------------------------------ the table
def _row(name: str, devices: int, trials, kw) -> str:
    by, pool = (simulate(trials, devices, policy, **kw) for policy in POLICIES)
    share = sum((t.gpu or t.cpu) * t.seconds for t in trials) / 3600
    return (f"| {name} | {devices} | {len(trials)} | {share:,.1f} | {pool.lower_bound_s / 3600:,.2f} "
            f"| {by.makespan_s / 3600:,.2f} | {by.utilisation:.0%} | {by.ratio:.2f} "
            f"| {pool.makespan_s / 3600:,.2f} | {pool.utilisation:.0%} | {pool.ratio:.2f} |")


def report(trials, devices: int, kw, unit: str) -> None:
    """One table row per sweep file and one for all of them; then the longest trials."""
    print(f"| file | {unit}s | trials | {unit}-h | lower bound h | by_study h | util | x LB "
          "| pool h | util | x LB |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    files: dict[str, list] = {}
    for t in trials:
        files.setdefault(t.study.split("/")[0], []).append(t)
    for name, own in files.items():
        print(_row(name, devices, own, kw))
    if len(files) > 1:
        print(_row("**all files**", devices, trials, kw))
    hours = sum(t.seconds for t in trials) / 3600
    print(f"\n{unit}-h: share x estimated hours, start-ups excluded; the planner's own total "
          f"(every trial on a whole device, one after another): {hours:,.1f} h")
    pool = simulate(trials, devices, "pool", **kw)
    member = max(t.longest_member_s or t.seconds for t in trials) + kw.get("startup_s", 10.0)
    target = max(pool.work_s / devices, member)
    print(f"with every member its own trial (same work): max(work / {unit}s, longest member) = "
          f"{target / 3600:,.2f} h; today's pool is {pool.makespan_s / target:.2f}x that")
    print("longest trials (they bound the pool's makespan):")
    for t in sorted(trials, key=lambda t: -t.seconds)[:5]:
        alone = f"; its longest member alone {t.longest_member_s / 3600:.2f} h" if (
            t.longest_member_s is not None and t.members > 1) else ""
        print(f"  {t.seconds / 3600:8.2f} h  {t.study}: {t.members} member(s), {t.gpu:g} GPU, "
              f"{t.cpu:g} CPU{alone}")


def main(argv: list[str] | None = None) -> int:
    from icl.catalog import sweep_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--preset", default="paper")
    add("--gpus", type=int, nargs="+", default=[8, 64, 256])
    add("--cpus", type=int, help="simulate a CPU machine with this many cores instead of GPUs")
    add("--only", nargs="+", metavar="SWEEP[/STUDY]")
    for flag, default in (("failure-rate", 0.0), ("startup-s", 10.0), ("restart-s", 30.0)):
        add(f"--{flag}", type=float, default=default)  # failure rate: per trial-hour
    add("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    kw = {"startup_s": args.startup_s, "failure_rate": args.failure_rate,
          "restart_s": args.restart_s, "seed": args.seed}
    start = time.perf_counter()
    names = sorted({o.split("/")[0] for o in args.only}) if args.only else sweep_names()
    for name in names:
        _planner().sweep_plans(name, args.preset, 0 if args.cpus else max(args.gpus))
    print(f"make_plans of {len(names)} sweep file(s) [{args.preset}]: "
          f"{time.perf_counter() - start:.1f} s (imports included)")
    for gpus, cpus in [(0, args.cpus)] if args.cpus else [(g, None) for g in args.gpus]:
        start = time.perf_counter()
        trials = plan_trials_for(names, args.preset, gpus, cpus, args.only)
        planned = time.perf_counter() - start
        devices, unit = (gpus, "GPU") if gpus else (cpus, "CPU")
        print(f"\n### {args.preset} preset on {devices} {unit}s (plan_trials and estimates: "
              f"{planned:.1f} s; failures {args.failure_rate:g} per trial-hour)\n")
        start = time.perf_counter()
        report(trials, devices, kw, unit)
        if not gpus:  # to compare with a measured `python sweeps/X.py --preset cpu`
            pool = simulate(trials, devices, "pool", **kw).makespan_s
            print(f"predicted wall time, one pool as the sweep files run: {pool:.0f} s")
        print(f"(simulated in {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
