"""The sparse-token-retrieval architectures (Mousavi-Hosseini et al.; models for `qstr`).

All map (B, N, D_e) tokens to (B, N, d_out) outputs and are non-causal (a label may read any
token), so they refuse causal tasks.

* ``attention_mlp`` (the theory's transformer, §3): one attention layer with H heads, each
  with a full D_e x D_e query-key matrix W_QK and the value map absorbed into the MLP,
  head_h(z)_i = Σ_j softmax_j(⟨z_i, W_QK^h z_j⟩) z_j; heads concatenated (H·D_e) into a
  2-layer ReLU MLP per position. [inferred] W_QK^h ~ N(0, 1/D_e²) at init (the paper gives
  none); MLP Linear layers use torch's default init.
* ``mha_mlp`` (the peer code's SimpleTransformer): `nn.MultiheadAttention(D_e, heads)` (own
  W_Q, W_K, W_V, biases, out-projection; heads split D_e), then Linear(D_e, m), ReLU,
  Linear(m, 1) per position; no residual, no LayerNorm.
* ``ffn`` (the peer code): flatten the N tokens, Linear(N·D_e, N·per_token), ReLU,
  Linear(·, hidden), ReLU, Linear(hidden, N·d_out) (peer: per_token = d = 10, hidden = 1000).
* ``bigru`` (the peer code's BGRU): a bidirectional GRU(D_e, hidden), then Linear(2·hidden,
  d_out) per position (peer: hidden 500; the notes suggest 128 on a CPU).

`attention_mlp` and `mha_mlp` record their query-key matrices (`artifacts()`: "qk", (H, D_e,
D_e), scores z_iᵀ M z_j), the paper's Fig 2 heatmap |W_Qᵀ W_K|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig


def _refuse_causal(name: str, causal: bool) -> None:
    if causal:
        raise ValueError(f"model {name!r} is bidirectional; it cannot serve a causal task")


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
        _refuse_causal(cfg.name, causal)
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
        _refuse_causal(cfg.name, causal)
        self.attn = nn.MultiheadAttention(d_in, cfg.heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_in, cfg.mlp_width), nn.ReLU(),
                                 nn.Linear(cfg.mlp_width, d_out))

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        h, _ = self.attn(z_BxNxE, z_BxNxE, z_BxNxE, need_weights=False)
        return self.mlp(h)

    def artifacts(self) -> dict[str, torch.Tensor]:
        """qk (H, E, E): head h's scores are z_iᵀ (W_Q^hᵀ W_K^h / √(E/H)) z_j + bias terms."""
        E, H = self.attn.embed_dim, self.attn.num_heads
        w_q, w_k = self.attn.in_proj_weight[:E], self.attn.in_proj_weight[E:2 * E]
        w_q, w_k = w_q.view(H, E // H, E), w_k.view(H, E // H, E)
        return {"qk": w_q.transpose(1, 2) @ w_k / math.sqrt(E // H)}


@dataclass(frozen=True)
class FFNConfig(ModelConfig):
    name: str = "ffn"
    per_token: int = 10  # first hidden layer = N x per_token ([code]: N·d, d = 10)
    hidden: int = 1000  # second hidden layer ([code]: 1000)
    causal_ok = False
    whole_prompt = True  # one pass over the flattened prompt: FLOPs = 6 x params x batch

    def check(self, path: str) -> None:
        require(self.per_token >= 1, f"{path}.per_token", f"must be >= 1, got {self.per_token}")
        require(self.hidden >= 1, f"{path}.hidden", f"must be >= 1, got {self.hidden}")


class FFN(ModelBase):
    def __init__(self, cfg: FFNConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        _refuse_causal(cfg.name, causal)
        self.n, self.d_out = max_len, d_out
        self.net = nn.Sequential(
            nn.Linear(max_len * d_in, max_len * cfg.per_token), nn.ReLU(),
            nn.Linear(max_len * cfg.per_token, cfg.hidden), nn.ReLU(),
            nn.Linear(cfg.hidden, max_len * d_out),
        )

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        B, N, _ = z_BxNxE.shape
        if N != self.n:
            raise ValueError(f"ffn: built for {self.n} tokens, got {N} (it reads a fixed length)")
        return self.net(z_BxNxE.flatten(1)).view(B, N, self.d_out)


@dataclass(frozen=True)
class BiGRUConfig(ModelConfig):
    name: str = "bigru"
    hidden: int = 500  # GRU state per direction ([code]: 500; notes: 128 on a CPU)
    causal_ok = False
    # a recurrent model pays for its steps in sequence: the planner counts one layer pass per
    # 6 tokens (an H100 measured a bidirectional-GRU step at ~10 ms for 64 tokens, attention
    # models of any length up to 32 at 2-6 ms)
    passes_per_token: ClassVar[float] = 1 / 6

    def layer_passes(self, seq_len: int) -> float:  # ModelConfig: the planner's launch floor
        return max(1.0, self.passes_per_token * seq_len)

    def check(self, path: str) -> None:
        require(self.hidden >= 1, f"{path}.hidden", f"must be >= 1, got {self.hidden}")


class BiGRU(ModelBase):
    stackable = False  # torch.func.vmap has no batching rule for nn.GRU: trains unstacked
    def __init__(self, cfg: BiGRUConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        _refuse_causal(cfg.name, causal)
        self.gru = nn.GRU(d_in, cfg.hidden, batch_first=True, bidirectional=True)
        self.read_out = nn.Linear(2 * cfg.hidden, d_out)

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(z_BxNxE)  # (B, N, 2 hidden)
        return self.read_out(h)
