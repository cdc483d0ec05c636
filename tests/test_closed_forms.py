"""Closed forms of Ahn et al. (LSA = preconditioned GD) against exact algebra and Monte Carlo.

Notes: /work/shared/notes/paper_preconditioned_gd_linear_transformer.md (§5, §6, §8, §10).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from icl_core.algorithms.baselines import gd
from icl_core.algorithms.closed_forms import (
    dist_to_identity,
    dist_to_identity_batch,
    gamma_star,
    gd_steps,
    loss_on_S,
    lsa_optimal_loss,
    lsa_optimal_steps,
    one_layer_optimal_loss,
    preconditioned_gd,
    sigma_from_spectrum,
    wishart_moments,
    wishart_moments_exact,
)

PAPER_SPECTRUM = (1.0, 1.0, 0.5, 0.25, 1.0)  # D; eig(Σ) = D² = (1, 1, 0.25, 0.0625, 1)
f64 = torch.float64


def haar(d, seed):
    return sigma_from_spectrum(np.ones(d), seed)[1]


# ----------------------------------------------------------------------------- Dist


def test_dist_of_scaled_identity_is_zero_and_known_values():
    for c in (1.0, 0.3, -2.5, 1e6):
        assert dist_to_identity(c * np.eye(5)) < 1e-7
    assert dist_to_identity(np.diag([1.0, 0.0])) == pytest.approx(np.sqrt(0.5), abs=1e-12)
    # torch input, and a matrix far from I
    assert dist_to_identity(torch.diag(torch.tensor([1.0, -1.0], dtype=f64))) == pytest.approx(1.0)


def test_dist_invariant_under_orthogonal_conjugation_and_transpose_and_batched():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((6, 6))
    U = haar(6, 3)
    ref = dist_to_identity(M)
    assert 0.1 < ref < 1.0
    assert dist_to_identity(U.T @ M @ U) == pytest.approx(ref, abs=1e-12)
    assert dist_to_identity(M.T) == pytest.approx(ref, abs=1e-12)
    assert dist_to_identity(torch.tensor(M)) == pytest.approx(ref, abs=1e-12)
    batch = rng.standard_normal((3, 4, 6, 6))
    out = dist_to_identity_batch(batch)
    assert out.shape == (3, 4)
    loop = np.array([[dist_to_identity(batch[i, j]) for j in range(4)] for i in range(3)])
    np.testing.assert_allclose(out, loop, rtol=0, atol=1e-14)


def test_dist_of_sigma_inverse_for_paper_spectrum_is_0784():
    """Fig 1's red plateau: Dist(Σ⁻¹, I) with eig(Σ⁻¹) = (1, 1, 4, 16, 1) → 0.784 (notes §5)."""
    sigma, _ = sigma_from_spectrum(PAPER_SPECTRUM, task_seed=1)
    assert dist_to_identity(np.linalg.inv(sigma)) == pytest.approx(0.7844, abs=1e-3)
    assert dist_to_identity(np.diag([1.0, 1, 4, 16, 1])) == pytest.approx(0.7844, abs=1e-3)


# ----------------------------------------------------------------------------- one layer (Thm 1)


def test_isotropic_one_layer_optimum_closed_form():
    for n, d in ((20, 5), (10, 5), (3, 7)):
        assert one_layer_optimal_loss(np.eye(d), n) == pytest.approx(
            d * (d + 1) / (n + d + 1), 1e-13
        )
        np.testing.assert_allclose(
            gamma_star(np.eye(d), n), n / (n + d + 1) * np.eye(d), atol=1e-14
        )
    assert one_layer_optimal_loss(np.eye(5), 20) == pytest.approx(1.1538461538, abs=1e-9)


def _one_layer_mc(sigma, n, scales, B=200_000, seed=0):
    """Monte Carlo loss E(ŷ − y_q)² of ŷ = x_qᵀ (cΓ*) (1/n) Σ y_i x_i, w* ~ N(0, I), x ~ N(0, Σ).

    ŷ is computed as one preconditioned-GD step from 0 with P = cΓ* (∇L(0) = −(1/n) Xᵀy)."""
    d = sigma.shape[0]
    rng = np.random.default_rng(seed)
    chol = np.linalg.cholesky(sigma)
    X = torch.tensor(rng.standard_normal((B, n + 1, d)) @ chol.T)
    w = torch.tensor(rng.standard_normal((B, d)))
    y = torch.einsum("bnd,bd->bn", X, w)
    w1 = preconditioned_gd(X[:, :n], y[:, :n], [torch.tensor(gamma_star(sigma, n))])[-1]
    y_hat = (w1 * X[:, n]).sum(-1)  # one step from 0 is linear in P: P = cΓ* predicts c·ŷ
    return [(c * y_hat - y[:, n]).pow(2).mean().item() for c in scales]


