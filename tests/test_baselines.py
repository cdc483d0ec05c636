"""Baselines and the one GD convention, against closed forms."""

from __future__ import annotations

import torch

from icl_core.algorithms.baselines import gd, ls_grad, ls_loss, ols


def problem(B=256, N=20, D=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, N, D, generator=g, dtype=dtype)
    w = torch.randn(B, D, generator=g, dtype=dtype)
    return X, torch.einsum("bnd,bd->bn", X, w), w


def test_ols_is_exact_in_float64_on_noiseless_determined_prompts():
    for N in (5, 8, 20):  # N >= D, including the ill-conditioned N = D
        X, y, w = problem(N=N)
        xq = torch.randn(256, 5, dtype=torch.float64)
        err = ((ols(X, y) * xq).sum(-1) - (w * xq).sum(-1)).pow(2)
        assert err.median() < 1e-20, (N, err.median())


def test_ols_is_minimum_norm_when_underdetermined():
    X, y, _ = problem(N=3)
    w = ols(X, y)
    torch.testing.assert_close(torch.einsum("bnd,bd->bn", X, w), y, rtol=0, atol=1e-10)
    w_pinv = torch.einsum("bdn,bn->bd", torch.linalg.pinv(X), y)
    torch.testing.assert_close(w, w_pinv, rtol=0, atol=1e-10)


def test_gradient_convention_matches_autograd():
    """∇L = (1/N) Xᵀ(Xw − y) is the gradient of L = (1/2N) Σ (wᵀx − y)², to 1e-12."""
    X, y, _ = problem(B=8, N=11)
    w = torch.randn(8, 5, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(ls_loss(w, X, y).sum(), w)
    torch.testing.assert_close(ls_grad(w.detach(), X, y), auto, rtol=0, atol=1e-12)


def test_gd_steps_follow_the_convention_and_converge_to_ols():
    X, y, w_star = problem(B=16)
    out = gd(X, y, lr=0.2, steps=[0, 1, 2, 2000])
    assert torch.all(out[0] == 0)
    step1 = -0.2 * ls_grad(torch.zeros(16, 5, dtype=torch.float64), X, y)
    torch.testing.assert_close(out[1], step1, rtol=0, atol=1e-12)
    torch.testing.assert_close(out[2], step1 - 0.2 * ls_grad(step1, X, y), rtol=0, atol=1e-12)
    torch.testing.assert_close(out[2000], ols(X, y), rtol=0, atol=1e-6)  # linear convergence
    torch.testing.assert_close(ols(X, y), w_star, rtol=0, atol=1e-10)
