"""In-context linear regression: x_i ~ N(0, Σ), w ~ N(0, I) or N(0, Σ⁻¹), y_i = w.x_i + σ·eps.

Σ = I by default. With a `spectrum` D (Ahn et al. 2023, §5.3), Σ = Uᵀ D² U with a Haar U
drawn from the task seed; `w_law = "inverse"` draws w ~ N(0, Σ⁻¹) (their Thms 4-5 and all
their experiments). The fixed-N layout is also the linear-attention column layout: token i
is the column z_i = [x_i; y_i] of Z, the query [x_q; 0] (the LSA model transposes).

Two layouts (Liu et al. 2024, Table in App. B.2):

* ``fixed_n`` (Figs 2, 10): N + 1 tokens of dimension D + 1, only the query supervised.
  With D = 2, N = 2:  [x1; y1] [x2; y2] [xq; 0]  ->  target y_q at the last token.
      tokens = [[ .3, -1.2,  0.7],
                [1.1,  0.4, -0.9],
                [-.5,  2.0,  0.0]]      target[-1] = y_q, mask = [F, F, T]
* ``all_prefix`` (Fig 1, Garg et al.): 2N + 1 tokens of dimension D, x_i then y_i*e_1,
  ending with the query; the prediction of y_{k+1} is read at x-token k+1, after k examples.
      [x1, y1 e1, x2, y2 e1, x3]  ->  targets y1, y2, y3 at tokens 0, 2, 4 (positions 0, 1, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from icl_core.algorithms.floor import bayes_predictor
from icl_core.common.validation import require
from icl_core.tasks.base import (
    Batch,
    RegressionProblem,
    TaskBase,
    TaskConfig,
    all_prefix_positions,
    deinterleave,
    interleave,
    prefix_problems,
)
from icl_core.tasks.draws import DrawnBatches, Draws


@dataclass(frozen=True)
class LinearRegressionConfig(TaskConfig):
    name: str = "linear_regression"
    dim: int = 5  # D: dimension of x and w (paper: 5)
    n_points: int = 20  # N: in-context examples before the query (paper: sequence length 20)
    layout: Literal["fixed_n", "all_prefix"] = "fixed_n"
    noise_std: float = 0.0  # sigma of label noise (paper: noiseless)
    spectrum: tuple[float, ...] = ()  # D with Σ = Uᵀ D² U (empty: Σ = I); Ahn: (1,1,.5,.25,1)
    w_law: Literal["identity", "inverse"] = "identity"  # w ~ N(0, I) or N(0, Σ⁻¹)

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        if self.layout == "fixed_n":
            return self.dim + 1, 1, self.n_points + 1
        return self.dim, 1, 2 * self.n_points + 1

    def fixed_bytes(self) -> float:
        """KnowsMemory: Σ (d x d, float64), and with a spectrum the two maps beside it."""
        return self.dim * self.dim * 8.0 * (3 if self.spectrum else 1)

    def check(self, path: str) -> None:
        require(
            not self.spectrum or len(self.spectrum) == self.dim,
            f"{path}.spectrum", f"needs {self.dim} entries (one per dim), got {len(self.spectrum)}",
        )
        require(all(s > 0 for s in self.spectrum), f"{path}.spectrum", "entries must be > 0")
        require(self.dim >= 1, f"{path}.dim", f"must be >= 1, got {self.dim}")
        require(self.n_points >= 1, f"{path}.n_points", f"must be >= 1, got {self.n_points}")
        require(self.noise_std >= 0, f"{path}.noise_std", "must be >= 0")


class LinearRegression(DrawnBatches, TaskBase):
    causal = True

    def __init__(self, cfg: LinearRegressionConfig, task_seed: int, device, dtype):
        self.cfg, self.device, self.dtype = cfg, device, dtype
        # Fixed task parameters (from the task seed): the covariance's rotation U.
        self.sigma = torch.eye(cfg.dim, dtype=torch.float64)
        self.x_map = self.w_map = None  # x = x̄ D U, w = w̄ D⁻¹ U (row vectors)
        if cfg.spectrum:
            from icl_core.algorithms.closed_forms import sigma_from_spectrum

            sigma, U = sigma_from_spectrum(cfg.spectrum, task_seed)
            D = torch.tensor(cfg.spectrum, dtype=torch.float64)
            U = torch.as_tensor(U, dtype=torch.float64)
            self.sigma = torch.as_tensor(sigma, dtype=torch.float64)
            self.x_map = (torch.diag(D) @ U).to(device=device, dtype=dtype)
            self.w_map = (torch.diag(1 / D) @ U).to(device=device, dtype=dtype)
        N = cfg.n_points
        self.prompt_len = N
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        if cfg.layout == "fixed_n":
            self.positions = torch.full((N + 1,), -1, dtype=torch.long)
            self.positions[-1] = N
        else:
            self.positions = all_prefix_positions(N)
        self.mask = self.positions >= 0

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        D, N = self.cfg.dim, self.cfg.n_points
        noisy = self.cfg.noise_std > 0
        shapes = [(batch_size, N + 1, D), (batch_size, D)] + [(batch_size, N + 1)] * noisy
        xs, w, *noise = draws.normals(shapes, self.dtype)  # xs (B, N+1, D): last row the query
        B = xs.shape[0]  # K·B with a stack's draws (DrawnBatches)
        if self.x_map is not None:
            xs = xs @ self.x_map  # rows ~ N(0, Σ)
            if self.cfg.w_law == "inverse":
                w = w @ self.w_map  # ~ N(0, Σ⁻¹)
        ys = torch.einsum("bnd,bd->bn", xs, w)  # (B, N+1)
        if noisy:
            ys = ys + self.cfg.noise_std * noise[0]
        if self.cfg.layout == "fixed_n":
            y_in = torch.cat([ys[:, :N], torch.zeros_like(ys[:, N:])], dim=1)
            inputs = torch.cat([xs, y_in.unsqueeze(-1)], dim=-1)  # (B, N+1, D+1)
            targets = torch.zeros(B, N + 1, 1, device=self.device, dtype=self.dtype)
            targets[:, -1, 0] = ys[:, -1]
        else:
            inputs, targets = interleave(xs, ys)
        mask = self.device_mask
        return Batch(inputs, targets, mask, extras={"xs": xs, "ys": ys, "w": w})

    def regression_problems(self, batch: Batch) -> list[RegressionProblem]:
        """The least-squares problem behind each supervised token (for OLS / GD baselines)."""
        return prefix_problems(batch.extras["xs"], batch.extras["ys"], self.positions)

    def floor_predictor(self):
        """The floor (icl_core.algorithms.floor): the Bayes posterior mean of y_query given the examples
        before each token. y = x·w + σε with w ~ N(0, C): ŵ = (XᵀX + σ² C⁻¹)⁻¹ Xᵀy, i.e.
        ridge with no intercept and prior precision C⁻¹ scaled by σ². w_law "identity":
        C = I, λ = σ² (whatever Σ of x: the prior is on w); "inverse": C = Σ⁻¹, penalty
        σ² wᵀΣw, computed on whitened features x·w_mapᵀ (w = w̄ w_map with w̄ ~ N(0, I)).
        σ = 0: the minimum-norm (in C⁻¹) interpolant, exact once k >= dim; for w, x ~ N(0, I)
        its expected error is dim − k below that, and σ² + σ² E tr((XᵀX + σ² I)⁻¹) with noise
        (dim + σ² at k = 0, → σ² as k grows)."""
        inverse = self.w_map is not None and self.cfg.w_law == "inverse"
        w_map = self.w_map.to(torch.float64) if inverse else None
        features = (lambda x: x @ w_map.to(x.dtype).T) if inverse else None
        return bayes_predictor(self, self.cfg.noise_std ** 2, features)

    def context_problems(self, inputs: torch.Tensor) -> list[RegressionProblem]:
        """The same problems read from the prompt's inputs (trivial predictors: prompt_mean =
        the mean of the y's before the token, ridge = ridge with an intercept on them)."""
        if self.cfg.layout == "fixed_n":
            D = self.cfg.dim
            return prefix_problems(inputs[..., :D], inputs[..., D], self.positions)
        return prefix_problems(*deinterleave(inputs), self.positions)
