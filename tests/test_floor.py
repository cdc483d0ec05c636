"""The floor (icl_core.algorithms.floor): the Bayes posterior mean against closed forms, measured by the
evaluator like the trivial predictors; the `icl levels` command end to end."""

from __future__ import annotations

import math

import pytest
import torch

from icl.levels import main as levels_main
from icl.levels import spans
from icl_core.algorithms.floor import posterior_mean
from icl_core.training.evaluate import evaluate, floor_rows, trivial_rows
from icl_core.training.train import MemberRun
from tests.test_trivial_predictors import assert_mc, per_prompt, points, value

F64 = torch.float64


def floor_errors(task, batch) -> torch.Tensor:
    """Per-prompt squared error of the floor at every supervised token: (P, M)."""
    pred = task.floor_predictor()(batch.inputs)
    return (pred - batch.targets)[:, task.mask].pow(2).mean(-1)


def test_noiseless_floor_is_the_unexplained_prior_below_d_and_zero_from_d():
    """σ = 0, w, x ~ N(0, I): the posterior mean interpolates; its error after k examples is
    E|w projected off span(x_1..x_k)|² = d − k, then 0 (exactly: w is determined)."""
    D, N = 4, 8
    member, [(dist, task, batch)] = points({
        "task": {"name": "linear_regression", "dim": D, "n_points": N, "layout": "all_prefix"},
        "eval": {"n_prompts": 3000}})
    err = floor_errors(task, batch)
    for k in range(D):
        assert_mc(err[:, k], D - k)
    assert err[:, D:].max() < 1e-10
    rows = floor_rows(task, batch, member.eval, dist, 0)
    assert value(rows, "floor", position=1) == pytest.approx(float(err[:, 1].mean()), 1e-12)


def test_noisy_floor_matches_the_posterior_variance_and_tends_to_sigma2():
    """σ > 0: E[error | X] = σ² + σ² tr((XᵀX + σ² I)⁻¹) (dim + σ² at k = 0, → σ² as k grows);
    no trivial predictor beats it (paired over the same prompts)."""
    D, N, s = 3, 24, 0.7
    member, [(dist, task, batch)] = points({
        "task": {"name": "linear_regression", "dim": D, "n_points": N, "layout": "all_prefix",
                 "noise_std": s}, "eval": {"n_prompts": 2000}})
    err, xs = floor_errors(task, batch), batch.extras["xs"]
    eye = torch.eye(D, dtype=F64)
    for k in (0, 1, 2, 3, 5, 10, N):
        X = xs[:, :k]
        cond = s ** 2 + s ** 2 * torch.linalg.inv(X.transpose(1, 2) @ X + s ** 2 * eye
                                                  ).diagonal(dim1=1, dim2=2).sum(-1)
        assert_mc(err[:, k] - cond, 0.0)
    assert_mc(err[:, 0], D + s ** 2)
    assert float(err[:, N].mean()) == pytest.approx(s ** 2, rel=0.2)
    for name in ("zero", "prompt_mean", "ridge"):
        diff = (err - per_prompt(task, batch, name)).mean(1)  # floor − trivial, per prompt
        assert float(diff.mean()) < 4 * float(diff.std()) / math.sqrt(diff.numel()), name
    assert float(diff.mean()) < 0  # strictly below ridge at σ² = 0.49 (λ = 1e-3)


def test_inverse_w_law_is_ridge_with_prior_precision_sigma():
    """w ~ N(0, Σ⁻¹): ŵ = (XᵀX + σ² Σ)⁻¹ Xᵀy at the fixed-N query."""
    s = 0.5
    member, [(dist, task, batch)] = points({
        "task": {"name": "linear_regression", "dim": 3, "n_points": 5, "noise_std": s,
                 "spectrum": [1.0, 0.5, 0.25], "w_law": "inverse"}, "eval": {"n_prompts": 64}})
    X, y = batch.extras["xs"][:, :5], batch.extras["ys"][:, :5]
    sigma = task.sigma
    w = torch.linalg.solve(X.transpose(1, 2) @ X + s ** 2 * sigma, X.transpose(1, 2) @ y[..., None])
    expected = (batch.extras["xs"][:, 5:] @ w)[:, 0, 0]
    got = task.floor_predictor()(batch.inputs)[:, -1, 0]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)


def test_posterior_mean_primal_and_dual_forms_agree():
    g = torch.Generator().manual_seed(1)
    for k in (2, 5, 9):
        F = torch.randn(6, k, 5, generator=g, dtype=F64)
        Y = torch.randn(6, k, 2, generator=g, dtype=F64)
        fq = torch.randn(6, 5, generator=g, dtype=F64)
        lam = 0.3
        w = torch.linalg.solve(F.transpose(1, 2) @ F + lam * torch.eye(5, dtype=F64),
                               F.transpose(1, 2) @ Y)
        torch.testing.assert_close(posterior_mean(F, Y, fq, lam), (fq[:, None] @ w)[:, 0])
    assert posterior_mean(F[:, :0], Y[:, :0], fq, lam).abs().max() == 0


