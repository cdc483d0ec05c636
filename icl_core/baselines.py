"""Classical in-context baselines under the project's ONE gradient-descent convention:

    L(w)  = (1 / 2N) * sum_i (w.x_i - y_i)^2
    ∇L(w) = (1 / N) * X^T (X w - y)
    w    <- w - η ∇L(w)

Every GD, preconditioned-GD and explicit-gradient code path uses these functions.
OLS is solved by SVD-based least squares (`gelsd`), never by normal equations: at N = D the
normal equations lose half the digits (see notes §11: float64 lstsq ~1e-26 vs ~3e-17).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # tasks use these functions: a runtime import would be circular
    from icl_core.tasks.base import RegressionProblem


def ls_loss(w_BxD: torch.Tensor, X_BxNxD: torch.Tensor, y_BxN: torch.Tensor) -> torch.Tensor:
    """L(w) = (1/2N) Σ (wᵀx_i − y_i)², per prompt: (B,)."""
    r = torch.einsum("bnd,bd->bn", X_BxNxD, w_BxD) - y_BxN
    return 0.5 * r.pow(2).mean(dim=-1)


def ls_grad(w_BxD: torch.Tensor, X_BxNxD: torch.Tensor, y_BxN: torch.Tensor) -> torch.Tensor:
    """∇L(w) = (1/N) Xᵀ(Xw − y), per prompt: (B, D)."""
    r = torch.einsum("bnd,bd->bn", X_BxNxD, w_BxD) - y_BxN
    return torch.einsum("bnd,bn->bd", X_BxNxD, r) / X_BxNxD.shape[1]


def gd(
    X_BxNxD: torch.Tensor,
    y_BxN: torch.Tensor,
    lr: float,
    steps: Sequence[int],
    w0_BxD: torch.Tensor | None = None,
) -> dict[int, torch.Tensor]:
    """Full-batch GD from w0 (default 0); returns {t: w_t} for each requested t."""
    B, N, D = X_BxNxD.shape
    w = torch.zeros(B, D, dtype=X_BxNxD.dtype, device=X_BxNxD.device) if w0_BxD is None else w0_BxD
    wanted, out = set(steps), {}
    if 0 in wanted:
        out[0] = w.clone()
    for t in range(1, max(steps, default=0) + 1):
        if N > 0:
            w = w - lr * ls_grad(w, X_BxNxD, y_BxN)
        if t in wanted:
            out[t] = w.clone()
    return out


def ols(X_BxNxD: torch.Tensor, y_BxN: torch.Tensor) -> torch.Tensor:
    """Least-squares w per prompt (minimum-norm when N < D), by SVD-based lstsq: (B, D)."""
    B, N, D = X_BxNxD.shape
    if N == 0:
        return torch.zeros(B, D, dtype=X_BxNxD.dtype, device=X_BxNxD.device)
    X, y = X_BxNxD.cpu(), y_BxN.cpu().unsqueeze(-1)
    w = torch.linalg.lstsq(X, y, driver="gelsd").solution.squeeze(-1)
    return w.to(X_BxNxD.device)


def predict(w_BxD: torch.Tensor, x_BxD: torch.Tensor) -> torch.Tensor:
    return (w_BxD * x_BxD).sum(dim=-1)


def _ols_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    return {None: predict(ols(p.X, p.y), p.x_query)}


def _gd_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    iterates = gd(p.X, p.y, eval_cfg.gd_lr, eval_cfg.gd_steps)
    return {t: predict(w, p.x_query) for t, w in iterates.items()}


def _teacher_net_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    raise ValueError("eval.baselines: 'teacher_net' trains a network of the teacher's class; "
                     "only a task with a teacher (relu_teacher) defines it")


# name -> fn(problem, eval_cfg) -> {infer_iter (None if not iterative): predictions (B,)}
# (teacher_net: computed by the relu_teacher task's own `baseline_errors`)
BASELINES: dict[str, Callable] = {"ols": _ols_baseline, "gd": _gd_baseline,
                                  "teacher_net": _teacher_net_baseline}
