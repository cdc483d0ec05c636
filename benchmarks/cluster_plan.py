"""Trials of the real planner for the cluster simulator (benchmarks/cluster_sim.py).

`plan_trials_for`: each sweep file's studies planned for a preset (icl_core.running.plans.make_plans),
grid members packed into trials by resources.plan_trials for the simulated cluster (cost-
balanced), each trial's seconds from the cost model (icl_core.planning.cost); a search counts as
num_samples one-point trials per searched point.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

def _checkpoint_s(members, seconds: float) -> float:
    """Seconds between a trial's checkpoints: its estimate over its checkpoints (one every
    train.checkpoint_every steps of each member or stack)."""
    from icl_core.training.stack_rules import stack_key

    stacks = {stack_key(m) or m.hash: m for m in members}.values()
    count = sum(math.ceil(m.train.steps / m.train.checkpoint_every) for m in stacks)
    return seconds / max(count, 1)


PLANS: dict = {}


def sweep_plans(name: str, preset: str, gpus: int = 0):
    """(sweep, its Plans for `preset`, parsed default options); planned once per process, for
    a cluster with GPUs (`gpus` > 0: members' memory held to a GPU's, as `--plan-gpus`) or
    for this machine."""
    from icl.api import Options
    from icl.catalog import load_sweep
    from icl.cli import build_parser
    from icl_core.running.plans import make_plans

    key = (name, preset, gpus > 0)
    if key not in PLANS:
        sweep = load_sweep(name)
        argv = ["--preset", preset, "--dry-run", *(["--plan-gpus", str(gpus)] if gpus else [])]
        args = Options.of(build_parser(sweep).parse_args(argv))
        PLANS[key] = (sweep, make_plans(sweep, args.plan_request()), args)
    return PLANS[key]


def _selected(label: str, only) -> bool:
    return not only or any(label == o or label.split("/")[0] == o for o in only)


def plan_trials_for(trial, sweep_names, preset: str, gpus: int, cpus: float | None = None,
                    only=None) -> list:
    """SimTrials of the real planner: each sweep file's studies planned for `preset` (make_plans),
    grid members packed by plan_trials (cost-balanced with --pack auto) for a cluster of `gpus`
    GPUs (`cpus` CPUs: default 192 per 8 GPUs; with gpus=0, a CPU machine, default 2), each
    trial's seconds from the cost model (icl_core.planning.cost: cached calibrations, else FLOPs); a
    search counts as num_samples one-point trials per searched point. `only`: labels "sweep"
    or "sweep/study" to keep (None: all); `trial`: the class built (schedule.SimTrial)."""
    from icl_core.planning.resources import member_resources
    from icl_core.running.trial_pool import cost_model, study_trials

    if cpus is None:
        cpus = 192 * math.ceil(gpus / 8) if gpus else 2
    out = []
    for name in sweep_names:
        sweep, plans, args = sweep_plans(name, preset, gpus)
        for plan in plans:
            label = f"{sweep.name}/{plan.study.name}"
            if not _selected(label, only):
                continue
            if plan.is_search:  # one trial per Optuna sample; none stack
                model = cost_model(gpus, max(1, int(plan.study.cpus_per_trial)))
                for p in plan.members:
                    res, s = member_resources(p, gpus, plan.study.cpus_per_trial), \
                        model.member_seconds(p)
                    out += [trial(label, s, res.gpu, res.cpu, 1, _checkpoint_s([p], s), s)] \
                        * plan.num_samples
                continue
            model = cost_model(gpus, max(1, int(plan.study.cpus_per_trial)))
            launch = args.launch()
            for t in study_trials(plan, gpus, cpus, launch.pack, launch.stack, launch.target_s,
                                  model=model):
                alone = max(model.member_seconds(m) for m in t.members)
                out.append(trial(label, t.seconds, t.res.gpu, t.res.cpu, len(t.members),
                                 _checkpoint_s(t.members, t.seconds), alone))
    return out
