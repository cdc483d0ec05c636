"""Looped transformer (Yang et al. 2024): depth by *iterations* of one weight-tied block instead
of stacked layers. The same class runs AlgoFormer (pre + looped + post; Eq. 2 of the AlgoFormer
paper), whose config is in icl_core.models.algoformer.

    G(h)  = ln_f(blocks(h + wpe(pos)))                  one GPT-2 body, as GPT2Model runs it
    e     = G_pre(read_in(x))                           AlgoFormer; looped: e = read_in(x)
    z_0   = 0;   z_t = G_loop(z_{t-1} + e)              input injection [code: Yang z = f(z + x)]
    ŷ_t   = read_out(G_post(z_t))                       AlgoFormer; looped: read_out(z_t)

Each G is `layers` GPT-2 blocks (pre-LN, causal, ReLU MLP: the project's transformer.Block)
between its own learned positions and its own final LayerNorm — exactly a Hugging Face
`GPT2Model` called on `inputs_embeds` (a test copies our weights into one and compares per
loop in float64). The looped body has one set of weights, run t times; like the reference
[code: Yang's looped_transformer passes `output + embeds` through a `GPT2Model` every
iteration], **positions are added and the final LayerNorm is applied at every loop**, so the
state z_t stays on the LayerNorm's scale however many loops run. `loop_norm=False` is the
ablation without that per-loop LayerNorm (one LayerNorm at the readout instead): the state's
norm then grows about linearly with t (measured at init: |z_t|/|e| = 1.1, 8.7, 55 at t = 1, 8,
50), so loops beyond T drift to wherever that growth takes them. Our MLP is ReLU; the
reference's is GELU [code], the one deliberate difference (the project's blocks are ReLU
throughout). `forward` returns ŷ after `eval_loops` iterations (0:
the training T); `loop_outputs(x, ts)` returns ŷ_t for every requested t in one pass, which the
evaluator uses for its `loop_iter` rows (`eval_loop_iters`, far beyond T).

Training (`training_loss`, called by the trainer in place of the plain MSE): the (T, ΔT)
window loss of Eq. 6 as in Yang's code: the first T0 = max(T - ΔT, 0) loops run under
`torch.no_grad()`, the loss is the mean over the last min(ΔT, T) iterations t = T0+1..T of the
masked MSE of ŷ_t [code: exactly ΔT terms, not the paper's T - T0 + 1]. Loop curriculum
[code: Yang's curriculum.loops]: T starts at `curriculum_start` and grows by 1 every
`curriculum_every` steps up to `loops` (curriculum_start = 0: off, T from the first step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from icl_core.common.batch import Batch, masked_mse
from icl_core.common.validation import require, unknown
from icl_core.models.base import ModelBase, ModelConfig
from icl_core.models.mixers import MIXERS
from icl_core.models.transformer import Block, TransformerConfig, gpt2_init, norm, positions


@dataclass(frozen=True)
class LoopedConfig(ModelConfig):
    """Yang et al.'s looped transformer: one weight-tied block of `layers` layers."""

    name: str = "looped"
    width: int = 256  # D (paper: 256)
    layers: int = 1  # L: layers of the looped block (and of pre / post for algoformer; paper: 1)
    heads: int = 8  # [gap: the paper is silent; Yang/Garg default 8]
    mixer: str = "attention"  # sequence mixer (icl_core.models.mixers)
    mlp_ratio: int = 4  # MLP hidden = mlp_ratio x width [code: GPT-2]
    layer_norm: bool = True  # pre-LN blocks + final LN [code: Yang, nanoGPT]
    init_std: float = 0.02  # GPT-2 init
    loops: int = 20  # T: loop iterations in training (paper: 20)
    window: int = 15  # ΔT: last iterations in the loss (paper: 15); T0 = T - ΔT without grad
    eval_loops: int = 0  # iterations of `forward` (the model's headline rows); 0: = loops
    # loop counts the evaluator reports (loop_iter rows); empty: 1..2T
    eval_loop_iters: tuple[int, ...] = ()
    curriculum_start: int = 0  # loop curriculum start T (0: off) [code: Yang starts low]
    curriculum_every: int = 500  # steps per +1 loop [code: Yang +2 every 500 steps; gap]
    # final LayerNorm at the end of every loop, as GPT2Model ends in ln_f [code: Yang]; False:
    # the ablation with one LayerNorm at the readout only (the state's norm grows with t).
    # Always in the config hash (icl_core.spec.config.ALWAYS_HASHED): rows of the model before the
    # per-loop LayerNorm was added are never taken for this model's
    loop_norm: bool = True

    @property
    def pre_post_layers(self) -> int:
        return 0

    def check(self, path: str) -> None:
        for name, low in (("width", 1), ("layers", 1), ("heads", 1), ("loops", 1), ("window", 1),
                          ("mlp_ratio", 1), ("eval_loops", 0), ("curriculum_start", 0),
                          ("curriculum_every", 1)):
            value = getattr(self, name)
            require(value >= low, f"{path}.{name}", f"must be >= {low}, got {value}")
        require(self.width % self.heads == 0, f"{path}.heads",
                f"must divide width={self.width}, got {self.heads}")
        if self.mixer not in MIXERS:
            raise unknown(f"{path}.mixer", "", self.mixer, sorted(MIXERS))
        require(self.window <= self.loops, f"{path}.window",
                f"ΔT must be <= loops (T={self.loops}), got {self.window}")
        require(self.curriculum_start <= self.loops, f"{path}.curriculum_start",
                f"must be <= loops (T={self.loops}), got {self.curriculum_start}")
        require(all(t >= 1 for t in self.eval_loop_iters), f"{path}.eval_loop_iters",
                f"every loop count must be >= 1, got {list(self.eval_loop_iters)}")
        require(self.init_std > 0, f"{path}.init_std", "must be > 0")

    def block_config(self) -> TransformerConfig:
        return TransformerConfig(width=self.width, depth=1, heads=self.heads, mixer=self.mixer,
                                 mlp_ratio=self.mlp_ratio, layer_norm=self.layer_norm)


