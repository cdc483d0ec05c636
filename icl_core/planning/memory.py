"""A member's peak memory, from its config alone (no weights built), and the refusal of a
member that fits no node's memory, before Ray starts.

The estimate, in bytes of the member's dtype (b: 4 for float32), for a stack of K members:

    K x (weights + gradients + optimizer state)   params x b x (2 + 2 Adam/AdamW, + 1 SGD,
                                                  + 2 x history L-BFGS, + 6 x history
                                                  more in a stack: its gathered pairs and
                                                  each member's own at checkpoints; + 1
                                                  where a stack steps MaskedAdam
                                                  (steps_masked): its gathered gradients)
    K x training activations   batch x seq x width x layer passes x ACT_PER_WIDTH
                               + batch x heads x seq^2 x layer passes x ATTN_PER_SCORE
                               (softmax attention keeps its T^2 scores per head for backward)
                               + the batch's tensors (inputs, targets, extras: BATCH_COPIES);
                               a finite dataset (train.dataset_size) held whole
    the task's own buffers     e.g. a d x d covariance in float64 (TaskConfig.fixed_bytes,
                               icl_core.tasks.base.KnowsMemory)
    evaluation                 the test prompts (every evaluation point) + one chunk's
                               forward without gradients + the baselines' float64 copies
                               of the prompts (EVAL_COPIES) + the trivial ridge predictor's
                               d x d Gram per prompt in float64 (RIDGE_COPIES, batched to
                               icl_core.training.trivial.SOLVE_BUDGET entries)

plus RUNTIME_BYTES for what PyTorch takes on first use beyond its import. An estimate for
refusing, not for packing (the allocator's caching and a CUDA context are not in it): against
ru_maxrss on a CPU within ~0.6-1.3x (benchmarks/memory_check.py, docs/COST.md). `check_memory` refuses a member whose estimate is
above the memory of every node it may run on: the planned GPU's (an H100's 80 GB unless this
machine has the GPU), or this machine's RAM for CPU members.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

from icl_core.common.validation import ConfigError
from icl_core.spec.config import MemberConfig, to_plain

RUNTIME_BYTES = 0.2e9  # PyTorch on first use beyond the import (kernels, torch._dynamo by Adam)
ACT_PER_WIDTH = 20  # stored activations per token and layer pass, in units of width
ATTN_PER_SCORE = 3  # per head and (query, key) pair: scores, softmax, its gradient
BATCH_COPIES = 4  # inputs, targets, the task's extras (xs, ys, w) of a batch
EVAL_COPIES = 4  # the baselines' float64 copies of the prompts (lstsq, GD iterates)
RIDGE_COPIES = 4  # the Gram, its Cholesky factor, its inverse and their batch (icl_core.training.trivial)
EVAL_ACT = 4  # live activations per token of a forward without gradients, units of width
H100_BYTES = 80e9  # the planned GPU when nothing better is known (--plan-gpus)
ITEMSIZE = {"float32": 4, "float64": 8, "bfloat16": 2}
OPTIMIZER_COPIES = {"adam": 2, "adamw": 2, "sgd": 1}


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak bytes of one member (or a stack), by part."""

    weights: float  # weights, gradients and optimizer state
    activations: float  # training activations and batches (a finite dataset included)
    task: float  # the task's fixed buffers
    evaluation: float

    @property
    def total(self) -> float:
        return RUNTIME_BYTES + self.weights + self.activations + self.task + self.evaluation

    def __str__(self) -> str:
        return (f"{human(self.total)} (runtime {human(RUNTIME_BYTES)}, "
                f"weights+grads+optimizer {human(self.weights)}, "
                f"activations {human(self.activations)}, task buffers {human(self.task)}, "
                f"evaluation {human(self.evaluation)})")


def human(n: float) -> str:
    for unit, size in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 1e3:.3g} kB"


@functools.lru_cache(maxsize=4096)
def _model_dims(model_json: str, task_json: str, task_seed: int) -> tuple:
    """(parameters, width, heads, quadratic attention, d_in, d_out, seq_len, task bytes)."""
    from icl_core.models import count_params
    from icl_core.tasks import TASKS
    from icl_core.tasks.base import KnowsMemory
    from icl_core.training.flops import resolved

    model_cfg, task_cfg, d_in, d_out, seq_len, causal = resolved(model_json, task_json,
                                                                 task_seed)
    params = count_params(model_cfg, d_in=d_in, d_out=d_out, max_len=seq_len, causal=causal)
    width = getattr(model_cfg, "width", None) or getattr(model_cfg, "hidden", None) or d_in
    seq = 1 if model_cfg.whole_prompt else seq_len
    heads = getattr(model_cfg, "heads", 1) or 1
    block = model_cfg.block_config() if hasattr(model_cfg, "block_config") else model_cfg
    quadratic = block.mixing_flops(seq) > 0
    fixed = task_cfg.fixed_bytes() if isinstance(task_cfg, KnowsMemory) else 0.0
    cls = TASKS.builder(task_cfg.name)
    ridge = hasattr(cls, "context_problems") and bool(getattr(cls, "trivial_ridge", False))
    return params, width, heads, quadratic, d_in, d_out, seq_len, seq, fixed, ridge


