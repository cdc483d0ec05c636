"""Sequence mixers: every one maps (B, T, W) -> (B, T, W), so `mixer=` is just a sweep axis.

Registered by short name in MIXERS; each takes (width, heads, causal) as keywords.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MIXERS: dict[str, type[nn.Module]] = {}


def register_mixer(name: str):
    def wrap(cls):
        MIXERS[name] = cls
        return cls

    return wrap


@register_mixer("attention")
class SoftmaxAttention(nn.Module):
    """Multi-head softmax attention (Liu et al. Eq. 1), causal when the task needs it."""

    def __init__(self, width: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x_BxTxW: torch.Tensor) -> torch.Tensor:
        B, T, W = x_BxTxW.shape
        q, k, v = self.qkv(x_BxTxW).split(W, dim=-1)
        # (B, H, T, W/H) each
        q, k, v = (t.view(B, T, self.heads, W // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # (B, H, T, W/H)
        return self.out(y.transpose(1, 2).reshape(B, T, W))
