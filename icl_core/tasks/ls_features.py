"""Least squares with the construction's features, and the explicit-gradient task
(Liu et al. 2024, §5, Figs 6-7; Eqs. 10-11).

N data tokens and one final token, each of width S = D² + 3D + 1 (the layout of the hand-built
GD construction, icl_core/models/baseconv_gd.py):

    data token i:  [x_i (D) | y_i (1) | 0 (D)  | F_i (D + D²)]
    final token:   [0       | 0       | w0 (D) | F_final     ]

with x_i, w* ~ N(0, I_D), y_i = w*ᵀx_i (noiseless) and the features F by `features` = k:

* k = 0: zeros;
* k = 1: F_i = [y_i x_i ; flt(x_i x_iᵀ)] (the construction's first layer; 0 at the final token);
* k = 2: inclusive prefix sums of the k = 1 features, so the final token holds
  [Σ y_i x_i ; Σ flt(x_i x_iᵀ)] (the construction's second layer).

`target = "w"` (Fig 6): predict w* at the final token. `target = "grad"` (Fig 7): predict
∇L(w0) = (1/N) Σ (w0ᵀx_i − y_i) x_i (the project's one GD convention; the [code] also divides
by N) at the final token, for w0 ~ N(0, w0_std² I); at test time the model is applied
iteratively, w_{i+1} = w_i − η·model(prompt with w_i), and the error ‖w_i − w*‖²/D is reported
per inference iteration (`iterate`).

Trivial predictors (`trivial_predictors`; rows like the model's, "mse" and the iterated
"w_mse"): zero (the zero vector, E[w*] = E[∇L(w0)] = 0) and prompt_mean, the target's mean
given what the final token holds besides the data, i.e. over prompts sharing w0: E[w* | w0]
= 0 for target w (the same as zero), E[∇L(w0) | w0] = E[H] w0 − E[H w*] = w0 for target grad
(H = XᵀX/N, E[H] = I), read from the final token's w0 channels; iterated, w_i = (1 − η)^i w0.
No ridge: the data's targets y are not what the model outputs (OLS and GD are the learners).

Choices where the paper is silent or differs [inferred]:
* w0 has its own channels instead of the paper's [w0; 0; 0; 0] (which reuses the x slot), and
  target "w" prompts carry the final token too (the paper's LS_feature has N tokens: 36 wide
  at D = 5, ours 41), so one layout serves Figs 5-7 and the construction's frozen layers see
  exactly these tokens: a model with `construction_layers = k` on k = 0 prompts reads
  exactly the k-feature prompts (tested).
* k = 2 features are causal prefix sums (what the construction computes); the paper's
  "broadcast to every token" differs only before the last token, which a causal model
  reading the final token sees anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from icl_core.algorithms.baselines import gd, ls_grad, ols
from icl_core.common.batch import Batch, Layout  # Layout: the construction's too
from icl_core.common.validation import require
from icl_core.tasks.base import TaskBase, TaskConfig
from icl_core.tasks.draws import DrawnBatches, Draws


@dataclass(frozen=True)
class LSFeaturesConfig(TaskConfig):
    name: str = "ls_features"
    dim: int = 5  # D (paper: 5)
    n_points: int = 20  # N data tokens (paper: 20)
    features: int = 0  # k in {0, 1, 2}: outputs of the construction's first k layers
    target: Literal["w", "grad"] = "w"  # w* (Fig 6) or ∇L(w0) (Fig 7)
    w0_std: float = 1.0  # w0 ~ N(0, w0_std² I) (paper: N(0, I)); 0 starts GD from zero

    def shape(self) -> tuple[int, int, int]:
        """(d_in, d_out, seq_len) of the built task, from the config alone (planning)."""
        D = self.dim
        return D * D + 3 * D + 1, D, self.n_points + 1  # Layout(D).width

    def check(self, path: str) -> None:
        require(self.dim >= 1, f"{path}.dim", f"must be >= 1, got {self.dim}")
        require(self.n_points >= 1, f"{path}.n_points", f"must be >= 1, got {self.n_points}")
        require(self.features in (0, 1, 2), f"{path}.features",
                f"must be 0, 1 or 2; got {self.features}")
        require(self.w0_std >= 0, f"{path}.w0_std", "must be >= 0")


class LSFeatures(DrawnBatches, TaskBase):
    causal = True

    def __init__(self, cfg: LSFeaturesConfig, task_seed: int, device, dtype):
        del task_seed  # nothing fixed per task: every prompt draws its own w*
        self.cfg, self.device, self.dtype = cfg, device, dtype
        D, N = cfg.dim, cfg.n_points
        self.layout = Layout(D)
        self.d_in, self.d_out, self.seq_len = cfg.shape()
        self.prompt_len = N
        self.positions = torch.full((N + 1,), -1, dtype=torch.long)
        self.positions[-1] = N
        self.mask = self.positions >= 0

    def tokens(self, xs_BxNxD, ys_BxN, w0_BxD) -> torch.Tensor:
        """The (B, N+1, S) prompt for data (xs, ys) and the final token's w0."""
        c, D, k = self.layout, self.cfg.dim, self.cfg.features
        B, N, _ = xs_BxNxD.shape
        out = xs_BxNxD.new_zeros(B, N + 1, c.width)
        out[:, :N, c.x:c.x + D], out[:, :N, c.y] = xs_BxNxD, ys_BxN
        out[:, N, c.w:c.w + D] = w0_BxD
        if k >= 1:
            feats = torch.cat([ys_BxN.unsqueeze(-1) * xs_BxNxD,
                               torch.einsum("bnj,bnk->bnjk", xs_BxNxD, xs_BxNxD).flatten(2)],
                              dim=-1)  # (B, N, D + D²): [y x ; flt(x xᵀ)]
            out[:, :N, c.a:] = feats
            if k == 2:
                out[:, :, c.a:] = out[:, :, c.a:].cumsum(dim=1)
        return out

    def _draw(self, batch_size: int, draws: Draws) -> Batch:
        D, N, B = self.cfg.dim, self.cfg.n_points, batch_size
        xs, w, w0 = draws.normals([(B, N, D), (B, D), (B, D)], self.dtype)
        w0 = self.cfg.w0_std * w0
        B = xs.shape[0]  # K·B with a stack's draws (DrawnBatches)
        ys = torch.einsum("bnd,bd->bn", xs, w)
        goal = w if self.cfg.target == "w" else ls_grad(w0, xs, ys)
        targets = xs.new_zeros(B, N + 1, D)
        targets[:, -1] = goal
        return Batch(self.tokens(xs, ys, w0), targets, self.device_mask,
                     extras={"xs": xs, "ys": ys, "w": w, "w0": w0})

    # -- evaluation hooks (icl_core.training.evaluate) -------------------------------------------
    def iterate(self, predict, batch: Batch, steps, lr: float) -> dict[int, torch.Tensor]:
        """Iterative inference with the model as the gradient: {i: ‖w_i − w*‖²/D per prompt}.

        `predict` maps (P, N+1, S) prompts to (P, N+1, D) outputs (float64 on the CPU)."""
        xs, ys, w_star = batch.extras["xs"], batch.extras["ys"], batch.extras["w"]
        w, wanted, out = batch.extras["w0"], set(steps), {}
        for i in range(max(steps, default=0) + 1):
            if i in wanted:
                out[i] = (w - w_star).pow(2).mean(-1)
            if i < max(steps):
                w = w - lr * predict(self.tokens(xs, ys, w))[:, -1]
        return out

    def trivial_predictors(self) -> dict:
        """prompt_mean: E[target | w0] (module docstring): 0 for target w, w0 for grad."""
        c, D = self.layout, self.cfg.dim

        def mean_given_w0(inputs: torch.Tensor) -> torch.Tensor:
            out = inputs.new_zeros(inputs.shape[0], inputs.shape[1], D)
            if self.cfg.target == "grad":
                out[:, -1] = inputs[:, -1, c.w:c.w + D]
            return out

        return {"prompt_mean": mean_given_w0}

    def baseline_errors(self, batch: Batch, name: str, precision, eval_cfg):
        """[(metric, infer_iter, per-prompt error (P,))] of a classical baseline in
        `precision`: its w against w* ("mse" for target w; "w_mse" for target grad, where GD
        runs with the inference step size, like the iterated model)."""
        xs, ys = batch.extras["xs"].to(precision), batch.extras["ys"].to(precision)
        w_star = batch.extras["w"]
        metric = "mse" if self.cfg.target == "w" else "w_mse"

        def err(w):
            return (w.double() - w_star).pow(2).mean(-1)

        if name == "ols":
            return [(metric, None, err(ols(xs, ys)))]
        if self.cfg.target == "w":
            lr, steps = eval_cfg.gd_lr, eval_cfg.gd_steps
        else:
            lr, steps = eval_cfg.infer_lr, eval_cfg.infer_steps or eval_cfg.gd_steps
        iterates = gd(xs, ys, lr, steps, batch.extras["w0"].to(precision))
        return [(metric, t, err(w)) for t, w in iterates.items()]