def member_memory(member: MemberConfig, stack: int = 1) -> MemoryEstimate:
    """The peak memory of `member` trained (a stack of `stack` such members), then evaluated."""
    from icl_core.training.flops import step_shape, supervised_positions
    from icl_core.training.masked_adam import steps_masked

    params, width, heads, quadratic, d_in, d_out, seq_len, seq, fixed, ridge = _model_dims(
        json.dumps(to_plain(member.model), sort_keys=True),
        json.dumps(to_plain(member.task), sort_keys=True), member.task_seed)
    b, t, e = ITEMSIZE[member.dtype], member.train, member.eval
    layers = step_shape(member).layers
    copies = 2 + (OPTIMIZER_COPIES.get(t.optimizer, 2) if t.optimizer != "lbfgs"
                  else 2 * t.lbfgs_history + 2)
    if steps_masked(t, member.dtype, cuda=True, stacked=stack > 1):
        copies += 1  # a stack's MaskedAdam gathers the gradients (training/masked_adam.py)
    if t.optimizer == "lbfgs" and stack > 1:  # a stack's two-loop gathers its pairs (4 x
        # history, stacked_lbfgs.py); from a checkpoint on, each member holds its own (2 x)
        copies += 6 * t.lbfgs_history
    weights = stack * params * copies * b
    per_prompt = seq * width * layers * ACT_PER_WIDTH \
        + (heads * seq * seq * layers * ATTN_PER_SCORE if quadratic else 0)
    prompt = seq_len * (d_in + d_out) * BATCH_COPIES
    activations = stack * t.batch_size * (per_prompt + prompt) * b
    activations += t.dataset_size * seq_len * (d_in + d_out) * b  # drawn once, held
    chunk = min(e.chunk, e.n_prompts)
    evaluation = (len(e.grid) * e.n_prompts * seq_len * (d_in + d_out) * b  # the prompts
                  + chunk * (seq * width * EVAL_ACT + (heads * seq * seq if quadratic else 0)) * b
                  + e.n_prompts * seq_len * d_in * 8 * EVAL_COPIES)
    if ridge:  # the ridge predictor's d x d Gram per prompt, float64, batched to a budget
        from icl_core.training.trivial import SOLVE_BUDGET

        gram = e.n_prompts * d_in * d_in
        problems = supervised_positions(member.task)
        evaluation += RIDGE_COPIES * 8 * min(problems * gram, SOLVE_BUDGET + gram)
    return MemoryEstimate(weights, activations, fixed, evaluation)


# ----------------------------------------------------------------------- the limit


def host_memory() -> float:
    """This machine's RAM in bytes."""
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def gpu_memory() -> tuple[float, str]:
    """(bytes, what) of the GPU a plan's GPU members run on: this machine's first GPU, else
    the memory a cached calibration recorded for a cluster GPU, else an H100's 80 GB."""
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return float(props.total_memory), f"this machine's {props.name}"
    from icl_core.planning import cost
    try:
        data = json.loads(cost.cache_file().read_text())
    except (OSError, ValueError):
        data = {}
    known = [v[cost.DEVICE_MEMORY] * 2**20 for k, v in data.items()
             if k.startswith("cuda|") and isinstance(v, dict) and v.get(cost.DEVICE_MEMORY)]
    if known:
        return max(known), "the calibrated cluster GPU"
    return H100_BYTES, "an H100's 80 GB, assumed"


def memory_limit(member: MemberConfig, gpus: float, cluster: bool = False) -> tuple[float, str]:
    """(bytes, what) a member must fit: the planned GPU's memory for a member that runs on a
    GPU (`gpus` > 0 and its device not cpu), else this machine's RAM; on a cluster joined with
    --address (nodes unknown before Ray), the larger of the two."""
    host = (host_memory(), "this machine's RAM")
    on_gpu = gpus > 0 and member.device != "cpu"
    if cluster:
        gpu = gpu_memory() if member.device != "cpu" else (0.0, "")
        best = max(host, gpu)
        return best[0], best[1] + " (the cluster's nodes are not known before Ray)"
    return gpu_memory() if on_gpu else host


def check_memory(label: str, members: list[MemberConfig], gpus: float,
                 cluster: bool = False) -> tuple[MemberConfig, MemoryEstimate] | None:
    """The largest member of a study and its estimate; a ConfigError (one line) when it fits no
    node's memory (`memory_limit`)."""
    if not members:
        return None
    estimates = [(m, member_memory(m)) for m in members]
    biggest = max(estimates, key=lambda e: e[1].total)
    limits: dict[str, tuple[float, str]] = {}  # per device setting
    for member, estimate in estimates:
        if member.device not in limits:
            limits[member.device] = memory_limit(member, gpus, cluster)
        limit, where = limits[member.device]
        if estimate.total > limit:
            raise ConfigError(
                f"{label}@{member.hash[:8]}: needs ~{estimate} of memory at peak, more than "
                f"{human(limit)} ({where}); make task, model or batch smaller"
                + ("" if gpus > 0 or cluster else ", or plan for GPUs with --plan-gpus N"))
    return biggest