@pytest.mark.parametrize("case", ["isotropic", "paper_sigma"])
def test_one_layer_loss_matches_monte_carlo_and_gamma_star_is_optimal(case):
    if case == "isotropic":
        sigma, n = np.eye(5), 20
    else:
        sigma, n = sigma_from_spectrum(PAPER_SPECTRUM, task_seed=7)[0], 10
    f = one_layer_optimal_loss(sigma, n)
    mc_lo, mc, mc_hi = _one_layer_mc(sigma, n, scales=(0.9, 1.0, 1.1))
    assert mc == pytest.approx(f, rel=0.01)
    assert mc_lo > mc * 1.01 and mc_hi > mc * 1.01  # ≈ +3.5 % each side (notes §6.3)


# ----------------------------------------------------------------------------- Wishart moments


def _wick(n, d, k):
    """E tr (WWᵀ)^k by brute-force Wick pairings: each of the (2k−1)!! pairings of the 2k entries
    of tr(WWᵀ)^k contributes d^{#row-index classes} n^{#column-index classes}."""

    def pairings(items):
        if not items:
            yield []
            return
        for i in range(1, len(items)):
            for rest in pairings(items[1:i] + items[i + 1 :]):
                yield [(items[0], items[i])] + rest

    def find(par, x):
        while par[x] != x:
            x = par[x]
        return x

    def idx(e):  # entry 2t is W[i_t, j_t], entry 2t+1 is W[i_{t+1}, j_t]
        t = e // 2
        return (t, t) if e % 2 == 0 else ((t + 1) % k, t)

    total = 0
    for p in pairings(list(range(2 * k))):
        pi, pj = list(range(k)), list(range(k))
        for a, b in p:
            (ia, ja), (ib, jb) = idx(a), idx(b)
            pi[find(pi, ia)] = find(pi, ib)
            pj[find(pj, ja)] = find(pj, jb)
        total += d ** len({find(pi, x) for x in range(k)}) * n ** len(
            {find(pj, x) for x in range(k)}
        )
    return Fraction(total, n**k)


def test_wishart_moments_known_closed_forms():
    for n, d in ((20, 5), (10, 5), (3, 8), (1, 1)):
        m = wishart_moments_exact(n, d, 3)
        assert m[0] == d and m[1] == d
        assert m[2] == Fraction(d * (n + d + 1), n)
        assert m[3] == Fraction(d * (n * n + d * d + 3 * n * d + 3 * n + 3 * d + 4), n * n)
        np.testing.assert_array_equal(wishart_moments(n, d, 3), [float(x) for x in m])
    # d = n = 1: S = χ²₁, E S^k = (2k − 1)!!
    assert wishart_moments_exact(1, 1, 6) == [1, 1, 3, 15, 105, 945, 10395]


def test_wishart_moments_equal_brute_force_wick_pairings():
    """Exact, independent of the recursion; (n, d) = (10, 5), k ≤ 6 is what f_3*(n=10) needs."""
    m = wishart_moments_exact(10, 5, 6)
    assert all(_wick(10, 5, k) == m[k] for k in range(1, 7))
    for n, d in ((3, 2), (4, 7)):
        m = wishart_moments_exact(n, d, 5)
        assert all(_wick(n, d, k) == m[k] for k in range(1, 6))


def test_wishart_moments_match_monte_carlo():
    n, d, B = 30, 3, 200_000
    X = np.random.default_rng(1).standard_normal((B, d, n))
    ev = np.linalg.eigvalsh(X @ X.transpose(0, 2, 1) / n)
    mc = np.array([(ev**k).sum(-1).mean() for k in range(7)])
    np.testing.assert_allclose(mc, wishart_moments(n, d, 6), rtol=0.01)


# ----------------------------------------------------------------------------- L layers on S (Thm 4)


