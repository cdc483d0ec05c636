"""The hand-built causal BaseConv that runs gradient descent (Liu et al. 2024, §4 / App. D.3).

It works on the explicit-gradient token layout of `icl_core.tasks.ls_features` with
S = D² + 3D + 1 channels per token:

    [ x (D) | y (1) | w (D) | a = y·x (D) | M = flt(x xᵀ) (D²) ]
      data token i:  [x_i, y_i, 0, 0, 0]        final token: [0, 0, w0, 0, 0]

Every layer is a real `BaseConv` mixer (mixers.py) with set weights and a residual add:

* layer 1 (gating, conv = delta): a_i = y_i x_i and M_i = x_i x_iᵀ, written into the zero
  feature channels (a gate selects one factor, the input projection the other);
* layer 2 (prefix sum, h = [0, 1, 1, ...], gate = 1 by its bias): with the residual, every
  feature channel becomes its inclusive prefix sum, so the final token holds Σ y_i x_i and
  Σ x_i x_iᵀ over the N data tokens (its own features are zero);
* one layer per GD step (conv = delta): gates M_jk · w_k and 1 · a_j, and the output
  projection adds (η/N)(a − M w) to w, i.e. w <- w − η ∇L(w) under the project's one GD
  convention (icl_core.algorithms.baselines: ∇L = (1/N) Xᵀ(Xw − y)).

Causal state is O(D²), as the paper's lower bound (Thm D.32) says it must be. Layers 1-2 are
also what `TransformerConfig.construction_layers` freezes in front of a trained model, and
the `ls_features` task's k ∈ {1, 2} features are exactly their outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from icl_core.common.batch import Layout
from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig
from icl_core.models.mixers import BaseConv


def dim_from_width(width: int) -> int:
    """D such that D² + 3D + 1 = width (the ls_features token width); ValueError if none."""
    D = round((-3 + (9 - 4 * (1 - width)) ** 0.5) / 2)
    if D < 1 or D * D + 3 * D + 1 != width:
        raise ValueError(
            f"the GD construction needs tokens of width D² + 3D + 1 (the ls_features task); "
            f"got width {width}"
        )
    return D


def set_baseconv(mixer: BaseConv, W_in, W_gate, W_out, h, b_gate=None) -> BaseConv:
    """Load weights written in `u @ W` form (S x S) into a BaseConv; other biases zero."""
    with torch.no_grad():
        mixer.in_proj.weight.copy_(W_in.t())
        mixer.gate.weight.copy_(W_gate.t())
        mixer.out.weight.copy_(W_out.t())
        mixer.filter.copy_(h)
        for bias in (mixer.in_proj.bias, mixer.out.bias, mixer.conv_bias):
            bias.zero_()
        mixer.gate.bias.copy_(b_gate if b_gate is not None else torch.zeros_like(mixer.gate.bias))
    return mixer.requires_grad_(False)


def _empty(c: Layout, max_len: int):
    S = c.width
    return (torch.zeros(S, S, dtype=torch.float64), torch.zeros(S, S, dtype=torch.float64),
            torch.zeros(S, S, dtype=torch.float64), torch.zeros(max_len, S, dtype=torch.float64))


def product_layer(D: int, max_len: int) -> BaseConv:
    """Layer 1: a = y x and M = flt(x xᵀ) by gating (conv = delta)."""
    c = Layout(D)
    W_in, W_gate, W_out, h = _empty(c, max_len)
    h[0] = 1.0
    for j in range(D):  # inner channel j: y * x_j -> a_j
        W_gate[c.y, j], W_in[c.x + j, j], W_out[j, c.a + j] = 1.0, 1.0, 1.0
    for j in range(D):  # inner channel D + jD + k: x_j * x_k -> M_jk
        for k in range(D):
            inner = D + j * D + k
            W_gate[c.x + j, inner], W_in[c.x + k, inner] = 1.0, 1.0
            W_out[inner, c.m + j * D + k] = 1.0
    return set_baseconv(BaseConv(c.width, 1, True, max_len).double(), W_in, W_gate, W_out, h)


def prefix_sum_layer(D: int, max_len: int) -> BaseConv:
    """Layer 2: strict prefix sums of the features; the residual makes them inclusive."""
    c = Layout(D)
    W_in, W_gate, W_out, h = _empty(c, max_len)
    h[1:] = 1.0  # lags >= 1: the tokens before this one
    b_gate = torch.zeros(c.width, dtype=torch.float64)
    for ch in c.features:
        W_in[ch, ch], W_out[ch, ch], b_gate[ch] = 1.0, 1.0, 1.0
    mixer = BaseConv(c.width, 1, True, max_len).double()
    return set_baseconv(mixer, W_in, W_gate, W_out, h, b_gate)


def gd_step_layer(D: int, n_points: int, lr: float, max_len: int) -> BaseConv:
    """One GD step at the token holding w: w += (η/N)(a − M w) with a, M the prefix sums."""
    c = Layout(D)
    W_in, W_gate, W_out, h = _empty(c, max_len)
    h[0] = 1.0
    b_gate = torch.zeros(c.width, dtype=torch.float64)
    scale = lr / n_points
    for j in range(D):
        for k in range(D):  # inner channel jD + k: M_jk * w_k -> w_j with -η/N
            inner = j * D + k
            W_gate[c.m + j * D + k, inner], W_in[c.w + k, inner] = 1.0, 1.0
            W_out[inner, c.w + j] = -scale
        inner = D * D + j  # 1 * a_j -> w_j with +η/N
        b_gate[inner], W_in[c.a + j, inner], W_out[inner, c.w + j] = 1.0, 1.0, scale
    mixer = BaseConv(c.width, 1, True, max_len).double()
    return set_baseconv(mixer, W_in, W_gate, W_out, h, b_gate)


class ConstructionFeatures(nn.Module):
    """The construction's first k layers (k in {1, 2}), frozen: tokens -> tokens with the
    feature channels filled (equal to the ls_features task's k features)."""

    def __init__(self, D: int, k: int, max_len: int):
        super().__init__()
        layers = [product_layer(D, max_len), prefix_sum_layer(D, max_len)][:k]
        self.layers = nn.ModuleList(layers)

    def forward(self, u_BxTxS: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            u_BxTxS = u_BxTxS + layer(u_BxTxS)
        return u_BxTxS


@dataclass(frozen=True)
class BaseConvGDConfig(ModelConfig):
    """The hand-built GD construction as a model: no trainable weights (train.steps = 0)."""

    trainable: ClassVar[bool] = False  # resolve_member refuses train.steps > 0

    name: str = "baseconv_gd"
    steps: int = 10  # GD steps = layers after the two feature layers
    lr: float = 0.2  # η under the project's GD convention (= the [code]'s 0.1 with 2/N)

    def check(self, path: str) -> None:
        require(self.steps >= 0, f"{path}.steps", f"must be >= 0, got {self.steps}")
        require(self.lr > 0, f"{path}.lr", f"must be > 0, got {self.lr}")


class BaseConvGD(ModelBase):
    """Outputs, at every token, the w channels after 2 + `steps` BaseConv layers; the final
    token holds w_T of GD from w0 on the prompt's N data tokens."""

    def __init__(self, cfg: BaseConvGDConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        self.cfg, self.D, self.max_len = cfg, dim_from_width(d_in), max_len
        self.channels = Layout(self.D)
        if d_out != self.D:
            raise ValueError(f"baseconv_gd outputs w (d_out = {self.D}), the task wants {d_out}")
        self.features = ConstructionFeatures(self.D, 2, max_len)
        self._steps: dict = {}  # (N, device, dtype) -> GD layer; derived, so not in state_dict

    def step_layer(self, n_points: int, like: torch.Tensor) -> BaseConv:
        key = (n_points, like.device, like.dtype)
        if key not in self._steps:
            layer = gd_step_layer(self.D, n_points, self.cfg.lr, self.max_len)
            self._steps[key] = layer.to(device=like.device, dtype=like.dtype)
        return self._steps[key]

    def forward(self, u_BxTxS: torch.Tensor) -> torch.Tensor:
        c = self.channels
        h = self.features(u_BxTxS)
        last = h[:, -1:]  # the GD layers' conv is a delta: only the w token's state matters
        layer = self.step_layer(u_BxTxS.shape[1] - 1, u_BxTxS)
        for _ in range(self.cfg.steps):
            last = last + layer(last)
        h = torch.cat([h[:, :-1], last], dim=1)
        return h[..., c.w:c.w + self.D]

    def num_params(self) -> int:
        return 0  # nothing is trained
