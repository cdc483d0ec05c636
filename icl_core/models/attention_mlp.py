"""``attention_mlp``: the sparse-token-retrieval theory's transformer (Mousavi-Hosseini et al.
§3; a model for `qstr`): one attention layer with H heads, each with a full D_e x D_e
query-key matrix W_QK and the value map absorbed into the MLP,
head_h(z)_i = Σ_j softmax_j(⟨z_i, W_QK^h z_j⟩) z_j; heads concatenated (H·D_e) into a 2-layer
ReLU MLP per position. [inferred] W_QK^h ~ N(0, 1/D_e²) at init (the paper gives none); MLP
Linear layers use torch's default init.

Non-causal (a label may read any token): it refuses causal tasks. It records its query-key
matrices (`artifacts()`: "qk", (H, D_e, D_e), scores z_iᵀ M z_j), the paper's Fig 2 heatmap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig, refuse_causal


@dataclass(frozen=True)
class AttentionMLPConfig(ModelConfig):
    name: str = "attention_mlp"
    heads: int = 1  # H: heads, each a full D_e x D_e W_QK (theory: H >= q needed)
    mlp_width: int = 100  # m: hidden units of the per-position MLP ([code]: 100)
    causal_ok = False  # class attribute: refuses causal tasks (checked before launch)

    def check(self, path: str) -> None:
        require(self.heads >= 1, f"{path}.heads", f"must be >= 1, got {self.heads}")
        require(self.mlp_width >= 1, f"{path}.mlp_width", f"must be >= 1, got {self.mlp_width}")


class AttentionMLP(ModelBase):
    def __init__(self, cfg: AttentionMLPConfig, d_in: int, d_out: int, max_len: int,
                 causal: bool):
        super().__init__()
        refuse_causal(cfg.name, causal)
        self.qk = nn.Parameter(torch.randn(cfg.heads, d_in, d_in) / d_in)  # (H, D_e, D_e)
        self.mlp = nn.Sequential(nn.Linear(cfg.heads * d_in, cfg.mlp_width), nn.ReLU(),
                                 nn.Linear(cfg.mlp_width, d_out))

    def attention(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        """(B, H, N, N) attention weights softmax_j(z_iᵀ W_QK^h z_j)."""
        scores = torch.einsum("bie,hef,bjf->bhij", z_BxNxE, self.qk, z_BxNxE)
        return scores.softmax(dim=-1)

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        heads = self.attention(z_BxNxE) @ z_BxNxE.unsqueeze(1)  # (B, H, N, E)
        return self.mlp(heads.transpose(1, 2).flatten(2))  # (B, N, O)

    def artifacts(self) -> dict[str, torch.Tensor]:
        return {"qk": self.qk}
