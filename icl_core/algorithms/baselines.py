"""Classical in-context baselines under the project's ONE gradient-descent convention:

    L(w)  = (1 / 2N) * sum_i (w.x_i - y_i)^2
    ∇L(w) = (1 / N) * X^T (X w - y)
    w    <- w - η ∇L(w)

Every GD, preconditioned-GD and explicit-gradient code path uses these functions; Newton's
method (Newton–Schulz inverse of the same loss's Hessian) sits beside them.
OLS is solved by SVD-based least squares (`gelsd`), never by normal equations: at N = D the
normal equations lose half the digits (see notes §11: float64 lstsq ~1e-26 vs ~3e-17).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from icl_core.common.batch import RegressionProblem


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


def ols_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    return {None: predict(ols(p.X, p.y), p.x_query)}


def gd_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    iterates = gd(p.X, p.y, eval_cfg.gd_lr, eval_cfg.gd_steps)
    return {t: predict(w, p.x_query) for t, w in iterates.items()}


def newton_schulz(
    X_BxNxD: torch.Tensor, y_BxN: torch.Tensor, alpha: float | torch.Tensor, steps: Sequence[int]
) -> dict[int, torch.Tensor]:
    """Newton's method on L(w) with the inverse Hessian by Newton–Schulz (AlgoFormer Eq. 4):

        H = (1/N) XᵀX,  g = (1/N) Xᵀy,  M_0 = α H,  M_{k+1} = 2 M_k − M_k H M_k,  w_k = M_k g

    I − M_k H = (I − αH²)^(2^k), so M_k → H⁺ (quadratically) for 0 < α < 2 / λ_max(H)² and
    w_k → the minimum-norm least-squares solution. `alpha`: a number or one per prompt (B,).
    Returns {k: w_k} (w = 0 when N = 0)."""
    B, N, D = X_BxNxD.shape
    wanted, out = set(steps), {}
    if N == 0:
        zero = torch.zeros(B, D, dtype=X_BxNxD.dtype, device=X_BxNxD.device)
        return {k: zero.clone() for k in wanted}
    H = X_BxNxD.transpose(1, 2) @ X_BxNxD / N  # (B, D, D)
    g = torch.einsum("bnd,bn->bd", X_BxNxD, y_BxN) / N
    alpha = torch.as_tensor(alpha, dtype=H.dtype, device=H.device)
    M = (alpha.reshape(-1, 1, 1) if alpha.ndim else alpha) * H
    for k in range(max(wanted, default=0) + 1):
        if k in wanted:
            out[k] = torch.einsum("bij,bj->bi", M, g)
        M = 2 * M - M @ H @ M
    return out


def newton_alpha(X_BxNxD: torch.Tensor, fraction: float) -> torch.Tensor:
    """α = fraction x 2 / λ_max(H)² per prompt (B,): inside the convergence bound of
    Newton–Schulz for 0 < fraction < 1 (the paper's α ∈ (0, 2/‖SSᵀ‖₂])."""
    B, N, D = X_BxNxD.shape
    if N == 0:
        return torch.ones(B, dtype=X_BxNxD.dtype, device=X_BxNxD.device)
    top = torch.linalg.eigvalsh(X_BxNxD.transpose(1, 2) @ X_BxNxD / N)[:, -1]
    return fraction * 2 / top.clamp_min(torch.finfo(top.dtype).tiny).pow(2)


def iterates(name: str, X, y, step: float, steps) -> dict[int, torch.Tensor]:
    """{k: w_k} of the iterative solver `name`: "gd_tuned" GD with η = step, "newton"
    Newton–Schulz with α = step x 2 / λ_max(H)² per prompt."""
    if name == "gd_tuned":
        return gd(X, y, step, steps)
    return newton_schulz(X, y, newton_alpha(X, step), steps)


def grid_search(name: str, problems: list, targets: list, grid: Sequence[float],
                steps: Sequence[int]) -> dict[int, float]:
    """The step size (η for GD, α's fraction for Newton–Schulz) per problem token with the lowest
    mean squared query error at the largest reported iteration on held-out prompts
    (non-finite errors lose)."""
    best = {}
    last = max(steps)
    for p, target in zip(problems, targets, strict=True):
        errs = []
        for value in grid:
            w = iterates(name, p.X, p.y, value, [last])[last]
            err = float((predict(w, p.x_query).double() - target).pow(2).mean())
            errs.append(err if err == err and err != float("inf") else float("inf"))
        best[p.token] = grid[min(range(len(grid)), key=errs.__getitem__)]
    return best


@runtime_checkable
class Tuned(Protocol):
    """A baseline with a step size to tune: icl_core.training.evaluate first runs `tune` on held-out
    prompts ({token: step size}), then calls the baseline with its result."""

    def tune(self, problems: list, targets: list, eval_cfg) -> dict[int, float]: ...

    def __call__(self, p: RegressionProblem, eval_cfg, tuned: dict) -> dict: ...


def tuned(name: str):
    def baseline(p: RegressionProblem, eval_cfg, tuned: dict) -> dict[int | None, torch.Tensor]:
        its = iterates(name, p.X, p.y, tuned[p.token], eval_cfg.gd_steps)
        return {t: predict(w, p.x_query) for t, w in its.items()}

    def tune(problems, targets, eval_cfg) -> dict[int, float]:
        grid = eval_cfg.gd_lr_grid if name == "gd_tuned" else eval_cfg.newton_alpha_grid
        return grid_search(name, problems, targets, grid, eval_cfg.gd_steps)

    baseline.tune = tune  # the evaluator runs it on held-out prompts first
    return baseline


def teacher_net_baseline(p: RegressionProblem, eval_cfg) -> dict[int | None, torch.Tensor]:
    raise ValueError("eval.baselines: 'teacher_net' trains a network of the teacher's class; "
                     "only a task with a teacher (relu_teacher) defines it")
