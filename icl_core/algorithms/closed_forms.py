"""Closed forms for linear self-attention (LSA) as preconditioned GD (Ahn et al., arXiv 2306.00297).

References are to the paper and to the project's notes on it
(shared/notes/paper_preconditioned_gd_linear_transformer.md, "notes §k"). Everything is float64; the LSA optimum over the set S of Thm 4 is computed from
EXACT rational Wishart moments (`fractions.Fraction`), so no Hankel ill-conditioning enters.

GD convention: the project's one convention (icl_core.algorithms.baselines), L(w) = (1/2N) Σ (wᵀx_i − y_i)²,
∇L(w) = (1/N) Xᵀ(Xw − y), and a preconditioned step w ← w − P ∇L(w). On noiseless data
y = Xw*, ∇L(w) = (1/n) XᵀX (w − w*) = ∇R(w) of Lemma 2, so the paper's w_{ℓ+1} = w_ℓ + A_ℓ ∇R(w_ℓ)
is P_ℓ = −A_ℓ here (plain GD: A = −ηI ⇔ P = ηI; Thm 4's A_ℓ = a_ℓ Σ⁻¹ ⇔ P_ℓ = −a_ℓ Σ⁻¹).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import cache

import numpy as np
import torch

from icl_core.algorithms.baselines import ls_grad, predict

__all__ = [
    "dist_to_identity",
    "dist_to_identity_batch",
    "gamma_star",
    "one_layer_optimal_loss",
    "wishart_moments",
    "wishart_moments_exact",
    "lsa_optimal_poly",
    "lsa_optimal_loss",
    "lsa_optimal_steps",
    "loss_on_S",
    "preconditioned_gd",
    "gd_steps",
    "sigma_from_spectrum",
    "lsa_optimal_baseline",
]


def _as_numpy(M) -> np.ndarray:
    if isinstance(M, torch.Tensor):
        M = M.detach().cpu().numpy()
    return np.asarray(M, dtype=np.float64)


# ----------------------------------------------------------------------------- Dist (§5)


def dist_to_identity_batch(M) -> np.ndarray:
    """Dist(M, I) = min_α ‖M − αI‖_F / ‖M‖_F = sqrt(1 − tr(M)² / (d ‖M‖_F²)) (paper Figs 1, 3; notes §5).

    M: (..., d, d), numpy or torch. Returns a float64 array of shape (...), values in [0, 1].
    Invariant under transpose and orthogonal conjugation M → UᵀMU.
    """
    M = _as_numpy(M)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2]:
        raise ValueError(f"expected (..., d, d) square matrices, got shape {M.shape}")
    d = M.shape[-1]
    tr = np.trace(M, axis1=-2, axis2=-1)
    fro2 = np.sum(M * M, axis=(-2, -1))
    return np.sqrt(np.clip(1.0 - tr**2 / (d * fro2), 0.0, 1.0))


def dist_to_identity(M) -> float:
    """Dist(M, I) for one square (d, d) matrix (numpy or torch); see `dist_to_identity_batch`."""
    M = _as_numpy(M)
    if M.ndim != 2:
        raise ValueError(f"expected a 2-D square matrix, got shape {M.shape}")
    return float(dist_to_identity_batch(M))


# ----------------------------------------------------------------------------- one layer (Thm 1)


def gamma_star(sigma, n: int) -> np.ndarray:
    """Thm 1 (w* ~ N(0, I), x ~ N(0, Σ)): the global 1-layer LSA optimum is one preconditioned GD
    step from 0 with Γ* = n [(n+1) Σ + tr(Σ) I]⁻¹ (notes §6.2). Returns (d, d) float64."""
    S = _as_numpy(sigma)
    d = S.shape[0]
    return n * np.linalg.inv((n + 1) * S + np.trace(S) * np.eye(d))


def one_layer_optimal_loss(sigma, n: int) -> float:
    """Loss of Thm 1's optimum: f* = Σ_j λ_j (λ_j + tr Σ) / ((n+1) λ_j + tr Σ) (notes §6.3).

    Isotropic Σ = I: f* = d(d+1)/(n+d+1). (Also the Σ-independent 1-layer loss for w* ~ N(0, Σ⁻¹)
    with Γ = n/(n+d+1) Σ⁻¹, notes §6.4.)
    """
    lam = np.linalg.eigvalsh(_as_numpy(sigma))
    t = lam.sum()
    return float(np.sum(lam * (lam + t) / ((n + 1) * lam + t)))


# ----------------------------------------------------------------------------- Wishart moments


@cache
def _trace_product_moment(n: int, d: int, parts: tuple[int, ...]) -> int:
    """E Π_i tr(A^{parts_i}) for A = WWᵀ, W a d×n matrix of iid N(0, 1) (exact integer).

    Stein's lemma E[W_ij F(W)] = E[∂F/∂W_ij] on tr A^k = Σ_ij W_ij (WᵀA^{k−1})_ji gives, with
    μ the other parts (tr A⁰ = d):
        E[tr A^k Πμ] = (n + k − 1) E[tr A^{k−1} Πμ] + Σ_{b=0}^{k−2} E[tr A^{k−1−b} tr A^b Πμ]
                       + Σ_i 2 μ_i E[tr A^{k+μ_i−1} Π_{j≠i} μ_j].
    Each term has total degree one lower, so the memoised recursion terminates at E[1] = 1.
    `parts` is a descending tuple of positive ints.
    """
    if not parts:
        return 1
    k, rest = parts[0], parts[1:]

    def T(extra: Sequence[int], base: Sequence[int] = rest) -> int:
        pos = [p for p in (*base, *extra) if p > 0]
        zeros = len(base) + len(extra) - len(pos)
        return d**zeros * _trace_product_moment(n, d, tuple(sorted(pos, reverse=True)))

    total = (n + k - 1) * T((k - 1,))
    for b in range(k - 1):
        total += T((k - 1 - b, b))
    for i, mu in enumerate(rest):
        total += 2 * mu * T((k + mu - 1,), rest[:i] + rest[i + 1 :])
    return total


def wishart_moments_exact(n: int, d: int, kmax: int) -> list[Fraction]:
    """m_k = E tr S^k, k = 0..kmax, for S = X̄X̄ᵀ/n with X̄ d×n iid N(0, 1) — EXACT rationals.

    Computed by the real-Gaussian Stein (Schwinger–Dyson) recursion over products of traces
    (`_trace_product_moment`); m0 = d, m1 = d, m2 = d(n+d+1)/n, m3 = d(n²+d²+3nd+3n+3d+4)/n².
    """
    n, d = int(n), int(d)
    if n < 1 or d < 1 or kmax < 0:
        raise ValueError("need n >= 1, d >= 1, kmax >= 0")
    return [Fraction(d)] + [
        Fraction(_trace_product_moment(n, d, (k,)), n**k) for k in range(1, kmax + 1)
    ]


def wishart_moments(n: int, d: int, kmax: int) -> np.ndarray:
    """float64 array m[0..kmax] of m_k = E tr S^k (exact values rounded once; notes §6.5, §10)."""
    return np.array([float(m) for m in wishart_moments_exact(n, d, kmax)], dtype=np.float64)


# ----------------------------------------------------------------------------- L layers on S (Thm 4)


def _solve_exact(H: list[list[Fraction]], g: list[Fraction]) -> list[Fraction]:
    """Solve H x = g exactly (Gauss–Jordan over the rationals; H is positive definite)."""
    L = len(g)
    A = [[*row, rhs] for row, rhs in zip(H, g, strict=True)]
    for col in range(L):
        piv = next(r for r in range(col, L) if A[r][col] != 0)
        A[col], A[piv] = A[piv], A[col]
        p = A[col][col]
        A[col] = [v / p for v in A[col]]
        for r in range(L):
            if r != col and A[r][col] != 0:
                f = A[r][col]
                A[r] = [a - f * b for a, b in zip(A[r], A[col], strict=True)]
    return [A[r][L] for r in range(L)]


@cache
def lsa_optimal_poly(n: int, d: int, layers: int) -> tuple[tuple[Fraction, ...], Fraction]:
    """Exact optimum over S = {A_ℓ = a_ℓ Σ⁻¹} (Thm 4, w* ~ N(0, Σ⁻¹); notes §6.5).

    On S the loss is Σ-independent: f(a) = E tr Π_ℓ (I + a_ℓ S)² = E tr p(S)² with
    p(s) = Π_ℓ (1 + a_ℓ s) = 1 + Σ_{k=1}^{L} c_k s^k. So f = m0 + 2 gᵀc + cᵀHc with H_jk = m_{j+k},
    g_k = m_k, minimised at c = −H⁻¹g, f* = m0 − gᵀH⁻¹g. Returns ((1, c_1, …, c_L), f*) exactly.
    """
    if layers < 1:
        raise ValueError("layers must be >= 1")
    m = wishart_moments_exact(n, d, 2 * layers)
    H = [[m[j + k] for k in range(1, layers + 1)] for j in range(1, layers + 1)]
    g = [m[k] for k in range(1, layers + 1)]
    c = [-x for x in _solve_exact(H, g)]
    f = m[0] + sum(gk * ck for gk, ck in zip(g, c, strict=True))
    return (Fraction(1), *c), f


def lsa_optimal_loss(n: int, d: int, layers: int) -> float:
    """f_L* = m0 − gᵀH⁻¹g: best in-context loss of L-layer LSA on Thm 4's set S (notes §6.5, §8).

    Golden (n=20, d=5): L=1..4 → 1.154, 0.361, 0.134, 0.055; (n=10, d=5, L=3) → 0.583.
    """
    return float(lsa_optimal_poly(int(n), int(d), int(layers))[1])


def lsa_optimal_steps(n: int, d: int, layers: int) -> np.ndarray:
    """Optimal step sizes a_ℓ on S (A_ℓ = a_ℓ Σ⁻¹; preconditioner P_ℓ = −a_ℓ Σ⁻¹ in w ← w − P∇L).

    The optimal p(s) = 1 + Σ c_k s^k = Π(1 + a_ℓ s) has real positive roots r_ℓ (it is a
    Christoffel–Darboux kernel polynomial of the Wishart spectral measure), so a_ℓ = −1/r_ℓ.
    Any order is optimal (Lemma 8); returned sorted ascending. L=1: a = −n/(n+d+1).
    """
    coeffs, _ = lsa_optimal_poly(int(n), int(d), int(layers))
    c = np.array([float(x) for x in coeffs], dtype=np.float64)
    roots = np.polynomial.polynomial.polyroots(c)
    # Newton-polish each root on the float polynomial (roots are simple and well separated).
    dc = np.polynomial.polynomial.polyder(c)
    for _ in range(3):
        roots = roots - np.polynomial.polynomial.polyval(
            roots, c
        ) / np.polynomial.polynomial.polyval(roots, dc)
    if np.max(np.abs(roots.imag), initial=0.0) > 1e-8 * np.max(np.abs(roots)):
        raise ArithmeticError(f"optimal polynomial has non-real roots: {roots}")
    return np.sort(-1.0 / roots.real)


def loss_on_S(steps, n: int, d: int) -> float:
    """Exact loss f(a) = E tr Π_ℓ (I + a_ℓ S)² on S for given step sizes a_ℓ (any order; Lemma 8)."""
    p = np.array([1.0])
    for a in np.asarray(steps, dtype=np.float64):
        p = np.polynomial.polynomial.polymul(p, [1.0, a])
    m = wishart_moments(n, d, 2 * (len(p) - 1))
    return float(sum(p[j] * p[k] * m[j + k] for j in range(len(p)) for k in range(len(p))))


# ----------------------------------------------------------------------------- (preconditioned) GD


def preconditioned_gd(
    X_BxNxD: torch.Tensor,
    y_BxN: torch.Tensor,
    preconditioners: Sequence[torch.Tensor],
    w0_BxD: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Preconditioned GD w_{ℓ+1} = w_ℓ − P_ℓ ∇L(w_ℓ) with the project's ∇L (baselines.ls_grad).

    This is Lemma 2's LSA forward pass with A_ℓ = −P_ℓ (the prediction is x_qᵀ w_L). Each P_ℓ is
    (D, D) (shared) or (B, D, D) (per prompt), numpy or torch. k-step GD is P_ℓ = ηI.
    Returns [w_0, w_1, …, w_L], each (B, D); w_0 defaults to 0.
    """
    B, N, D = X_BxNxD.shape
    kw = {"dtype": X_BxNxD.dtype, "device": X_BxNxD.device}
    w = torch.zeros(B, D, **kw) if w0_BxD is None else w0_BxD
    out = [w.clone()]
    for P in preconditioners:
        P = torch.as_tensor(P, **kw)
        if N > 0:
            g = ls_grad(w, X_BxNxD, y_BxN)
            w = w - (g @ P.T if P.ndim == 2 else torch.einsum("bij,bj->bi", P, g))
        out.append(w.clone())
    return out


