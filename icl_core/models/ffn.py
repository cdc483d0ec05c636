"""``ffn``: the peer code's feed-forward network for sparse token retrieval (a model for
`qstr`): flatten the N tokens, Linear(N·D_e, N·per_token), ReLU, Linear(·, hidden), ReLU,
Linear(hidden, N·d_out) (peer: per_token = d = 10, hidden = 1000).

Non-causal (a label may read any token): it refuses causal tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig, refuse_causal


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
        refuse_causal(cfg.name, causal)
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
