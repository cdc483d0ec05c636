"""A GPT-2-style transformer with a switchable sequence mixer (Liu et al. 2024, §2.1).

Linear read-in -> learned absolute positions -> `depth` pre-LN blocks (mixer, then a ReLU
MLP, each with a residual) -> final LayerNorm -> linear read-out. LayerNorm and the MLP
can be switched off (the ±LN ablations). GPT-2 init (std 0.02, as in the precision-ls code).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icl_core.common.device import constant
from icl_core.common.validation import require, unknown
from icl_core.models.base import ModelBase, ModelConfig
from icl_core.models.baseconv_gd import ConstructionFeatures, dim_from_width
from icl_core.models.mixers import MIXERS


@dataclass(frozen=True)
class TransformerConfig(ModelConfig):
    name: str = "transformer"
    width: int = 64  # embedding size D (paper App. B.1: 64)
    depth: int = 12  # number of blocks L (paper default: 12)
    heads: int = 1  # attention heads; must divide width (paper: 1)
    mixer: str = "attention"  # sequence mixer, a name in icl_core.models.mixers.MIXERS
    mlp: bool = True  # state mixer on/off
    mlp_ratio: int = 4  # MLP hidden size = mlp_ratio * width (paper: 4)
    layer_norm: bool = True  # pre-LN blocks and final LN on/off
    init_std: float = 0.02  # GPT-2 init std for linear and embedding weights
    # the first k of `depth` layers are the hand-built GD construction's (models/construction),
    # frozen (Liu et al. Fig 7: BaseConv with k in {1, 2} frozen layers); needs the
    # ls_features token layout with features = 0
    construction_layers: int = 0

    def check(self, path: str) -> None:
        require(self.width >= 1, f"{path}.width", f"must be >= 1, got {self.width}")
        require(self.depth >= 1, f"{path}.depth", f"must be >= 1, got {self.depth}")
        require(self.heads >= 1, f"{path}.heads", f"must be >= 1, got {self.heads}")
        require(
            self.width % self.heads == 0,
            f"{path}.heads",
            f"must divide width={self.width}, got {self.heads}",
        )
        if self.mixer not in MIXERS:
            raise unknown(f"{path}.mixer", "", self.mixer, sorted(MIXERS))
        require(self.mlp_ratio >= 1, f"{path}.mlp_ratio", "must be >= 1")
        require(self.init_std > 0, f"{path}.init_std", "must be > 0")
        require(
            self.construction_layers in (0, 1, 2) and self.construction_layers < self.depth,
            f"{path}.construction_layers",
            f"must be 0, 1 or 2 and below depth={self.depth}, got {self.construction_layers}",
        )

    @property
    def trained_blocks(self) -> int:
        return self.depth - self.construction_layers

    def layer_passes(self, seq_len: int) -> float:  # ModelConfig: the planner's launch floor
        return float(self.depth or 1)

    def mixing_flops(self, seq_len: int) -> float:  # ModelConfig: attention's T^2 term
        quadratic = self.mixer in ("attention", "relu_attention")  # baseconv: FFT, T log T
        return 4.0 * seq_len * seq_len * self.width if quadratic else 0.0


class MLP(nn.Module):
    def __init__(self, width: int, ratio: int):
        super().__init__()
        self.up, self.down = nn.Linear(width, ratio * width), nn.Linear(ratio * width, width)

    def forward(self, x_BxTxW: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x_BxTxW)))


def norm(width: int, enabled: bool) -> nn.Module:
    return nn.LayerNorm(width) if enabled else nn.Identity()


def gpt2_init(model: nn.Module, std: float) -> None:
    """GPT-2 init: linear and embedding weights ~ N(0, std²), linear biases 0. Nothing to
    initialise on the meta device (the planner's shapes-only build: `count_params`)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and not module.weight.is_meta:
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)


def positions(x_BxTxW: torch.Tensor) -> torch.Tensor:
    """0 … T−1 on x's device, the learned positions' indices: a constant
    (common.device.constant), no launch a step."""
    return constant(_arange, x_BxTxW.shape[1], x_BxTxW.device)


def _arange(T: int, device: torch.device) -> torch.Tensor:
    return torch.arange(T, device=device)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, causal: bool, max_len: int):
        super().__init__()
        self.ln1 = norm(cfg.width, cfg.layer_norm)
        self.mixer = MIXERS[cfg.mixer](width=cfg.width, heads=cfg.heads, causal=causal,
                                       max_len=max_len)
        self.ln2 = norm(cfg.width, cfg.layer_norm) if cfg.mlp else None
        self.mlp = MLP(cfg.width, cfg.mlp_ratio) if cfg.mlp else None

    def forward(self, x_BxTxW: torch.Tensor) -> torch.Tensor:
        x = x_BxTxW + self.mixer(self.ln1(x_BxTxW))
        if self.mlp is not None:
            x = x + self.mlp(self.ln2(x))
        return x


class Transformer(ModelBase):
    def __init__(self, cfg: TransformerConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        self.cfg, self.max_len = cfg, max_len
        self.read_in = nn.Linear(d_in, cfg.width)
        self.wpe = nn.Embedding(max_len, cfg.width)  # learned absolute positions
        self.blocks = nn.ModuleList(Block(cfg, causal, max_len) for _ in range(cfg.trained_blocks))
        self.ln_f = norm(cfg.width, cfg.layer_norm)
        self.read_out = nn.Linear(cfg.width, d_out)
        gpt2_init(self, cfg.init_std)
        self.frozen = None
        if cfg.construction_layers:  # built after the init loop: its weights are set by hand
            D = dim_from_width(d_in)
            self.frozen = ConstructionFeatures(D, cfg.construction_layers, max_len)

    def forward(self, x_BxTxI: torch.Tensor) -> torch.Tensor:
        T = x_BxTxI.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens exceeds max_len={self.max_len}")
        pos = positions(x_BxTxI)
        if self.frozen is not None:
            x_BxTxI = self.frozen(x_BxTxI)  # the construction's features, then trained layers
        h = self.read_in(x_BxTxI) + self.wpe(pos)  # (B, T, W)
        for block in self.blocks:
            h = block(h)
        return self.read_out(self.ln_f(h))  # (B, T, O)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count, the x-axis of size-scaling plots (positions excluded by default)."""
        n = sum(p.numel() for p in self.parameters() if p.requires_grad)  # frozen: not counted
        return n - self.wpe.weight.numel() if non_embedding else n
