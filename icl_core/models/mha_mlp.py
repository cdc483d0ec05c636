"""``mha_mlp``: the peer code's SimpleTransformer for sparse token retrieval (a model for
`qstr`): `nn.MultiheadAttention(D_e, heads)` (own W_Q, W_K, W_V, biases, out-projection; heads
split D_e), then Linear(D_e, m), ReLU, Linear(m, 1) per position; no residual, no LayerNorm.

Non-causal (a label may read any token): it refuses causal tasks. It records its query-key
matrices (`artifacts()`: "qk", (H, D_e, D_e), scores z_iᵀ M z_j), the paper's Fig 2 heatmap
|W_Qᵀ W_K|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig, refuse_causal, stack_linear
from icl_core.models.mixers import attend, sdpa_deterministic


@dataclass(frozen=True)
class MHAMLPConfig(ModelConfig):
    name: str = "mha_mlp"
    heads: int = 1  # nn.MultiheadAttention heads: must divide D_e ([code]: 1)
    mlp_width: int = 100  # hidden units of the per-position MLP ([code]: 100)
    causal_ok = False

    def check(self, path: str) -> None:
        require(self.heads >= 1, f"{path}.heads", f"must be >= 1, got {self.heads}")
        require(self.mlp_width >= 1, f"{path}.mlp_width", f"must be >= 1, got {self.mlp_width}")

    def check_input(self, d_in: int, path: str) -> None:
        require(d_in % self.heads == 0, f"{path}.heads",
                f"must divide the token size D_e={d_in}, got {self.heads}")


class MHAMLP(ModelBase):
    def __init__(self, cfg: MHAMLPConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        refuse_causal(cfg.name, causal)
        self.attn = nn.MultiheadAttention(d_in, cfg.heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_in, cfg.mlp_width), nn.ReLU(),
                                 nn.Linear(cfg.mlp_width, d_out))

    stacked = False  # set on a stack's copy (icl_core.training.stacked): the model runs under vmap

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        if self.stacked or not sdpa_deterministic(z_BxNxE):  # the same attention from the
            h = self._attention(z_BxNxE)  # module's own weights, vmap-friendly, deterministic
        else:
            h, _ = self.attn(z_BxNxE, z_BxNxE, z_BxNxE, need_weights=False)
        return self.mlp(h)

    def _attention(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        """nn.MultiheadAttention's self-attention (no dropout, no mask) from its weights: its
        fast path has no vmap batching rule, so under vmap torch would loop the members, and
        its SDPA is not deterministic past mixers.KEY_BLOCK tokens on CUDA; `attend` takes
        SDPA where vmap batches it and it is, else plain matmuls."""
        B, N, E = z_BxNxE.shape
        H = self.attn.num_heads
        qkv = stack_linear(z_BxNxE, self.attn.in_proj_weight, self.attn.in_proj_bias)
        q, k, v = (t.view(B, N, H, E // H).transpose(1, 2) for t in qkv.split(E, dim=-1))
        y = attend(q, k, v, causal=False)  # (B, H, N, E/H)
        return self.attn.out_proj(y.transpose(1, 2).reshape(B, N, E))

    def artifacts(self) -> dict[str, torch.Tensor]:
        """qk (H, E, E): head h's scores are z_iᵀ (W_Q^hᵀ W_K^h / √(E/H)) z_j + bias terms."""
        E, H = self.attn.embed_dim, self.attn.num_heads
        w_q, w_k = self.attn.in_proj_weight[:E], self.attn.in_proj_weight[E:2 * E]
        w_q, w_k = w_q.view(H, E // H, E), w_k.view(H, E // H, E)
        return {"qk": w_q.transpose(1, 2) @ w_k / math.sqrt(E // H)}
