"""The work of one training step from a member's config, without building its weights.

6 x params x tokens per step (a looped block's weights once per loop iteration). Core, apart
from planning: the planner (icl_core.resources) sizes GPU shares and estimates wall time with
it, and every member's throughput record (icl_core.throughput) divides it by the time taken.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from icl_core.config import MemberConfig, to_plain


@dataclass(frozen=True)
class StepShape:
    """What the planner knows of one member's step, from its config (no weights built).

    params: weights applied per token in a training step, a weight counted once per pass
      through it (a looped block's weights once per loop iteration; a pass without gradients,
      the first T - ΔT iterations, as 1/3 of a pass with them); `seq`: tokens per prompt
      (1 for a model that reads the flattened prompt once); `layers`: layer passes of one
      training step (what sets the launch floor); `eval_params`, `eval_layers`: the same for
      one forward pass at evaluation (a looped model runs to its largest reported loop count).
    """

    params: float
    seq: int
    layers: float
    eval_params: float
    eval_layers: float


@functools.lru_cache(maxsize=4096)
def _step_shape(model_json: str, task_json: str, task_seed: int) -> StepShape:
    import json

    from icl_core.models import MODELS, num_params
    from icl_core.tasks import TASKS, build_task

    task_cfg = TASKS.resolve(json.loads(task_json), "task")
    task = build_task(task_cfg, task_seed, torch.device("cpu"), torch.float32)
    model_cfg = MODELS.resolve(json.loads(model_json), "model")
    # a model that reads the flattened prompt once (the FFN) applies each weight once per
    # prompt, not once per token
    seq = 1 if getattr(model_cfg, "whole_prompt", False) else task.seq_len
    if hasattr(model_cfg, "loops"):  # looped / algoformer: the block runs once per loop
        return _looped_shape(model_cfg, task.d_in, task.d_out, seq)
    if hasattr(model_cfg, "param_count"):
        params = model_cfg.param_count(task.d_in, task.d_out, task.seq_len)
    else:
        with torch.device("meta"):  # shapes only: no memory, no initialisation cost
            model = MODELS.build(model_cfg, d_in=task.d_in, d_out=task.d_out,
                                 max_len=task.seq_len, causal=task.causal)
        params = num_params(model)
    layers = float(getattr(model_cfg, "depth", None) or getattr(model_cfg, "layers", None)
                   or max(1.0, RECURRENT_PASSES_PER_TOKEN.get(model_cfg.name, 0) * task.seq_len))
    return StepShape(params, seq, layers, params, layers)


# models without a depth / layers field count one layer pass, but a recurrent one pays for its
# steps in sequence: one pass per 6 tokens (an H100 measured a bidirectional-GRU step at
# ~10 ms for 64 tokens, attention models of any length up to 32 at 2-6 ms)
RECURRENT_PASSES_PER_TOKEN = {"bigru": 1 / 6}


def _looped_shape(cfg, d_in: int, d_out: int, seq: int) -> StepShape:
    """Yang et al.'s window loss (models/looped.py): pre once, T0 = T - ΔT loop iterations
    without gradients, then ΔT iterations each followed by post + readout with gradients; at
    evaluation the loop runs to the largest reported count, post + readout after each."""
    import dataclasses

    block = cfg.block_config()
    io = dataclasses.replace(block, depth=0).param_count(d_in, d_out, seq)
    per_layer = block.param_count(d_in, d_out, seq) - io
    L, pp, T = cfg.layers, cfg.pre_post_layers, cfg.loops
    window, t0 = min(cfg.window, T), max(T - cfg.window, 0)
    loop_passes = (t0 / 3 + window) * L
    layers = pp + loop_passes + window * pp
    params = io * window + per_layer * layers
    iters = sorted(set(cfg.eval_loop_iters) or range(1, 2 * T + 1))
    eval_layers = pp + iters[-1] * L + len(iters) * pp
    eval_params = io * len(iters) + per_layer * eval_layers
    return StepShape(params, seq, layers, eval_params, eval_layers)


def step_shape(member: MemberConfig) -> StepShape:
    import json

    return _step_shape(json.dumps(to_plain(member.model), sort_keys=True),
                       json.dumps(to_plain(member.task), sort_keys=True), member.task_seed)


def step_flops(member: MemberConfig) -> float:
    """6 x params x tokens of one training step (the model is built on the meta device; a
    looped block's weights count once per loop iteration, see `StepShape`)."""
    shape = step_shape(member)
    return 6.0 * shape.params * shape.seq * member.train.batch_size
