"""The one resource planner: CPU/GPU per trial from the config, and members per trial.

GPU share by model size, so small trials share a GPU: the work of one training step,
6 x params x tokens (FLOPs; a looped block's weights count once per loop iteration), picks
the fraction

    < 1e9  -> 1/8     (launch-bound: eight such trials keep one GPU busy)
    < 1e10 -> 1/4
    < 1e11 -> 1/2
    else   -> 1

A member with device "cpu", or a cluster without GPUs, gets no GPU. Members of equal
resources are packed `pack` to a trial (one process: start-up cost paid once; `auto` picks
the size from the number of members and slots); a GPU trial stacks members that differ only
in their seeds (icl_core.stacked), so those are planned side by side.

`estimate_gpu_seconds`: the wall time of a study's members on one H100-class GPU, from the
same FLOP count and a stated rate model (below); `--dry-run` prints it per study, and the
`gpu` presets are sized by it (<= 20 min a study).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from icl_core.config import MemberConfig
from icl_core.flops import StepShape, step_flops, step_shape

FRACTION_STEPS = ((1e9, 0.125), (1e10, 0.25), (1e11, 0.5))


@dataclass(frozen=True)
class TrialResources:
    cpu: float
    gpu: float

    def bundle(self) -> dict:
        return {"CPU": self.cpu, "GPU": self.gpu} if self.gpu else {"CPU": self.cpu}

    def __str__(self) -> str:
        return f"{self.cpu:g} CPU" + (f" + {self.gpu:g} GPU" if self.gpu else "")


def gpu_fraction(member: MemberConfig) -> float:
    flops = step_flops(member)
    for limit, fraction in FRACTION_STEPS:
        if flops < limit:
            return fraction
    return 1.0


def member_resources(member: MemberConfig, cluster_gpus: float, cpus: float) -> TrialResources:
    if member.device == "cpu" or cluster_gpus <= 0:
        return TrialResources(cpu=cpus, gpu=0.0)
    return TrialResources(cpu=cpus, gpu=min(gpu_fraction(member), cluster_gpus))


WAVES = 4  # auto packing: up to this many trials per CPU slot, so uneven trials still balance
CPU_FLOPS = 2e10  # training FLOP/s of one CPU core, roughly (throughput records: 1-4e10)
MIN_TRIAL_S = 60.0  # auto packing: CPU trials shorter than this are merged (start-up ~3-5 s)


def auto_pack(group: list[MemberConfig], res: TrialResources, cluster_cpus: float,
              cluster_gpus: float) -> int:
    """Members per trial when `--pack auto`.

    GPU trials stack their members: one trial per slot, so stacks are as large as they can be.
    CPU trials: WAVES trials per slot, so a slow trial still leaves others to balance the load,
    but no more trials than there are minutes of estimated training (6 x params x tokens x
    steps at CPU_FLOPS; at least one trial per slot), so start-up (a Ray worker, imports) is
    not paid for a few seconds of training; with a single slot, one trial.
    """
    if res.gpu:
        return max(1, math.ceil(len(group) / max(1, math.floor(cluster_gpus / res.gpu))))
    slots = max(1, math.floor(cluster_cpus / max(res.cpu, 1)))
    if slots == 1:  # trials run back to back: splitting them only adds start-ups
        return len(group)
    seconds = sum(step_flops(m) * m.train.steps for m in group) / (CPU_FLOPS * max(res.cpu, 1))
    trials = min(slots * WAVES, max(slots, math.ceil(seconds / MIN_TRIAL_S)))
    return max(1, math.ceil(len(group) / trials))


def plan_trials(
    members: list[MemberConfig], cluster_gpus: float, cpus: float = 1, pack: int | str = 1,
    cluster_cpus: float = 1, stack: str = "auto",
) -> list[tuple[list[MemberConfig], TrialResources]]:
    """Group members into trials of up to `pack` members with equal resources ("auto": see
    `auto_pack`). Where a trial will stack its members (a GPU trial, or `stack="always"`),
    members that can share a stack (icl_core.stacked.stack_key) are put side by side."""
    from icl_core.stacked import check_stack_mode, stack_key, trial_stack_mode

    if pack != "auto" and (not isinstance(pack, int) or pack < 1):
        raise ValueError(f"pack must be an integer >= 1 or 'auto', got {pack!r}")
    check_stack_mode(stack)
    groups: dict[TrialResources, list[MemberConfig]] = {}
    for member in members:
        groups.setdefault(member_resources(member, cluster_gpus, cpus), []).append(member)
    trials = []
    for res, group in groups.items():
        if trial_stack_mode(stack, res.gpu) == "always":
            keys = {id(m): stack_key(m) or m.hash for m in group}
            order = {key: i for i, key in enumerate(dict.fromkeys(keys.values()))}
            group = sorted(group, key=lambda m: order[keys[id(m)]])  # stable: first seen first
        size = auto_pack(group, res, cluster_cpus, cluster_gpus) if pack == "auto" else pack
        trials += [(group[i:i + size], res) for i in range(0, len(group), size)]
    return trials


# --------------------------------------------------------------- GPU wall-time estimate
# The planner's rate model of one H100-class GPU, eager PyTorch (no torch.compile):
#   one training step of a stack of K members (members differing only in their seeds train as
#   one vmapped model, icl_core.stacked) takes
#       max(STEP_FLOOR_S + LAYER_PASS_S x layer passes,  K x step_flops / GPU_RATE[dtype])
#   Small models are launch-bound: a floor of 2 ms a step (batch sampling, loss, fused Adam,
#   scheduler, Python) plus 0.75 ms per layer pass, forward and backward (~60-90 kernel
#   launches at ~10 us, vmap dispatch included); the one H100 measurement on record (a
#   sparse-retrieval step of 2-6 ms at any N <= 32, docs/REPRODUCTION.md) sits in this range.
#   Large ones pay their FLOPs at 30 % of the dense peak: float32 matmuls run without TF32
#   (PyTorch's default, and the precision studies need full float32), 67 TFLOP/s (H100 SXM
#   FP32), so 2.0e13 FLOP/s; float64 34 TFLOP/s (FP64 without tensor cores); bfloat16
#   ~990 TFLOP/s dense. A looped block counts once per loop iteration (StepShape).
#   L-BFGS (fixed batch, never stacked) runs lbfgs_max_iter closures a step, each iteration
#   walking its history twice with a host read per stored pair (torch.optim.LBFGS passes a
#   tensor as alpha): LBFGS_PAIR_S per pair and walk (a dot, a multiply, an axpy, the read).
#   Evaluation, each member alone, every `eval.every` steps and at the end: one forward over
#   n_prompts per evaluation point in chunks of eval.chunk (and one more per iterative-
#   inference step), max(chunks x (EVAL_FLOOR_S + LAYER_PASS_S / 3 x passes), 2 x params x
#   tokens / rate). Plus STACK_OVERHEAD_S per stack (build, warm-up, the final evaluation's
#   CPU baselines, rows).
# Stacks run one after another on the one GPU: trials sharing it concurrently (the planner
# gives small ones 1/8 GPU) are not credited, nor are stop rules (eval.stop_below,
# train.stop_loss: the cap is estimated), nor ASHA's early stops in a search: an upper bound.
# Not modelled: the ReLU-teacher studies' teacher-network baseline (trained on the CPU at the
# final evaluation), checkpoint writes, Ray start-up.
GPU_PEAK = {"float32": 67e12, "float64": 34e12, "bfloat16": 990e12}
GPU_UTILISATION = 0.3
GPU_RATE = {k: v * GPU_UTILISATION for k, v in GPU_PEAK.items()}
STEP_FLOOR_S = 2e-3
LAYER_PASS_S = 0.75e-3
EVAL_FLOOR_S = 1e-3
LBFGS_PAIR_S = 30e-6
STACK_OVERHEAD_S = 5.0


def _lbfgs_mean_history(iterations: int, history: int) -> float:
    """Mean stored pairs over `iterations` L-BFGS iterations (the history fills, then stays)."""
    if iterations <= history:
        return iterations / 2
    return history - history * history / (2 * iterations)


def _eval_seconds(member: MemberConfig, shape: StepShape) -> float:
    cfg, steps = member.eval, member.train.steps
    evaluations = 1 + ((steps - 1) // cfg.every if cfg.every and steps else 0)
    chunks = math.ceil(cfg.n_prompts / cfg.chunk)
    floor = chunks * (EVAL_FLOOR_S + LAYER_PASS_S / 3 * shape.eval_layers)
    compute = 2.0 * shape.eval_params * shape.seq * cfg.n_prompts / GPU_RATE[member.dtype]
    passes = 1 + max(cfg.infer_steps, default=0)  # iterative inference: a forward per step
    return evaluations * len(cfg.grid) * passes * max(floor, compute)


def estimate_gpu_seconds(members: list[MemberConfig]) -> float:
    """Estimated wall time of `members` on one H100-class GPU, stacked where they can be
    (members that differ only in their seeds share a step); see the rate model above."""
    from icl_core.stacked import stack_key

    stacks: dict[str, list[MemberConfig]] = {}
    for member in members:
        stacks.setdefault(stack_key(member) or member.hash, []).append(member)
    total = 0.0
    for stack in stacks.values():
        first, k = stack[0], len(stack)
        cfg, shape = first.train, step_shape(first)
        floor = STEP_FLOOR_S + LAYER_PASS_S * shape.layers
        step = max(floor, k * step_flops(first) / GPU_RATE[first.dtype])
        if cfg.optimizer == "lbfgs":
            iterations = cfg.steps * cfg.lbfgs_max_iter
            pairs = _lbfgs_mean_history(iterations, cfg.lbfgs_history)
            step = cfg.lbfgs_max_iter * (step + 2 * pairs * LBFGS_PAIR_S)
        total += STACK_OVERHEAD_S + cfg.steps * step
        total += sum(_eval_seconds(m, shape) for m in stack)
    return total
