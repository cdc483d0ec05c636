"""The model contract every architecture plugs into, and its optional capabilities.

A model is registered with `MODELS.register(name, ConfigClass)(ModelClass)` (models/__init__.py)
and built as `ModelClass(cfg, d_in=, d_out=, max_len=, causal=)`: an `nn.Module` that maps
(B, T, d_in) inputs to (B, T, d_out) outputs. Its config is a frozen dataclass deriving from
`ModelConfig`, its class derives from `ModelBase`; both carry the class-level flags below with
their defaults. Anything more is an optional capability: a model implements the methods of a
Protocol here and the core asks `isinstance(model, Capability)`, never for a hook by name.
Models never import tasks (what both need lives in icl_core.common.batch).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol, runtime_checkable

import torch
from torch import nn

from icl_core.common.batch import Batch

# ----------------------------------------------------------------------------- the contract


class ModelConfig:
    """Base of every model config (the frozen dataclass a model registers with `MODELS`).

    Declares no dataclass fields (a config's fields, and so its config hash, are its own);
    the class-level flags, read as attributes:

    causal_ok: the model can be causal (False: it reads the whole sequence, e.g. the
      retrieval models); config validation refuses it for a task whose class is `causal`.
    whole_prompt: one pass over the flattened prompt, so each weight is applied once per prompt,
      not once per token (the FFN); the planner (icl_core.training.flops) counts FLOPs accordingly.
    trainable: the model has weights to train (False: a hand-built construction, which config
      validation runs with train.steps = 0 only).
    """

    name: str
    causal_ok: ClassVar[bool] = True
    whole_prompt: ClassVar[bool] = False
    trainable: ClassVar[bool] = True

    def layer_passes(self, seq_len: int) -> float:
        """Layer passes of one training step (what sets the launch floor of the planner's
        wall-time estimate, icl_core.planning.resources); one for a model without depth."""
        return 1.0

    def mixing_flops(self, seq_len: int) -> float:
        """Forward FLOPs of one layer's token mixing per prompt beyond its weights (softmax
        attention's QK^T and AV: 4 x T^2 x width); counted by the cost model's FLOP fallback
        (icl_core.planning.cost), not by the 6 x params x tokens records. None here."""
        return 0.0


@runtime_checkable
class Model(Protocol):
    """What every model provides: `forward` (B, T, d_in) -> (B, T, d_out), shapes kept by
    every sequence mixer, and the `nn.Module` interface (parameters, state_dict, train/eval)
    the trainer (icl_core.training.train), the stacker (icl_core.training.stacked) and the evaluator use."""

    def forward(self, x_BxTxI: torch.Tensor) -> torch.Tensor: ...

    def parameters(self, recurse: bool = True) -> Iterable[nn.Parameter]: ...


class ModelBase(nn.Module):
    """Base class of every registered model: the class-level flags, with their defaults.

    stackable: members of a trial that differ only in their seeds may train as one stack
      (icl_core.training.stacked: torch.func.vmap over stacked weights); False for a model
      vmap cannot batch (nn.GRU has no batching rule). Read by
      icl_core.training.stack_rules.stack_key on the class.
    """

    stackable: ClassVar[bool] = True


# ----------------------------------------------------------------------------- capabilities


@runtime_checkable
class HasArtifacts(Protocol):
    """Arrays recorded over training (e.g. LSA's weights, an attention map): {name: tensor},
    recorded every train.artifact_every steps by icl_core.training.train.MemberRun.record_artifacts
    and written by icl_core.storage.artifacts."""

    def artifacts(self) -> dict[str, torch.Tensor]: ...


@runtime_checkable
class LoopOutputs(Protocol):
    """A looped model's outputs after each of several loop counts, from one pass of its loops:
    icl_core.training.evaluate writes rows per loop count (the loop_iter column) for
    `eval_loop_iters()`."""

    def eval_loop_iters(self) -> list[int]: ...

    def loop_outputs(self, x_BxTxI: torch.Tensor, loops) -> dict[int, torch.Tensor]: ...


@runtime_checkable
class HasTrainingLoss(Protocol):
    """The model's own training loss at an optimizer step (e.g. the looped models' window
    loss and loop curriculum) in place of the masked MSE of its outputs. Called by
    icl_core.training.train.member_loss (alone and stacked)."""

    def training_loss(self, batch: Batch, step: int) -> torch.Tensor: ...


@runtime_checkable
class CountsParams(Protocol):
    """The model's own parameter count (non-embedding, frozen weights excluded) in place of
    every parameter's numel: read by `num_params`, the one count (rows, the planner)."""

    def num_params(self) -> int: ...


@runtime_checkable
class ChecksInput(Protocol):
    """A model *config* that constrains the token width d_in (e.g. heads must divide it):
    config validation calls it when the task config knows d_in before it is built
    (icl_core.tasks.base.KnowsInputWidth)."""

    def check_input(self, d_in: int, path: str) -> None: ...


@runtime_checkable
class LoopsBlock(Protocol):
    """A model *config* whose block of `layers` layers runs `loops` times with its weights
    tied, the last `window` iterations in the loss, between `pre_post_layers` of pre / post
    layers; `block_config()` is the block as a transformer config. The planner
    (icl_core.training.flops) counts such a block's weights once per loop iteration."""

    layers: int
    loops: int
    window: int
    eval_loop_iters: tuple[int, ...]

    @property
    def pre_post_layers(self) -> int: ...

    def block_config(self): ...


@runtime_checkable
class VmapAware(Protocol):
    """A layer or model with a vmap-friendly path (models/mixers.py, mha_mlp.py), switched on
    by setting `stacked` on a stack's copy of the model (icl_core.training.stacked)."""

    stacked: bool


def stack_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
    """F.linear as a vmapped stack runs it, in two kernels fewer a layer. F.linear's batching
    rule takes addmm apart, scaling the bias by its beta (a `mul`, forward and backward)
    before the `add`; this takes the path torch's linear takes (rows flattened into one
    product for a 2-D or contiguous 3-D input, else a matmul and an add) without the scaling:
    the same arithmetic, bit for bit, outputs and gradients, whatever the input's and the
    incoming gradient's layouts (a test). A stack's nn.Linear layers
    (icl_core.training.stacked) and mha_mlp's in-projection under vmap."""
    if bias is None or x.dim() < 2:
        return torch.nn.functional.linear(x, weight, bias)
    if x.dim() == 2 or (x.dim() == 3 and x.is_contiguous()):
        rows = x.reshape(-1, x.shape[-1]) @ weight.t() + bias
        return rows.view(*x.shape[:-1], rows.shape[-1])
    return x @ weight.t() + bias


CAPABILITIES = (HasArtifacts, LoopOutputs, HasTrainingLoss, CountsParams)


def num_params(model: nn.Module) -> int:
    """The one parameter count, the x-axis of size-scaling plots and the planner's FLOPs: the
    model's own count (`CountsParams`: non-embedding) where it defines one, else every
    parameter's numel. Works on a model built on the meta device (no weights)."""
    if isinstance(model, CountsParams):
        return model.num_params()
    return sum(p.numel() for p in model.parameters())


def refuse_causal(name: str, causal: bool) -> None:
    """A bidirectional model asked to serve a causal task: a ValueError naming it."""
    if causal:
        raise ValueError(f"model {name!r} is bidirectional; it cannot serve a causal task")