def test_lsa_optimal_loss_golden_values():
    # notes §6.5 (3 decimals): n=20, d=5, L=1..4 → 1.154, 0.361, 0.134, 0.055
    got = [lsa_optimal_loss(20, 5, L) for L in (1, 2, 3, 4)]
    assert [round(x, 3) for x in got] == [1.154, 0.361, 0.134, 0.055]
    np.testing.assert_allclose(got, [15 / 13, 0.36123969, 0.13360843, 0.05495256], rtol=1e-6)
    # n=10, L=3: exact value 0.57937 (the notes' 0.583 is 0.6 % high — a Monte Carlo-level value;
    # the moments it needs are checked exactly against Wick pairings above).
    assert lsa_optimal_loss(10, 5, 3) == pytest.approx(0.579367, rel=1e-5)


def test_lsa_optimal_loss_monotone_in_layers_and_scales_as_n_to_minus_L():
    f = [lsa_optimal_loss(20, 5, L) for L in range(1, 9)]
    assert all(b < a for a, b in zip(f, f[1:], strict=False)) and f[-1] > 0
    for L in (1, 2, 3, 4):
        ratio = lsa_optimal_loss(160, 5, L) / lsa_optimal_loss(80, 5, L)
        assert ratio == pytest.approx(2.0**-L, rel=0.2), (L, ratio)


def test_lsa_optimal_steps_are_the_roots_and_are_optimal():
    n, d = 20, 5
    a1 = lsa_optimal_steps(n, d, 1)
    assert a1 == pytest.approx([-n / (n + d + 1)], abs=1e-12)  # −0.769
    a3 = lsa_optimal_steps(n, d, 3)
    np.testing.assert_allclose(a3, [-1.72, -0.69, -0.43], atol=0.015)  # notes §6.5, any order
    for L in range(1, 9):
        a = lsa_optimal_steps(n, d, L)
        f = lsa_optimal_loss(n, d, L)
        assert a.shape == (L,) and np.all(np.diff(a) > 0) and np.all(a < 0)
        assert loss_on_S(a, n, d) == pytest.approx(f, rel=1e-7)  # Π(1 + a_ℓ s) is the optimum
        if L <= 4:
            assert loss_on_S(a[::-1], n, d) == pytest.approx(f, rel=1e-9)  # Lemma 8
            for i in range(L):
                for eps in (-0.02, 0.02):
                    b = a.copy()
                    b[i] *= 1 + eps
                    assert loss_on_S(b, n, d) > f


def _wishart_design(rng, chol, n, B):
    """B designs X' (d×d) with X'ᵀX'/d distributed exactly as XᵀX/n for X with n rows x ~ N(0, Σ):
    X' = sqrt(d/n) R cholᵀ, R the upper-triangular Bartlett factor (R_ii² ~ χ²_{n−i}, R_ij ~ N(0,1))."""
    d = chol.shape[0]
    iu = np.triu_indices(d, 1)
    R = np.zeros((B, d, d))
    R[:, iu[0], iu[1]] = rng.standard_normal((B, iu[0].size))
    R[:, np.arange(d), np.arange(d)] = np.sqrt(rng.chisquare(n - np.arange(d), size=(B, d)))
    return torch.from_numpy((R.reshape(-1, d) @ (np.sqrt(d / n) * chol.T)).reshape(B, d, d))


def test_gd_iterates_depend_on_the_prompt_only_through_gram_and_moment():
    """Justifies the d-row designs of the Monte Carlo below: X' = sqrt(d/n) R (XᵀX = RᵀR, QR)
    gives the same preconditioned-GD iterates as the n-row X, for y = Xw* and y' = X'w*."""
    g = torch.Generator().manual_seed(2)
    n, d = 20, 5
    X = torch.randn(16, n, d, generator=g, dtype=f64)
    w = torch.randn(16, d, generator=g, dtype=f64)
    Xp = np.sqrt(d / n) * torch.linalg.qr(X).R
    P = [torch.randn(d, d, generator=g, dtype=f64) * 0.3 for _ in range(3)]
    a = preconditioned_gd(X, torch.einsum("bnd,bd->bn", X, w), P)
    b = preconditioned_gd(Xp, torch.einsum("bnd,bd->bn", Xp, w), P)
    for wa, wb in zip(a, b, strict=True):
        torch.testing.assert_close(wa, wb, rtol=0, atol=1e-12)


