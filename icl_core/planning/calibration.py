"""Calibration: timing a member's optimizer steps on the device that will run it (warm-up,
then the best of REPEATS timings), and teaching a CostModel (icl_core.planning.cost) the step times,
and on a GPU the peak memory and utilisation, of the shapes it does not know yet. A member
that cannot be built or trained raises CalibrationFailed: one line, never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import time

from icl_core.planning.cost import CostModel, shape_key
from icl_core.spec.config import MemberConfig
from icl_core.training.flops import step_cost_flops

CALIBRATION_STEPS = 4
WARMUP_STEPS = 2
REPEATS = 3
STACK_PROBE = 4  # members in a calibration stack


def _timed_steps(trainer, steps: int, device) -> float:
    """Seconds per step: the best of REPEATS timings of `steps` steps after warm-up (the
    minimum: other work on the node only ever adds time)."""
    import torch

    from icl_core.training.train import train_until

    train_until(trainer, trainer.step + WARMUP_STEPS)
    best = math.inf
    for _ in range(REPEATS):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        train_until(trainer, trainer.step + steps)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def measure(member: MemberConfig, stack: int = 1, steps: int = CALIBRATION_STEPS) -> float:
    """Seconds per optimizer step of `member` (or a stack of `stack` copies differing in their
    seeds) on its own device, timed after warm-up steps."""
    from icl_core.training.stacked import StackedRun
    from icl_core.training.train import MemberRun

    long = dataclasses.replace(member, train=dataclasses.replace(
        member.train, steps=max(member.train.steps, WARMUP_STEPS + REPEATS * steps + 1), stop_loss=None))
    runs = [MemberRun(dataclasses.replace(long, seed=long.seed + i)) for i in range(stack)]
    trainer = runs[0] if stack == 1 else StackedRun(runs)
    return _timed_steps(trainer, steps, runs[0].device)


class CalibrationFailed(Exception):
    """A member could not be built or trained for its calibration: its hash and the short
    error (one line; the caller names its sweep and study)."""

    def __init__(self, member_hash: str, error: str):
        super().__init__(member_hash, error)
        self.member_hash, self.error = member_hash, error

    def __str__(self) -> str:
        return f"{self.member_hash[:8]}: {self.error}"


def short_error(exc: BaseException, limit: int = 200) -> str:
    """`Type: first line of the message`, at most `limit` characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return line if len(line) <= limit else line[:limit - 3] + "..."


def calibrate(model: CostModel, members: list[MemberConfig], stacks: bool = False,
              budget_s: float = 60.0) -> int:
    """Time each distinct shape of `members` not yet known (alone; with `stacks`, also a stack
    of STACK_PROBE where members can stack), largest models first, within `budget_s`; the
    rest keep the FLOP estimate. Returns how many shapes were measured; a member that cannot be
    built or trained raises CalibrationFailed (its hash and the short error)."""
    import torch

    from icl_core.training.stack_rules import stack_key

    shapes: dict[str, MemberConfig] = {}
    for member in members:
        if member.model.trainable and member.train.steps:
            shapes.setdefault(shape_key(member), member)
    todo = [m for k, m in shapes.items() if k not in model.table]
    todo.sort(key=step_cost_flops, reverse=True)
    deadline, done = time.monotonic() + budget_s, 0
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, model.threads))  # the trial's threads, not the driver's
    try:
        for member in todo:
            if time.monotonic() > deadline:
                break
            try:
                stacked = {STACK_PROBE: measure(member, STACK_PROBE)} \
                    if stacks and stack_key(member) else None
                if torch.cuda.is_available() and model.on_gpu:
                    torch.cuda.reset_peak_memory_stats()
                alone = measure(member)
            except Exception as exc:  # noqa: BLE001  (any error of building or training it)
                raise CalibrationFailed(member.hash, short_error(exc)) from None
            model.learn(member, alone, stacked, **gpu_footprint(model, member, alone))
            done += 1
    finally:
        torch.set_num_threads(threads)
    return done


def gpu_footprint(model: CostModel, member: MemberConfig, step_s: float) -> dict:
    """On a GPU, after `measure(member)`: its peak memory, the share of the matmul peak it
    achieved, and the device's memory (for GPU shares); {} elsewhere."""
    import torch

    if not (model.on_gpu and torch.cuda.is_available()):
        return {}
    from icl_core.common.device import resolve_dtype
    from icl_core.training.flops import step_flops
    from icl_core.training.throughput import matmul_peak

    device = torch.device("cuda")
    model.device_memory_mb = torch.cuda.get_device_properties(device).total_memory / 2**20
    peak = matmul_peak(device, resolve_dtype(member.dtype))
    return {"memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "busy": step_flops(member) / step_s / peak if peak else None}