@pytest.mark.parametrize("name, extra", [("rep_regression", {}), ("rep_ar", {"q": 2})])
def test_representation_floor_knows_phi(name, extra):
    """Knowing Φ*, the noiseless tasks are determined after d examples (floor 0); with noise
    the floor is no worse than any trivial predictor and 0 examples give the zero predictor."""
    D = 3
    cfg = {"name": name, "dim": D, "n_points": 8, "hidden": 4, **extra}
    member, [(dist, task, batch)] = points({"task": {**cfg, "noise_std": 0.0},
                                            "eval": {"n_prompts": 200}})
    err = floor_errors(task, batch)
    assert err[:, D:].max() < 1e-10 and err[:, :D].mean() > 0.01
    member, [(dist, task, batch)] = points({"task": {**cfg, "noise_std": 0.3},
                                            "eval": {"n_prompts": 400}})
    err = floor_errors(task, batch)
    torch.testing.assert_close(err[:, 0], per_prompt(task, batch, "zero")[:, 0])
    assert float(err.mean()) < float(per_prompt(task, batch, "prompt_mean").mean())


def test_the_evaluator_reports_the_floor_beside_the_trivial_predictors():
    member = points({"task": {"name": "linear_regression", "dim": 3, "n_points": 6,
                              "layout": "all_prefix", "noise_std": 0.1},
                     "eval": {"n_prompts": 16}})[0]
    run = MemberRun(member)
    rows = evaluate(run.model, member, run.device, run.dtype, 0, baselines=True)
    assert {r["predictor"] for r in rows} == {"model", "zero", "prompt_mean", "ridge", "floor"}

    def keys(p):
        return sorted((r["metric"], r["statistic"], r["position"]) for r in rows
                      if r["predictor"] == p)

    assert keys("floor") == keys("model")
    assert evaluate(run.model, member, run.device, run.dtype, 0, baselines=False) and not [
        r for r in evaluate(run.model, member, run.device, run.dtype, 0, baselines=False)
        if r["predictor"] == "floor"]


def test_a_task_without_a_floor_gives_no_floor_rows():
    member, [(dist, task, batch)] = points({"task": {"name": "primitives", "dim": 4,
                                                     "n_points": 3}, "eval": {"n_prompts": 8}})
    assert floor_rows(task, batch, member.eval, dist, 0) == []
    assert trivial_rows(task, batch, member.eval, dist, 0)


def test_levels_command_end_to_end(capsys):
    """`icl levels` on algoformer vs_newton's smoke preset: trivial and floor levels, the bar
    and its reach, per noise level; σ = 1 puts today's bar out of reach at the last k."""
    assert levels_main(["algoformer", "--study", "vs_newton", "--preset", "smoke",
                        "--set", "eval.n_prompts=400", "--set", "task.n_points=6"]) == 0
    out = capsys.readouterr().out
    assert "algoformer/vs_newton [smoke]" in out and "metric mse (median" in out
    for name in ("zero", "prompt_mean", "ridge", "floor"):
        assert f"\n  {name} " in out
    assert "reference: ridge solves this task" in out
    last = next(line for line in out.splitlines() if line.strip().startswith("at k = 6"))
    assert "best trivial zero" in last and last.endswith(": bar reachable")
    assert "bar reachable at k = 3-6\n" in out  # none before k = d
    assert levels_main(["algoformer", "--study", "vs_newton", "--preset", "smoke",
                        "--set", "eval.n_prompts=400", "--set", "task.noise_std=1.0"]) == 0
    out = capsys.readouterr().out
    last = next(line for line in out.splitlines() if line.strip().startswith("at k = 4"))
    assert "bar out of reach (floor beyond it)" in last and "is reachable" in last


def test_levels_command_on_a_study_of_several_task_kinds(capsys):
    """algoformer examples mixes tasks with different fields (rep_ar has q, cot_mlp layers):
    each setting is labelled by the fields it has (this raised KeyError: 'task.q')."""
    assert levels_main(["algoformer", "--study", "examples", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "\ntask.name=rep_ar, task.q=3," in out and "\ntask.name=cot_mlp, " in out
    assert "task.q" not in out.split("task.name=cot_mlp")[1].split("\n")[0]


def test_spans():
    assert spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8" and spans([]) == "none"


def test_levels_command_refuses_bad_input(capsys):
    assert levels_main(["no_such_sweep"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: icl levels: unknown sweep 'no_such_sweep'") and \
        "\n" not in err
    assert levels_main(["algoformer", "--study", "vs_newton", "--preset", "smoke",
                        "--metric", "r3"]) == 2
    assert "valid choices: mse" in capsys.readouterr().err
