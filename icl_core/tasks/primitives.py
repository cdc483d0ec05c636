"""Seq2seq primitives (Liu et al. 2024, App. B.2-B.3; Figs 3, 4, 8, 9).

A prompt is u ∈ R^{N×D} with all entries i.i.d. N(0, 1) (paper: D = 20, N = 40), noiseless.
Every token is supervised: token k's target is computed from u (for READ, from rows up to k),
so the layout is N tokens of dimension D, mask all True, position k at token k.
With D = 4, N = 3:

    u = [[ .3, -1.2,  .7,  .1],
         [1.1,   .4, -.9,  2.],
         [-.5,  2.0,  .2, -.3]]

* ``read`` (d_out = D): y = u except row j := row i, i < j fixed.  With i = 0, j = 2:
      y = [u_0, u_1, u_0]
* ``affine`` (d_out = 1): y_k = u_k · h, h ~ N(0, affine_std² I) fixed, no bias.
      y = u @ h = [[.3 h1 - 1.2 h2 + .7 h3 + .1 h4], ...]
* ``multiply`` (d_out = D/2): y = u[:, :D/2] ⊙ u[:, D/2:].
      y = [[.21, -.12], [-.99, .8], [-.1, -.6]]

Gap in the paper: it says i, j and h are "sampled at each iteration", but they are not part
of the input, so the task would be unlearnable. Like the authors' code, we fix them once per
run from the task seed (on the CPU, so every device sees the same), with i < j so that a
causal model can copy row i into row j. They are exposed as `read_from`, `read_to` and `h`.

`pool_tokens = True` tells the evaluator to pool the error over all supervised tokens and
output dims of a prompt: the paper's metric is the MSE over all N × d_out entries, not a
curve over positions.

Trivial predictors (`trivial_predictors`): zero, and prompt_mean, which here is zero too: the
prompt holds no targets (y is a fixed function of u, not given in context), and the best
predictor that ignores u is E[y] = 0 for all three ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from icl_core.common.device import derive_seed
from icl_core.common.validation import require
from icl_core.tasks.base import Batch, TaskBase, TaskConfig
from icl_core.tasks.draws import DrawnBatches, Draws


@dataclass(frozen=True)
class PrimitivesConfig(TaskConfig):
    name: str = "primitives"
    op: Literal["read", "affine", "multiply"] = "multiply"  # the primitive to learn
    dim: int = 20  # D: token dimension (paper: 20)
    n_points: int = 40  # N: tokens per sequence (paper: 40)
    affine_std: float = 3.0  # std of h for AFFINE ([code]: 3*randn; paper: "N(0, 3I)")

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        D = self.dim
        return D, {"read": D, "affine": 1, "multiply": D // 2}[self.op], self.n_points

    def check(self, path: str) -> None:
        require(self.dim >= 1, f"{path}.dim", f"must be >= 1, got {self.dim}")
        if self.op == "multiply":
            require(
                self.dim >= 2 and self.dim % 2 == 0,
                f"{path}.dim", f"multiply needs an even dim >= 2 (two halves), got {self.dim}",
            )
        require(self.n_points >= 1, f"{path}.n_points", f"must be >= 1, got {self.n_points}")
        if self.op == "read":
            require(
                self.n_points >= 2,
                f"{path}.n_points", f"read needs >= 2 tokens (i != j), got {self.n_points}",
            )
        require(self.affine_std > 0, f"{path}.affine_std", "must be > 0")


class Primitives(DrawnBatches, TaskBase):
    causal = True
    pool_tokens = True  # metric: MSE pooled over all tokens and output dims of a prompt

    def __init__(self, cfg: PrimitivesConfig, task_seed: int, device, dtype):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        D, N = cfg.dim, cfg.n_points
        # Fixed task parameters, drawn once from the task seed on the CPU. h first, so it
        # depends on D only; the read pair depends on N.
        g = torch.Generator().manual_seed(derive_seed(task_seed, "primitives"))
        h_D = cfg.affine_std * torch.randn(D, generator=g, dtype=torch.float64)
        self.h = h_D.to(device=device, dtype=dtype)
        pair = torch.randperm(N, generator=g)[:2].tolist()  # distinct when N >= 2
        self.read_from, self.read_to = min(pair), max(pair)  # i < j
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.prompt_len = N
        self.positions = torch.arange(N)
        self.mask = torch.ones(N, dtype=torch.bool)

    def trivial_predictors(self) -> dict:
        """prompt_mean = E[y] = 0: no targets in the prompt (module docstring)."""
        return {"prompt_mean": lambda inputs: inputs.new_zeros(*inputs.shape[:2], self.d_out)}

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        D, N = self.cfg.dim, self.cfg.n_points
        u_BxNxD = draws.normal((batch_size, N, D), self.dtype)  # K·B prompts with a stack
        if self.cfg.op == "read":
            y_BxNxO = u_BxNxD.clone()
            y_BxNxO[:, self.read_to] = u_BxNxD[:, self.read_from]
        elif self.cfg.op == "affine":
            y_BxNxO = (u_BxNxD @ self.h).unsqueeze(-1)
        else:
            y_BxNxO = u_BxNxD[..., : D // 2] * u_BxNxD[..., D // 2 :]
        mask = self.device_mask
        return Batch(u_BxNxD, y_BxNxO, mask, extras={"u": u_BxNxD})
