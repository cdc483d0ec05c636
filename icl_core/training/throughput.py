"""Per-member throughput records: step time, tokens/s, peak memory, achieved FLOP/s and its
fraction of the node's matmul peak.

Achieved FLOP/s counts the planner's work per step (`resources.step_flops`: 6 x params x
tokens, the usual training estimate; attention's T^2 terms are left out, so short ICL prompts
are counted fairly and long ones under-counted); in a stack each member reports its own
share (the stack's rate is `stack_size` times it). The node's peak is measured, not taken from a
data sheet: the best rate of a square matmul in the member's dtype on its device with the
trial's thread count, measured once per node and kept in a small JSON file
($ICL_CACHE, else ~/.cache/icl_core/matmul_peak.json; a lock keeps concurrent trials of one node
from measuring at once, which would halve what each sees).
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import socket
import time
from pathlib import Path

import torch

from icl_core.common.device import precision_scope

SIZES = {"cpu": 512, "cuda": 4096}  # square matmul side: large enough to reach the peak


def cache_file() -> Path:
    root = os.environ.get("ICL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "icl_core")
    return Path(root) / "matmul_peak.json"


def _measure(device: torch.device, dtype: torch.dtype, seconds: float = 0.3) -> float:
    n = SIZES.get(device.type, 2048)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    best, deadline = 0.0, time.perf_counter() + seconds
    for i in range(1000):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - t0
        if i:  # the first call warms up
            best = max(best, 2.0 * n**3 / elapsed)
        if i >= 3 and time.perf_counter() > deadline:
            break
    return best


def matmul_peak(device: torch.device, dtype: torch.dtype, precision: str = "fp32"
                ) -> float | None:
    """This node's measured matmul FLOP/s for `dtype` on `device` under the training
    `precision` (fp32, tf32, bf16: icl_core.common.device.precision_scope; threads: torch's
    current setting), from the cache or measured now and cached; None where the cache cannot
    be written (a record never costs a member its rows). Each precision has its own entry: a
    TF32 member's share is of the TF32 peak, not the float32 one."""
    try:
        return _cached_peak(device, dtype, precision)
    except OSError:
        return None


def _cached_peak(device: torch.device, dtype: torch.dtype, precision: str = "fp32") -> float:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    key = f"{socket.gethostname()}|{name}|{dtype}|threads={torch.get_num_threads()}" + \
        (f"|{precision}" if precision != "fp32" else "")  # fp32: the entries before precisions
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement per node at a time
        try:
            known = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:  # a damaged cache is measured again
            known = {}
        if key not in known:
            with precision_scope(precision, device):
                known[key] = _measure(device, dtype)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            os.replace(tmp, path)
    return known[key]


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> tuple[float, str]:
    """(MiB, what it is): the peak CUDA allocation since the member started, or on a CPU the
    process's peak resident set (the whole trial's so far; Linux reports KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_rss"


def records(member, run) -> dict:
    """The throughput columns of a member's rows (None where it did not train)."""
    from icl_core.training.flops import step_flops

    empty = {"step_time_s": None, "tokens_per_s": None, "achieved_flops": None,
             "matmul_peak_flops": None, "flops_fraction": None, "peak_memory_mb": None,
             "peak_memory_kind": None}
    if run is None:
        return empty
    memory, kind = peak_memory_mb(run.device)
    out = {**empty, "peak_memory_mb": memory, "peak_memory_kind": kind}
    if run.train_seconds <= 0 or run.steps_timed <= 0:
        return out
    achieved = step_flops(member) * run.steps_timed / run.train_seconds
    peak = matmul_peak(run.device, run.dtype, member.train.precision)
    return {**out, "step_time_s": run.train_seconds / run.steps_timed,
            "tokens_per_s": run.tokens / run.train_seconds, "achieved_flops": achieved,
            "matmul_peak_flops": peak, "flops_fraction": achieved / peak if peak else None}
