"""Linear self-attention (LSA), Ahn et al. 2023 (§2, Eqs. 5, 9, 13).

Tokens are the columns z_i = [x_i; y_i] of Z (our rows), the query [x_q; 0] last. A layer is
    Z <- Z + (1/n) P Z M Zᵀ Q Z,     M = diag(I_n, 0)  (the query is masked as a key),
residual only (no MLP, no LayerNorm, one head), and the prediction is ŷ = -[Z_L]_{d+1, n+1}.

Forms: "full" (P, Q free, (d+1)x(d+1)); "sparse" (Eq. 9: P = e_{d+1}e_{d+1}ᵀ, Q = [[A,0],[0,0]],
only the labels change: y_i += (1/n) Σ_j y_j x_jᵀ A x_i); "sparse_b" (Eq. 13: P = [[B,0],[0,1]],
so the x rows change too: x_i += (1/n) B (Σ_j x_j x_jᵀ) A x_i). Computed as P (Z M Zᵀ) Q Z:
O(n d²) per prompt. Lemma 2: with the sparse form, y_q after ℓ layers is -x_qᵀ w_ℓ where
w_{ℓ+1} = w_ℓ - P_ℓ ∇L(w_ℓ), P_ℓ = -A_ℓᵀ (the project's GD convention; A = -ηI is GD).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig


@dataclass(frozen=True)
class LSAConfig(ModelConfig):
    name: str = "lsa"
    layers: int = 3  # L: number of A_i (the paper's "3 layers" = A_0, A_1, A_2)
    form: Literal["full", "sparse", "sparse_b"] = "sparse"  # Eq. 9 by default (Thm 4, Fig 1)
    init_std: float = 1e-4  # N(0, std²) init [repo: "var" is a std of 1e-4]

    def layer_passes(self, seq_len: int) -> float:  # ModelConfig: the planner's launch floor
        return float(self.layers or 1)

    def check(self, path: str) -> None:
        require(self.layers >= 1, f"{path}.layers", f"must be >= 1, got {self.layers}")
        require(self.init_std >= 0, f"{path}.init_std", "must be >= 0")


class LSA(ModelBase):
    def __init__(self, cfg: LSAConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        if d_out != 1:
            raise ValueError(f"LSA predicts one label per prompt; the task has d_out={d_out}")
        del max_len, causal  # no positions; the query is masked as a key by construction
        self.cfg, self.d = cfg, d_in - 1
        L, d, D = cfg.layers, d_in - 1, d_in
        if cfg.form == "full":
            self.P = nn.Parameter(cfg.init_std * torch.randn(L, D, D))
            self.Q = nn.Parameter(cfg.init_std * torch.randn(L, D, D))
        else:
            self.A = nn.Parameter(cfg.init_std * torch.randn(L, d, d))
            if cfg.form == "sparse_b":
                self.B = nn.Parameter(cfg.init_std * torch.randn(L, d, d))

    def forward(self, z_BxTxD: torch.Tensor) -> torch.Tensor:
        n = z_BxTxD.shape[1] - 1  # context tokens; the last token is the query
        if self.cfg.form == "full":
            z = z_BxTxD
            for P, Q in zip(self.P, self.Q, strict=True):
                C = z[:, :n].transpose(1, 2) @ z[:, :n]  # (B, D, D) = Z M Zᵀ
                z = z + torch.einsum("de,bef,fg,btg->btd", P, C, Q, z) / n
            return -z[..., -1:]
        x, y = z_BxTxD[..., : self.d], z_BxTxD[..., self.d]  # (B, T, d), (B, T)
        for layer, A in enumerate(self.A):
            v = torch.einsum("bt,btd->bd", y[:, :n], x[:, :n])  # Σ_j y_j x_j
            y_new = y + torch.einsum("bd,de,bte->bt", v, A, x) / n
            if self.cfg.form == "sparse_b":
                G = x[:, :n].transpose(1, 2) @ x[:, :n]  # Σ_j x_j x_jᵀ
                x = x + torch.einsum("de,bef,fg,btg->btd", self.B[layer], G, A, x) / n
            y = y_new
        return -y.unsqueeze(-1)

    def artifacts(self) -> dict[str, torch.Tensor]:
        """Weights over training (Figs 1-4): A (L, d, d) [and B], or P, Q (L, d+1, d+1)."""
        names = {"full": ("P", "Q"), "sparse": ("A",), "sparse_b": ("A", "B")}[self.cfg.form]
        return {name: getattr(self, name) for name in names}