def stack(cfg: LoopedConfig, n: int, causal: bool, max_len: int) -> nn.Sequential:
    return nn.Sequential(*(Block(cfg.block_config(), causal, max_len) for _ in range(n)))


class Body(nn.Module):
    """`n` GPT-2 blocks as `GPT2Model` runs them on `inputs_embeds`: learned positions added
    first, the blocks, then the final LayerNorm (`final_norm=False`: none)."""

    def __init__(self, cfg: LoopedConfig, n: int, causal: bool, max_len: int,
                 final_norm: bool = True):
        super().__init__()
        self.wpe = nn.Embedding(max_len, cfg.width)
        self.blocks = stack(cfg, n, causal, max_len)
        self.ln_f = norm(cfg.width, cfg.layer_norm and final_norm)

    def forward(self, h_BxTxW: torch.Tensor) -> torch.Tensor:
        return self.ln_f(self.blocks(h_BxTxW + self.wpe(positions(h_BxTxW))))


class Looped(ModelBase):
    def __init__(self, cfg: LoopedConfig, d_in: int, d_out: int, max_len: int, causal: bool):
        super().__init__()
        self.cfg, self.max_len = cfg, max_len
        L = cfg.pre_post_layers
        self.read_in = nn.Linear(d_in, cfg.width)
        self.pre = Body(cfg, L, causal, max_len) if L else nn.Identity()
        self.loop = Body(cfg, cfg.layers, causal, max_len, final_norm=cfg.loop_norm)  # tied
        self.post = Body(cfg, L, causal, max_len) if L else nn.Identity()
        # the ablation without per-loop LayerNorm normalises once, before the readout
        self.ln_out = norm(cfg.width, cfg.layer_norm and not cfg.loop_norm)
        self.read_out = nn.Linear(cfg.width, d_out)
        gpt2_init(self, cfg.init_std)
        self.step = 0  # training step, for the loop curriculum (set by training_loss)

    # -- pieces -------------------------------------------------------------------------
    def embed(self, x_BxTxI: torch.Tensor) -> torch.Tensor:
        T = x_BxTxI.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens exceeds max_len={self.max_len}")
        return self.pre(self.read_in(x_BxTxI))  # (B, T, W)

    def readout(self, z_BxTxW: torch.Tensor) -> torch.Tensor:
        return self.read_out(self.ln_out(self.post(z_BxTxW)))  # (B, T, O)

    def iterate(self, e: torch.Tensor, z: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            z = self.loop(z + e)  # input injection; positions and final LN every loop
        return z

    # -- the model contract ----------------------------------------------------------------
    def forward(self, x_BxTxI: torch.Tensor) -> torch.Tensor:
        n = self.cfg.eval_loops or self.cfg.loops
        e = self.embed(x_BxTxI)
        return self.readout(self.iterate(e, torch.zeros_like(e), n))

    def eval_loop_iters(self) -> list[int]:
        """Loop counts the evaluator reports (`loop_iter` rows)."""
        return sorted(set(self.cfg.eval_loop_iters) or range(1, 2 * self.cfg.loops + 1))

    def loop_outputs(self, x_BxTxI: torch.Tensor, loops) -> dict[int, torch.Tensor]:
        """{t: ŷ_t} for every t in `loops`, from one pass of max(loops) iterations."""
        wanted, out = set(loops), {}
        e = self.embed(x_BxTxI)
        z = torch.zeros_like(e)
        for t in range(1, max(wanted) + 1):
            z = self.iterate(e, z, 1)
            if t in wanted:
                out[t] = self.readout(z)
        return out

    def train_loops(self, step: int) -> int:
        """T at training step `step` under the loop curriculum."""
        cfg = self.cfg
        if not cfg.curriculum_start:
            return cfg.loops
        return min(cfg.loops, cfg.curriculum_start + step // cfg.curriculum_every)

    @staticmethod
    def training_loss_reads_step(cfg) -> bool:
        """Whether `training_loss` reads the step: only under a loop curriculum (a captured
        step, train.cuda_graph, cannot read it on the host; icl_core.spec.config.graph_refusal)."""
        return bool(cfg.curriculum_start)

    def training_loss(self, batch: Batch, step: int) -> torch.Tensor:
        """Eq. 6 window loss: T0 loops without gradients, then the mean masked MSE of the
        readouts after each of the last min(ΔT, T) iterations."""
        T = self.train_loops(step)
        t0 = max(T - self.cfg.window, 0)
        e = self.embed(batch.inputs)
        z = torch.zeros_like(e)
        if t0:
            with torch.no_grad():
                z = self.iterate(e.detach(), z, t0)
        losses = []
        for _ in range(T - t0):
            z = self.iterate(e, z, 1)
            losses.append(masked_mse(self.readout(z), batch))
        return torch.stack(losses).mean()

    def num_params(self) -> int:
        """Trainable parameters without the positional tables (the loop body counts once)."""
        position_weights = sum(m.weight.numel() for m in self.modules()
                               if isinstance(m, nn.Embedding))
        return sum(p.numel() for p in self.parameters()) - position_weights