def test_lsa_optimum_matches_monte_carlo_of_sigma_inverse_preconditioned_gd():
    """INDEPENDENT of the moments: run L steps of w ← w − P_ℓ∇L(w), P_ℓ = −a_ℓ Σ⁻¹ (the project's
    ∇L) on prompts with x ~ N(0, Σ) (non-isotropic Σ), w* ~ N(0, Σ⁻¹), y = Xw*; loss E(x_qᵀw_L − y_q)²
    with the query integrated exactly (E_q (x_qᵀe)² = eᵀΣe, e = w_L − w*). The n = 20 context rows
    are replaced by an exactly equivalent 5-row Bartlett design (test above) to afford 10⁶ prompts:
    the per-prompt loss has a heavy (Wishart-edge) tail, relative sd ≈ 3 at L = 3, so SE ≈ 0.3 %."""
    n, d, B, chunks = 20, 5, 250_000, 4
    sigma, _ = sigma_from_spectrum(PAPER_SPECTRUM, task_seed=11)
    chol = np.linalg.cholesky(sigma)
    sig, sinv = torch.tensor(sigma), torch.tensor(np.linalg.inv(sigma))
    P = {L: [-a * sinv for a in lsa_optimal_steps(n, d, L)] for L in (1, 2, 3)}
    total = dict.fromkeys(P, 0.0)
    rng = np.random.default_rng(5)
    for _ in range(chunks):
        X = _wishart_design(rng, chol, n, B)
        w = torch.from_numpy(np.linalg.solve(chol.T, rng.standard_normal((d, B))).T.copy())
        y = torch.einsum("bnd,bd->bn", X, w)
        for L, PL in P.items():
            e = preconditioned_gd(X, y, PL)[-1] - w
            total[L] += torch.einsum("bi,ij,bj->b", e, sig, e).sum().item()
    for L in P:
        assert total[L] / (B * chunks) == pytest.approx(lsa_optimal_loss(n, d, L), rel=0.01), L


# ----------------------------------------------------------------------------- preconditioned GD


def test_preconditioned_gd_with_eta_identity_equals_baselines_gd():
    g = torch.Generator().manual_seed(0)
    B, N, D, eta = 64, 11, 5, 0.3
    X = torch.randn(B, N, D, generator=g, dtype=f64)
    y = torch.einsum("bnd,bd->bn", X, torch.randn(B, D, generator=g, dtype=f64))
    w0 = torch.randn(B, D, generator=g, dtype=f64)
    ref = gd(X, y, eta, range(6), w0)
    shared = preconditioned_gd(X, y, [eta * torch.eye(D, dtype=f64)] * 5, w0)
    per_prompt = preconditioned_gd(X, y, [eta * torch.eye(D, dtype=f64).expand(B, D, D)] * 5, w0)
    plain = gd_steps(X, y, eta, 5, w0)
    assert len(shared) == len(plain) == 6
    for t in range(6):
        for its in (shared, per_prompt, plain):
            torch.testing.assert_close(its[t], ref[t], rtol=0, atol=1e-12)
    assert (shared[5] - ref[0]).abs().max() > 0.1  # it actually moved


