"""Trials of the real planner for the cluster simulator (benchmarks/cluster_sim.py).

`plan_trials_for`: each sweep file's studies planned for a preset (orchestrate.make_plans),
grid members packed into trials by resources.plan_trials for the simulated cluster, each
trial's seconds from resources.estimate_gpu_seconds on GPUs, or `estimate_cpu_seconds` (the
same floors, FLOPs at resources.CPU_FLOPS a core) on a CPU machine; a search counts as
num_samples one-point trials per searched point (as orchestrate.plan_gpu_seconds). Swap this
module for a calibrated cost model or cost-balanced packing: the simulator only reads the
SimTrials it returns.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

def estimate_cpu_seconds(members, threads: float = 1.0) -> float:
    """Wall time of `members` trained one after another on `threads` CPU cores (what
    `--stack auto` does on a CPU): the GPU rate model's per-step and per-evaluation floors
    (eager dispatch, icl_core.resources) with the FLOPs paid at resources.CPU_FLOPS per core."""
    from icl_core import resources as r
    from icl_core.flops import step_flops, step_shape

    rate = r.CPU_FLOPS * max(threads, 1.0)
    total = 0.0
    for member in members:
        cfg, ev, shape = member.train, member.eval, step_shape(member)
        step = max(r.STEP_FLOOR_S + r.LAYER_PASS_S * shape.layers, step_flops(member) / rate)
        if cfg.optimizer == "lbfgs":
            pairs = r._lbfgs_mean_history(cfg.steps * cfg.lbfgs_max_iter, cfg.lbfgs_history)
            step = cfg.lbfgs_max_iter * (step + 2 * pairs * r.LBFGS_PAIR_S)
        evaluations = 1 + ((cfg.steps - 1) // ev.every if ev.every and cfg.steps else 0)
        floor = math.ceil(ev.n_prompts / ev.chunk) * (
            r.EVAL_FLOOR_S + r.LAYER_PASS_S / 3 * shape.eval_layers)
        forward = 2.0 * shape.eval_params * shape.seq * ev.n_prompts / rate
        passes = 1 + max(ev.infer_steps, default=0)
        total += r.STACK_OVERHEAD_S + cfg.steps * step
        total += evaluations * len(ev.grid) * passes * max(floor, forward)
    return total


def _checkpoint_s(members, seconds: float) -> float:
    """Seconds between a trial's checkpoints: its estimate over its checkpoints (one every
    train.checkpoint_every steps of each member or stack)."""
    from icl_core.stacked import stack_key

    stacks = {stack_key(m) or m.hash: m for m in members}.values()
    count = sum(math.ceil(m.train.steps / m.train.checkpoint_every) for m in stacks)
    return seconds / max(count, 1)


PLANS: dict = {}


def sweep_plans(name: str, preset: str):
    """(sweep, its Plans for `preset`, parsed default options); planned once per process."""
    from icl_core.catalog import load_sweep
    from icl_core.cli import build_parser
    from icl_core.orchestrate import make_plans

    if (name, preset) not in PLANS:
        sweep = load_sweep(name)
        args = build_parser(sweep).parse_args(["--preset", preset, "--dry-run"])
        PLANS[name, preset] = (sweep, make_plans(sweep, args), args)
    return PLANS[name, preset]


def _selected(label: str, only) -> bool:
    return not only or any(label == o or label.split("/")[0] == o for o in only)


def plan_trials_for(trial, sweep_names, preset: str, gpus: int, cpus: float | None = None,
                    only=None) -> list:
    """SimTrials of the real planner: each sweep file's studies planned for `preset` (make_plans),
    grid members packed into trials by plan_trials for a cluster of `gpus` GPUs (`cpus` CPUs:
    default 192 per 8 GPUs; with gpus=0, a CPU machine, default 2), each trial's seconds from
    estimate_gpu_seconds (on GPUs) or estimate_cpu_seconds (CPU only); a search counts as
    num_samples one-point trials per searched point (as orchestrate.plan_gpu_seconds).
    `only`: labels "sweep" or "sweep/study" to keep (None: all); `trial`: the class built
    (cluster_sim.SimTrial)."""
    from icl_core.orchestrate import study_trials
    from icl_core.resources import estimate_gpu_seconds, member_resources

    if cpus is None:
        cpus = 192 * math.ceil(gpus / 8) if gpus else 2

    def seconds(group, res) -> float:
        return estimate_gpu_seconds(group) if gpus else estimate_cpu_seconds(group, res.cpu)

    out = []
    for name in sweep_names:
        sweep, plans, args = sweep_plans(name, preset)
        for plan in plans:
            label = f"{sweep.name}/{plan.study.name}"
            if not _selected(label, only):
                continue
            if plan.is_search:  # one trial per Optuna sample; none stack
                groups = [([p], member_resources(p, gpus, plan.study.cpus_per_trial),
                           plan.num_samples) for p in plan.members]
            else:
                groups = [(g, res, 1) for g, res in study_trials(plan, args, gpus, cpus)]
            for group, res, copies in groups:
                s = seconds(group, res)
                alone = max(seconds([m], res) for m in group) if len(group) > 1 else s
                out += [trial(label, s, res.gpu, res.cpu, len(group), _checkpoint_s(group, s),
                              alone)] * copies
    return out
