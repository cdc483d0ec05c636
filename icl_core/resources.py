"""The one resource planner: CPU/GPU per trial from the config, and members per trial.

GPU share by model size, so small trials share a GPU: the work of one training step,
6 x params x tokens (FLOPs), picks the fraction

    < 1e9  -> 1/8     (launch-bound: eight such trials keep one GPU busy)
    < 1e10 -> 1/4
    < 1e11 -> 1/2
    else   -> 1

A member with device "cpu", or a cluster without GPUs, gets no GPU. Members of equal
resources are packed `pack` to a trial (one process: start-up cost paid once; `auto` picks
the size from the number of members and slots); a GPU trial stacks members that differ only
in their seeds (icl_core.stacked), so those are planned side by side.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from icl_core.config import MemberConfig, to_plain

FRACTION_STEPS = ((1e9, 0.125), (1e10, 0.25), (1e11, 0.5))


@dataclass(frozen=True)
class TrialResources:
    cpu: float
    gpu: float

    def bundle(self) -> dict:
        return {"CPU": self.cpu, "GPU": self.gpu} if self.gpu else {"CPU": self.cpu}

    def __str__(self) -> str:
        return f"{self.cpu:g} CPU" + (f" + {self.gpu:g} GPU" if self.gpu else "")


@functools.lru_cache(maxsize=4096)
def _params_and_seq(model_json: str, task_json: str, task_seed: int) -> tuple[int, int]:
    import json

    from icl_core.models import MODELS, num_params
    from icl_core.tasks import TASKS, build_task

    task_cfg = TASKS.resolve(json.loads(task_json), "task")
    task = build_task(task_cfg, task_seed, torch.device("cpu"), torch.float32)
    model_cfg = MODELS.resolve(json.loads(model_json), "model")
    # a model that reads the flattened prompt once (the FFN) applies each weight once per
    # prompt, not once per token
    seq = 1 if getattr(model_cfg, "whole_prompt", False) else task.seq_len
    if hasattr(model_cfg, "param_count"):
        return model_cfg.param_count(task.d_in, task.d_out, task.seq_len), seq
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = MODELS.build(model_cfg, d_in=task.d_in, d_out=task.d_out, max_len=task.seq_len,
                             causal=task.causal)
    return num_params(model), seq


def step_flops(member: MemberConfig) -> float:
    """6 x params x tokens of one training step (the model is built on the meta device)."""
    import json

    params, seq = _params_and_seq(
        json.dumps(to_plain(member.model), sort_keys=True),
        json.dumps(to_plain(member.task), sort_keys=True),
        member.task_seed,
    )
    return 6.0 * params * seq * member.train.batch_size


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