def gd_steps(
    X_BxNxD: torch.Tensor,
    y_BxN: torch.Tensor,
    lr: float,
    steps: int,
    w0_BxD: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """`steps` steps of plain GD (P_ℓ = lr·I) via `preconditioned_gd`: [w_0, …, w_steps]."""
    D = X_BxNxD.shape[-1]
    eye = lr * torch.eye(D, dtype=X_BxNxD.dtype, device=X_BxNxD.device)
    return preconditioned_gd(X_BxNxD, y_BxN, [eye] * steps, w0_BxD)


# ----------------------------------------------------------------------------- task covariance (§3)


def sigma_from_spectrum(spectrum, task_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Σ = Uᵀ D² U with D = diag(spectrum) and U Haar-random orthogonal (paper §6 / notes §3).

    U is the Q factor of a d×d standard Gaussian matrix from numpy default_rng(task_seed), with the
    sign fix R_ii > 0 (which makes Q exactly Haar). Deterministic per seed. The paper's
    D = diag(1, 1, 0.5, 0.25, 1) gives eig(Σ) = (1, 1, 0.25, 0.0625, 1), κ = 16.
    Returns (sigma (d, d), U (d, d)), float64; sigma is exactly symmetric.
    """
    D = np.asarray(spectrum, dtype=np.float64).reshape(-1)
    d = D.shape[0]
    G = np.random.default_rng(task_seed).standard_normal((d, d))
    Q, R = np.linalg.qr(G)
    U = Q * np.where(np.diag(R) < 0, -1.0, 1.0)  # flip columns so that R_ii > 0
    sigma = (U.T * D**2) @ U
    return 0.5 * (sigma + sigma.T), U


# ----------------------------------------------------------------------------- the optimum as a baseline


LSA_OPTIMAL_LAYERS = tuple(range(1, 9))  # L reported by "lsa_optimal" (Ahn's range: 1-8)


def lsa_optimal_baseline(p, eval_cfg, task) -> dict[int | None, torch.Tensor]:
    """The f_L*-optimal predictor of Ahn et al. (their §3): L steps of preconditioned GD with
    P_ℓ = −a_ℓ Σ⁻¹ at the optimal step sizes a_ℓ (closed_forms.lsa_optimal_steps) for this
    problem's n examples and the task's Σ, one prediction per L (infer_iter = L). Its expected
    query error is f_L* exactly; scored on the model's own test prompts it is the paired
    reference of "trained loss ≈ f_L*" (model ÷ optimum on the same prompts)."""
    n, d = p.X.shape[1], p.X.shape[2]
    if n == 0:
        zero = torch.zeros_like(p.x_query[:, 0])
        return {L: zero for L in LSA_OPTIMAL_LAYERS}
    sigma_inv = torch.linalg.inv(task.sigma.to(torch.float64)).to(p.X)
    out = {}
    for L in LSA_OPTIMAL_LAYERS:
        steps = lsa_optimal_steps(n, d, L)
        ws = preconditioned_gd(p.X, p.y, [-float(a) * sigma_inv for a in steps])
        out[L] = predict(ws[-1], p.x_query)
    return out


lsa_optimal_baseline.uses_task = True  # baseline_rows passes the task (its Σ)
