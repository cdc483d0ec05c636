"""Linear self-attention (Ahn et al. 2023): Lemma 2 equivalences to 1e-12 in float64, and
L-BFGS training reaching the closed-form optimum."""

from __future__ import annotations

import pytest
import torch

from icl_core.algorithms.baselines import gd
from icl_core.algorithms.closed_forms import preconditioned_gd
from icl_core.models import build_model
from icl_core.spec.config import resolve_member
from icl_core.tasks import build_task

CPU = torch.device("cpu")


def lsa(layers=3, form="sparse"):
    cfg = resolve_member({"task": {"name": "linear_regression"},
                          "model": {"name": "lsa", "layers": layers, "form": form}}).model
    return build_model(cfg, d_in=6, d_out=1, max_len=21, causal=True, device=CPU,
                       dtype=torch.float64)


def prompts(B=64, n=20, d=5, seed=0, spectrum=(1.0, 1.0, 0.5, 0.25, 1.0)):
    cfg = resolve_member({"task": {"name": "linear_regression", "dim": d, "n_points": n,
                                   "spectrum": list(spectrum), "w_law": "inverse"},
                          "model": {"name": "lsa"}}).task
    task = build_task(cfg, task_seed=3, device=CPU, dtype=torch.float64)
    return task, task.sample(B, torch.Generator().manual_seed(seed))


def test_lsa_with_minus_eta_identity_is_gd():
    model = lsa(layers=4)
    _, batch = prompts()
    X, y, xq = batch.extras["xs"][:, :20], batch.extras["ys"][:, :20], batch.extras["xs"][:, 20]
    eta = 0.3
    with torch.no_grad():
        model.A.copy_(-eta * torch.eye(5, dtype=torch.float64).expand(4, 5, 5))
        for layers in (1, 2, 4):
            model.A.data[layers:] = 0  # layers beyond ℓ act as the identity
            pred = model(batch.inputs)[:, -1, 0]
            w = gd(X, y, lr=eta, steps=[layers])[layers]
            torch.testing.assert_close(pred, (w * xq).sum(-1), rtol=0, atol=1e-12)
            model.A.copy_(-eta * torch.eye(5, dtype=torch.float64).expand(4, 5, 5))


def test_lsa_with_general_A_is_preconditioned_gd():
    torch.manual_seed(1)
    model = lsa(layers=3)
    _, batch = prompts()
    X, y, xq = batch.extras["xs"][:, :20], batch.extras["ys"][:, :20], batch.extras["xs"][:, 20]
    with torch.no_grad():
        model.A.copy_(0.3 * torch.randn(3, 5, 5, dtype=torch.float64))  # not symmetric
        pred = model(batch.inputs)[:, -1, 0]
    iterates = preconditioned_gd(X, y, [-A.T for A in model.A.detach()])
    torch.testing.assert_close(pred, (torch.as_tensor(iterates[-1]) * xq).sum(-1), rtol=0,
                               atol=1e-12)


def test_forms_nest():
    """sparse_b with B = 0, and full with P = e eᵀ, Q = [[A, 0], [0, 0]], equal sparse."""
    torch.manual_seed(2)
    sparse, with_b, full = lsa(form="sparse"), lsa(form="sparse_b"), lsa(form="full")
    _, batch = prompts()
    with torch.no_grad():
        with_b.A.copy_(sparse.A)
        with_b.B.zero_()
        full.P.zero_()
        full.P[:, 5, 5] = 1
        full.Q.zero_()
        full.Q[:, :5, :5] = sparse.A
        ref = sparse(batch.inputs)
        torch.testing.assert_close(with_b(batch.inputs), ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(full(batch.inputs), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("form", ["sparse", pytest.param("full", marks=pytest.mark.slow)])
def test_lbfgs_reaches_the_one_layer_optimum(form):
    """Isotropic, 1 layer: the trained test loss is within 5% of f* = d(d+1)/(n+d+1)."""
    from icl_core.training.evaluate import evaluate
    from icl_core.training.train import MemberRun

    member = resolve_member({
        "task": {"name": "linear_regression", "dim": 5, "n_points": 20},
        "model": {"name": "lsa", "layers": 1, "form": form},
        "train": {"optimizer": "lbfgs", "lr": 0.1, "batch_size": 4000, "steps": 60,
                  "report_every": 20, "checkpoint_every": 20},
        "eval": {"n_prompts": 20000},
        "dtype": "float64",
    })
    run = MemberRun(member)
    run.train_until(60)
    rows = evaluate(run.model, member, run.device, run.dtype, 60, False)
    test_loss = next(r["value"] for r in rows if r["statistic"] == "mean")
    assert test_loss == pytest.approx(5 * 6 / 26, rel=0.05)


def test_convergence_figure_from_a_real_smoke_run(tmp_path):
    """Smoke preset of Fig 1 trained for real (no Ray), then the figure from its rows and
    artifacts: Dist curves in [0, 1] at every recorded step, and f_3* as the reference."""
    from analysis.figures.lsa import lsa_convergence_figure
    from analysis.reading.store import read_rows
    from icl import catalog
    from icl_core.running.trial import TrialSpec, run_trial

    study = catalog.load_sweep("preconditioned_gd").study("fig1_sparse")
    (member,) = study.members("smoke")
    run_trial(TrialSpec("preconditioned_gd", "fig1_sparse", str(tmp_path), [member.to_dict()]))
    rows, _ = read_rows(str(tmp_path), "preconditioned_gd", "fig1_sparse")
    summary = lsa_convergence_figure(rows, tmp_path / "figs", storage=str(tmp_path))
    assert all(p.exists() for p in summary["paths"]) and len(summary["paths"]) == 4
    assert 0 <= summary["dist_sigma_final"] <= 1 and 0 <= summary["dist_a_final"] <= 1
    assert summary["f_star"] == pytest.approx(0.133608, rel=1e-5)
