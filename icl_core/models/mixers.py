"""Sequence mixers: every one maps (B, T, W) -> (B, T, W), so `mixer=` is just a sweep axis.

Registered by short name in MIXERS; each takes (width, heads, causal, max_len) as keywords.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from icl_core.common.device import constant

MIXERS: dict[str, type[nn.Module]] = {}


def register_mixer(name: str):
    def wrap(cls):
        MIXERS[name] = cls
        return cls

    return wrap


def causal_hidden(q: torch.Tensor) -> torch.Tensor:
    """(T, T) bool: query t does not see keys s > t (T from queries shaped (..., T, d)). A
    constant (common.device.constant): a layer's forward masks with it and launches nothing
    to build it."""
    return constant(_hidden, q.shape[-2], q.device)


def _hidden(T: int, device: torch.device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)


# keys in one block of CUDA's fused attention backward (memory-efficient, flash; cuDNN's
# tile is taken to be at least as long)
KEY_BLOCK = 64


def sdpa_deterministic(x: torch.Tensor) -> bool:
    """Whether F.scaled_dot_product_attention trains to the same numbers run to run on
    self-attention over x's T tokens, (..., T, d): on a CPU, yes; on CUDA, its fused
    kernels' backward splits more than KEY_BLOCK keys into blocks and adds the blocks'
    gradients atomically, in an order that changes from run to run. So past KEY_BLOCK
    tokens only in float64 (SDPA's math path), without gradients (evaluation), or under
    torch's deterministic algorithms (not warn-only: one block of keys then)."""
    return (not x.is_cuda or x.dtype == torch.float64 or x.shape[-2] <= KEY_BLOCK
            or not torch.is_grad_enabled()
            or (torch.are_deterministic_algorithms_enabled()
                and not torch.is_deterministic_algorithms_warn_only_enabled()))


def fused_under_vmap(q: torch.Tensor) -> bool:
    """Whether a stack takes F.scaled_dot_product_attention under vmap: CUDA's fused kernels
    have batching rules that fold the members into the batch (one launch for a stack, where
    SDPA has a fused kernel for the head size: float32's a multiple of 4), deterministic up
    to KEY_BLOCK tokens; the CPU's flash kernel has none (vmap would loop the members, with
    a warning). float64 takes SDPA's math path, these matmuls anyway; a compiled step fuses
    its own (inductor may turn non-causal matmul attention back into SDPA where TF32 or
    bfloat16 is allowed: train.compile's caveat, icl_core/spec/config.py)."""
    return (q.is_cuda and q.dtype != torch.float64 and sdpa_deterministic(q)
            and not torch.compiler.is_compiling())


def attend(q, k, v, causal: bool) -> torch.Tensor:
    """Scaled dot-product softmax attention, (..., T, d) each, as a stack runs it under vmap
    and a member alone past KEY_BLOCK tokens on CUDA: F.scaled_dot_product_attention where
    vmap batches its kernel and it is deterministic (`fused_under_vmap`), else what it
    computes in plain matmuls, which vmap batches everywhere."""
    if fused_under_vmap(q):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(causal_hidden(q), float("-inf"))
    return scores.softmax(-1) @ v


@register_mixer("attention")
class SoftmaxAttention(nn.Module):
    """Multi-head softmax attention (Liu et al. Eq. 1), causal when the task needs it."""

    def __init__(self, width: int, heads: int, causal: bool, max_len: int):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x_BxTxW: torch.Tensor) -> torch.Tensor:
        B, T, W = x_BxTxW.shape
        q, k, v = self.qkv(x_BxTxW).split(W, dim=-1)
        # (B, H, T, W/H) each
        q, k, v = (t.view(B, T, self.heads, W // self.heads).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v)  # (B, H, T, W/H)
        return self.out(y.transpose(1, 2).reshape(B, T, W))

    stacked = False  # set on a stack's copy (icl_core.training.stacked): the model runs under vmap

    def attend(self, q, k, v) -> torch.Tensor:
        """(B, H, T, W/H) queries, keys, values -> (B, H, T, W/H) mixed values."""
        if self.stacked or not sdpa_deterministic(q):  # `attend` decides; under vmap
            return attend(q, k, v, self.causal)  # not every SDPA kernel has a batching rule
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def causal_conv(v_BxTxW: torch.Tensor, h_LxW: torch.Tensor) -> torch.Tensor:
    """y[t, c] = sum_{s <= t} h[t - s, c] v[s, c]: a direct (not FFT) causal depthwise
    convolution, so float64 stays exact to rounding; O(T^2 W), fine at ICL lengths."""
    B, T, W = v_BxTxW.shape
    weight = h_LxW[:T].flip(0).t().unsqueeze(1)  # (W, 1, T): conv1d correlates, so flip
    x = F.pad(v_BxTxW.transpose(1, 2), (T - 1, 0))  # (B, W, 2T-1), zeros before t = 0
    return F.conv1d(x, weight, groups=W).transpose(1, 2)  # (B, T, W)


@register_mixer("baseconv")
class BaseConv(nn.Module):
    """BaseConv (Liu et al. Eq. 2): a gated long causal depthwise convolution,

        y = ((u W_gate + b_gate) * (h ∗ (u W_in + b_in) + b_conv)) W_out + b_out

    with a learnable filter h (max_len x W) as long as the sequence. Biases are per channel
    ([code]: nn.Linear biases; the paper's are position-dependent). The filter starts as a
    delta at lag 0 (the [code]'s long-conv init) plus N(0, 0.02^2) at other lags. Always
    causal (a polynomial product mod X^N); `heads` is ignored.
    """

    def __init__(self, width: int, heads: int, causal: bool, max_len: int):
        super().__init__()
        del heads, causal
        self.in_proj, self.gate = nn.Linear(width, width), nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        h = 0.02 * torch.randn(max_len, width)
        h[0] = 1.0
        self.filter = nn.Parameter(h)  # (max_len, W): h[lag, channel]
        self.conv_bias = nn.Parameter(torch.zeros(width))

    def forward(self, u_BxTxW: torch.Tensor) -> torch.Tensor:
        conv = causal_conv(self.in_proj(u_BxTxW), self.filter) + self.conv_bias
        return self.out(self.gate(u_BxTxW) * conv)


@register_mixer("relu_attention")
class ReLUAttention(SoftmaxAttention):
    """Multi-head ReLU attention (Bai et al. 2023, Def. 7; Wu et al. 2024, App. G):

        y_t = (1 / n_t) * sum_{s visible from t} relu(q_t . k_s / sqrt(W/H)) v_s

    the same projections as `attention`, with softmax replaced by relu (the paper: "the sole
    difference ... is the activation function in the attention layer"). Causal masking zeroes
    the scores of future tokens (relu(-inf) would be 0 too, but 0 * inf is not). Normalisation
    [gap: Bai's 1/n, n the number of tokens]: n_t = t + 1, the keys token t sees (T when not
    causal), so a prefix's outputs do not depend on how long the prompt is — prompts longer
    than in training keep the scale. The 1/sqrt(W/H) scale is kept from softmax attention.
    """

    def attend(self, q, k, v) -> torch.Tensor:
        scores = torch.relu(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5)  # (B, H, T, T)
        if self.causal:
            scores = scores.masked_fill(causal_hidden(q), 0.0)
        n = constant(_visible, q.shape[-2], self.causal, q.device, scores.dtype)
        return (scores / n) @ v  # (B, H, T, W/H)


def _visible(T: int, causal: bool, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(T, 1): n_t, the keys query t sees (t + 1 when causal, else T)."""
    if causal:
        return torch.arange(1, T + 1, device=device, dtype=dtype)[:, None]
    return torch.full((T, 1), float(T), device=device, dtype=dtype)