def test_preconditioned_gd_applies_P_to_the_gradient():
    """One step from 0 with a non-symmetric P: w_1 = P (1/N) Xᵀy (Lemma 2 with A = −P)."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(8, 7, 3, generator=g, dtype=f64)
    y = torch.randn(8, 7, generator=g, dtype=f64)
    P = torch.randn(3, 3, generator=g, dtype=f64)
    w1 = preconditioned_gd(X, y, [P])[1]
    expected = torch.einsum("ij,bnj,bn->bi", P, X, y) / 7
    torch.testing.assert_close(w1, expected, rtol=0, atol=1e-13)


# ----------------------------------------------------------------------------- sigma_from_spectrum


def test_sigma_from_spectrum():
    sigma, U = sigma_from_spectrum(PAPER_SPECTRUM, task_seed=0)
    assert sigma.shape == U.shape == (5, 5) and sigma.dtype == np.float64
    np.testing.assert_allclose(np.linalg.eigvalsh(sigma), [0.0625, 0.25, 1, 1, 1], atol=1e-12)
    np.testing.assert_allclose(U @ U.T, np.eye(5), atol=1e-12)
    np.testing.assert_allclose(sigma, U.T @ np.diag(np.square(PAPER_SPECTRUM)) @ U, atol=1e-12)
    np.testing.assert_array_equal(sigma, sigma.T)
    again, U2 = sigma_from_spectrum(list(PAPER_SPECTRUM), task_seed=0)
    np.testing.assert_array_equal(again, sigma)
    np.testing.assert_array_equal(U2, U)
    other, _ = sigma_from_spectrum(PAPER_SPECTRUM, task_seed=1)
    assert np.abs(other - sigma).max() > 1e-3
    assert abs(dist_to_identity(sigma) - dist_to_identity(other)) < 1e-12  # same spectrum


def test_sigma_from_spectrum_rotation_is_haar_distributed():
    """With the R_ii > 0 sign fix, E U = 0 (unfixed Householder QR gives a biased U)."""
    Us = np.stack([sigma_from_spectrum(PAPER_SPECTRUM, s)[1] for s in range(600)])
    assert np.abs(Us.mean(0)).max() < 0.1  # entries have std 1/√5 ≈ 0.45; SE ≈ 0.018


def test_at_n_10_only_a_smaller_d_leaves_room_under_the_learned_bar():
    # lsa_dim (sweeps/preconditioned_gd.py): the zero predictor's loss is E y² = d (w ~ N(0,
    # Σ⁻¹)); the bar is 0.1x it. At d = 5 the class optimum f_3* is above the bar, so no
    # 3-layer LSA can clear it; at d = 4 and 3 it is below. The preset's Σ spectra are cut to d.
    from icl.catalog import load_sweep

    ratios = {d: lsa_optimal_loss(10, d, 3) / d for d in (3, 4, 5)}
    assert ratios[5] == pytest.approx(0.5794 / 5, rel=1e-3) and ratios[5] > 0.1
    assert ratios[4] == pytest.approx(0.0844, abs=1e-4) and ratios[3] < ratios[4] < 0.1
    members = load_sweep("preconditioned_gd").study("lsa_dim").members("reduced")
    cells = {(m.task.dim, len(m.task.spectrum), m.task.n_points, m.model.layers)
             for m in members}
    assert cells == {(d, d, 10, 3) for d in (3, 4, 5)} and len(members) == 9


def test_lsa_optimal_baseline_scores_f_L_star_on_prompts_and_rejects_other_tasks():
    """The paired reference of Ahn's "trained ≈ f_L*": the `lsa_optimal` baseline (optimal
    preconditioned GD, P_ℓ = −a_ℓ Σ⁻¹) on sampled prompts has mean query error f_L* (L = 1-3,
    within 4 standard errors over 100,000 prompts, float64); a wrong preconditioner (Σ for
    Σ⁻¹) misses it; a task without Σ is refused before any trial starts."""
    from icl_core.algorithms.registry import BASELINES
    from icl_core.spec.config import ConfigError
    from icl_core.tasks.linear_regression import LinearRegression, LinearRegressionConfig

    cfg = LinearRegressionConfig(dim=5, n_points=20, layout="fixed_n",
                                 spectrum=(1, 1, 0.5, 0.25, 1), w_law="inverse")
    task = LinearRegression(cfg, 3, torch.device("cpu"), torch.float64)
    batch = task.sample(100_000, torch.Generator().manual_seed(0))
    problem = task.regression_problems(batch)[-1]
    y = batch.targets[:, -1, 0]
    preds = BASELINES["lsa_optimal"](problem, None, task)
    for L in (1, 2, 3):
        err = (preds[L] - y).pow(2)
        se = float(err.std()) / len(err) ** 0.5
        assert abs(float(err.mean()) - lsa_optimal_loss(20, 5, L)) < 4 * se, L
    task.sigma = torch.linalg.inv(task.sigma)  # the wrong preconditioner: Σ instead of Σ⁻¹
    wrong = (BASELINES["lsa_optimal"](problem, None, task)[3] - y).pow(2).mean()
    assert float(wrong) > 1.5 * lsa_optimal_loss(20, 5, 3)
    from icl_core.spec.config import resolve_member

    with pytest.raises(ConfigError, match="lsa_optimal"):
        resolve_member({"task": {"name": "rep_regression"}, "model": {"name": "transformer"},
                        "eval": {"baselines": ["lsa_optimal"]}})
