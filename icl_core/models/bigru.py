"""``bigru``: the peer code's BGRU for sparse token retrieval (a model for `qstr`): a
bidirectional GRU(D_e, hidden), then Linear(2·hidden, d_out) per position (peer: hidden 500;
the notes suggest 128 on a CPU).

Non-causal (a label may read any token): it refuses causal tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from icl_core.common.validation import require
from icl_core.models.base import ModelBase, ModelConfig, refuse_causal


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
        refuse_causal(cfg.name, causal)
        self.gru = nn.GRU(d_in, cfg.hidden, batch_first=True, bidirectional=True)
        self.read_out = nn.Linear(2 * cfg.hidden, d_out)

    def forward(self, z_BxNxE: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(z_BxNxE)  # (B, N, 2 hidden)
        return self.read_out(h)
