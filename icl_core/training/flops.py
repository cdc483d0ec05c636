"""The work of one training step from a member's config, without building its weights.

6 x params x tokens per step (a looped block's weights once per loop iteration). Core, apart
from planning: the planner (icl_core.planning.resources) sizes GPU shares and estimates wall time with
it, and every member's throughput record (icl_core.training.throughput) divides it by the time taken.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from icl_core.common.memo import per_config
from icl_core.spec.config import ConfigError, MemberConfig, to_plain


@dataclass(frozen=True)
class StepShape:
    """What the planner knows of one member's step, from its config (no weights built).

    params: weights applied per token in a training step, a weight counted once per pass
      through it (a looped block's weights once per loop iteration; a pass without gradients,
      the first T - ΔT iterations, as 1/3 of a pass with them); `seq`: tokens per prompt
      (1 for a model that reads the flattened prompt once); `layers`: layer passes of one
      training step (what sets the launch floor); `eval_params`, `eval_layers`: the same for
      one forward pass at evaluation (a looped model runs to its largest reported loop count);
      `mix`: forward token-mixing FLOPs per prompt of a training step beyond the weights
      (attention's T^2 term, ModelConfig.mixing_flops, per layer pass).
    """

    params: float
    seq: int
    layers: float
    eval_params: float
    eval_layers: float
    mix: float = 0.0


def task_shape(task_cfg, task_seed: int) -> tuple[int, int, int]:
    """(d_in, d_out, seq_len) of a resolved task config: from the config where it knows
    (KnowsShape: planning never allocates the task's tensors, so `--set task.dim=1e9` is
    planned and refused by its memory, icl_core.planning.memory), else by building the task."""
    from icl_core.tasks import build_task
    from icl_core.tasks.base import KnowsShape

    if isinstance(task_cfg, KnowsShape):
        return task_cfg.shape()
    task = build_task(task_cfg, task_seed, torch.device("cpu"), torch.float32)
    return task.d_in, task.d_out, task.seq_len


def supervised_positions(task_cfg) -> int:
    """Supervised tokens of a prompt, from the config (what the baselines and the ridge
    predictor solve one problem each for): n_points for an all-prefix layout, else one."""
    if getattr(task_cfg, "layout", "") == "all_prefix":
        return int(getattr(task_cfg, "n_points", 1))
    return 1


@functools.lru_cache(maxsize=4096)
def resolved(model_json: str, task_json: str, task_seed: int) -> tuple:
    """(model config, task config, d_in, d_out, seq_len, causal) of a member's model and task
    sections (JSON, for the cache): what the planner's step shape and memory estimate read."""
    import json

    from icl_core.models import MODELS
    from icl_core.tasks import TASKS

    task_cfg = TASKS.resolve(json.loads(task_json), "task")
    d_in, d_out, seq_len = task_shape(task_cfg, task_seed)
    causal = TASKS.builder(task_cfg.name).causal
    model_cfg = MODELS.resolve(json.loads(model_json), "model")
    return model_cfg, task_cfg, d_in, d_out, seq_len, causal


@functools.lru_cache(maxsize=4096)
def _step_shape(model_json: str, task_json: str, task_seed: int) -> StepShape:
    from icl_core.models import count_params
    from icl_core.models.base import LoopsBlock

    model_cfg, _, d_in, d_out, seq_len, causal = resolved(model_json, task_json, task_seed)
    # a model that reads the flattened prompt once (the FFN) applies each weight once per
    # prompt, not once per token
    seq = 1 if model_cfg.whole_prompt else seq_len
    if isinstance(model_cfg, LoopsBlock):  # looped / algoformer: the block runs once per loop
        return _looped_shape(model_cfg, d_in, d_out, seq)
    try:  # weights on the meta device: no memory, but torch still refuses absurd sizes
        params = count_params(model_cfg, d_in=d_in, d_out=d_out, max_len=seq_len,
                              causal=causal)
    except RuntimeError as exc:
        raise ConfigError(f"model: {model_cfg.name!r} cannot be built for tokens of width "
                          f"{d_in} -> {d_out} and {seq_len} positions "
                          f"({str(exc).splitlines()[0]})") from None
    layers = model_cfg.layer_passes(seq_len)
    mix = layers * model_cfg.mixing_flops(seq)
    return StepShape(params, seq, layers, params, layers, mix)


def _looped_shape(cfg, d_in: int, d_out: int, seq: int) -> StepShape:
    """Yang et al.'s window loss (models/looped.py): pre once, T0 = T - ΔT loop iterations
    without gradients, then ΔT iterations each followed by post + readout with gradients; at
    evaluation the loop runs to the largest reported count, post + readout after each."""
    import dataclasses

    from icl_core.models import count_params

    block = cfg.block_config()
    io = count_params(dataclasses.replace(block, depth=0), d_in=d_in, d_out=d_out, max_len=seq,
                      causal=True)
    per_layer = count_params(block, d_in=d_in, d_out=d_out, max_len=seq, causal=True) - io
    L, pp, T = cfg.layers, cfg.pre_post_layers, cfg.loops
    window, t0 = min(cfg.window, T), max(T - cfg.window, 0)
    loop_passes = (t0 / 3 + window) * L
    layers = pp + loop_passes + window * pp
    params = io * window + per_layer * layers
    iters = sorted(set(cfg.eval_loop_iters) or range(1, 2 * T + 1))
    eval_layers = pp + iters[-1] * L + len(iters) * pp
    eval_params = io * len(iters) + per_layer * eval_layers
    return StepShape(params, seq, layers, eval_params, eval_layers, layers * block.mixing_flops(seq))


@per_config
def step_shape(member: MemberConfig) -> StepShape:
    import json

    return _step_shape(json.dumps(to_plain(member.model), sort_keys=True),
                       json.dumps(to_plain(member.task), sort_keys=True), member.task_seed)


def step_flops(member: MemberConfig, shape: StepShape | None = None) -> float:
    """6 x params x tokens of one training step (the model is built on the meta device; a
    looped block's weights count once per loop iteration, see `StepShape`); `shape`: the
    member's `step_shape`, where the caller has it."""
    shape = shape or step_shape(member)
    return 6.0 * shape.params * shape.seq * member.train.batch_size


def step_cost_flops(member: MemberConfig, shape: StepShape | None = None) -> float:
    """`step_flops` plus attention's T^2 term (forward and backward: 3 x the forward's):
    the FLOP count the cost model (icl_core.planning.cost) falls back on."""
    shape = shape or step_shape(member)
    return step_flops(member, shape) + 3.0 * shape.mix * member.train.batch_size
