"""The one resource planner: CPU/GPU per trial from the config, and members per trial.

GPU share by model size, so small trials share a GPU: the work of one training step,
6 x params x tokens (FLOPs), picks the fraction

    < 1e9  -> 1/8     (launch-bound: eight such trials keep one GPU busy)
    < 1e10 -> 1/4
    < 1e11 -> 1/2
    else   -> 1

A member with device "cpu", or a cluster without GPUs, gets no GPU. Members of equal
resources are packed `pack` to a trial (one process: start-up cost paid once).
"""

from __future__ import annotations

import functools
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


def plan_trials(
    members: list[MemberConfig], cluster_gpus: float, cpus: float = 1, pack: int = 1
) -> list[tuple[list[MemberConfig], TrialResources]]:
    """Group members into trials of up to `pack` members with equal resources."""
    if pack < 1:
        raise ValueError("pack must be >= 1")
    groups: dict[TrialResources, list[MemberConfig]] = {}
    for member in members:
        groups.setdefault(member_resources(member, cluster_gpus, cpus), []).append(member)
    return [
        (group[i:i + pack], res)
        for res, group in groups.items()
        for i in range(0, len(group), pack)
    ]
