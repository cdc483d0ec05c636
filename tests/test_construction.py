"""The hand-built BaseConv GD construction and the feature / explicit-gradient task
(Liu et al. 2024, Figs 5-7): golden equivalences with gradient descent."""

from __future__ import annotations

import pytest
import torch

from icl_core.algorithms.baselines import gd, ls_grad, ols
from icl_core.common.device import generator
from icl_core.models import build_model, count_params
from icl_core.models.baseconv_gd import ConstructionFeatures, gd_step_layer
from icl_core.spec.config import ConfigError, resolve_member
from icl_core.tasks import build_task
from icl_core.tasks.ls_features import Layout
from icl_core.training.evaluate import evaluate

CPU = torch.device("cpu")


def prompts(n=200, D=5, N=20, seed=1, **task):
    member = resolve_member({"task": {"name": "ls_features", "dim": D, "n_points": N, **task},
                             "model": {"name": "baseconv_gd"}, "train": {"steps": 0}})
    task = build_task(member.task, 0, CPU, torch.float64)
    return task, task.sample(n, generator(CPU, seed))


def construction(steps, dtype, D=5, N=20):
    member = resolve_member({"task": {"name": "ls_features", "dim": D, "n_points": N},
                             "model": {"name": "baseconv_gd", "steps": steps}, "train": {"steps": 0}})
    return build_model(member.model, d_in=D * D + 3 * D + 1, d_out=D, max_len=N + 1,
                       causal=True, device=CPU, dtype=dtype)


def test_construction_equals_gd_iterate_by_iterate_in_float64():
    """Every one of 50 BaseConv GD layers gives GD's iterate to 1e-10 relative (from a random
    w0, so the M w term is exercised from the first step)."""
    D, N = 5, 20
    task, batch = prompts(D=D, N=N)
    c = Layout(D)
    h = ConstructionFeatures(D, 2, N + 1).double()(batch.inputs)[:, -1:]
    layer = gd_step_layer(D, N, 0.2, N + 1)
    reference = gd(batch.extras["xs"], batch.extras["ys"], 0.2, range(51), batch.extras["w0"])
    for t in range(1, 51):
        h = h + layer(h)
        w = h[:, 0, c.w:c.w + D]
        rel = ((w - reference[t]).norm(dim=-1) / reference[t].norm(dim=-1)).max()
        assert rel < 1e-10, (t, float(rel))
    # the registered model runs the same layers
    out = construction(50, torch.float64)(batch.inputs)[:, -1]
    torch.testing.assert_close(out, reference[50], rtol=1e-10, atol=0)


def test_construction_reaches_float32_gd_precision_after_1000_steps():
    """In float32 the construction's per-prompt median error of w is within 3x of float32 GD's,
    which bottoms out near 1e-13 only after ~500-1000 iterations (notes §11)."""
    D, N = 5, 20
    _, batch = prompts(n=500, D=D, N=N, w0_std=0.0)
    xs, ys, w_star = (batch.extras[k] for k in ("xs", "ys", "w"))

    def median_err(w):
        return float((w.double() - w_star).pow(2).mean(-1).median())

    built = median_err(construction(1000, torch.float32)(batch.inputs.float())[:, -1])
    iterates = gd(xs.float(), ys.float(), 0.2, [50, 1000], torch.zeros(500, D))
    gd50, gd1000 = median_err(iterates[50]), median_err(iterates[1000])
    assert gd1000 < 1e-12 and gd50 > 1e-6  # slow linear convergence to the fp32 floor
    assert gd1000 / 3 <= built <= 3 * gd1000, (built, gd1000)


def test_ols_floors_float32_vs_float64():
    """OLS (gelsd) error of w: ~1e-14 in float32, ~1e-30 in float64 (machine precision²)."""
    _, batch = prompts(n=500)
    xs, ys, w_star = (batch.extras[k] for k in ("xs", "ys", "w"))
    e32 = float((ols(xs.float(), ys.float()).double() - w_star).pow(2).mean(-1).median())
    e64 = float((ols(xs, ys) - w_star).pow(2).mean(-1).median())
    assert 1e-16 < e32 < 1e-12 and e64 < 1e-26 and e32 / e64 > 1e10


@pytest.mark.parametrize("k", [1, 2])
def test_frozen_construction_layers_compute_the_task_features(k):
    """k frozen construction layers on k = 0 prompts give exactly the k-feature prompts."""
    _, plain = prompts(n=50, D=3, N=10, seed=3)
    _, featured = prompts(n=50, D=3, N=10, seed=3, features=k)
    got = ConstructionFeatures(3, k, 11).double()(plain.inputs)
    torch.testing.assert_close(got, featured.inputs, rtol=1e-13, atol=1e-13)


def test_frozen_layers_stay_frozen_and_are_not_counted():
    member = resolve_member({"task": {"name": "ls_features", "dim": 3, "n_points": 10},
                             "model": {"name": "transformer", "mixer": "baseconv", "width": 16,
                                       "depth": 3, "construction_layers": 2}})
    model = build_model(member.model, d_in=19, d_out=3, max_len=11, causal=True, device=CPU,
                        dtype=torch.float64)
    assert len(model.blocks) == 1
    frozen = list(model.frozen.parameters())
    assert frozen and not any(p.requires_grad for p in frozen)
    assert count_params(member.model, d_in=19, d_out=3, max_len=11, causal=True) == model.num_params()
    with pytest.raises(ConfigError, match="construction_layers"):
        resolve_member({"task": {"name": "ls_features"},
                        "model": {"name": "transformer", "depth": 2, "construction_layers": 2}})


def test_grad_target_and_iterative_inference_with_the_exact_gradient_is_gd():
    """The explicit-gradient target is ∇L(w0); iterating an oracle that returns the exact
    gradient from the prompt's tokens reproduces GD's iterates."""
    task, batch = prompts(n=100, D=3, N=10, target="grad")
    xs, ys, w0 = (batch.extras[k] for k in ("xs", "ys", "w0"))
    torch.testing.assert_close(batch.targets[:, -1], ls_grad(w0, xs, ys))

    def oracle(tokens):  # read w from the final token, return ∇L(w) there
        grad = ls_grad(tokens[:, -1, 4:7], xs, ys)
        return torch.zeros(tokens.shape[0], tokens.shape[1], 3, dtype=tokens.dtype).index_put_(
            (torch.arange(tokens.shape[0]), torch.tensor(-1)), grad)

    errs = task.iterate(oracle, batch, [0, 1, 7], lr=0.3)
    reference = gd(xs, ys, 0.3, [0, 1, 7], w0)
    for t in (0, 1, 7):
        expected = (reference[t] - batch.extras["w"]).pow(2).mean(-1)
        torch.testing.assert_close(errs[t], expected, rtol=1e-12, atol=1e-15)


def test_evaluation_rows_of_the_explicit_gradient_task():
    """Model rows: gradient "mse" and per-iteration "w_mse"; GD rows per iteration."""
    member = resolve_member({
        "task": {"name": "ls_features", "dim": 3, "n_points": 10, "target": "grad"},
        "model": {"name": "transformer", "mixer": "baseconv", "width": 8, "depth": 1},
        "eval": {"n_prompts": 20, "baselines": ["gd"], "infer_steps": [0, 5]},
        "dtype": "float64",
    })
    model = build_model(member.model, d_in=19, d_out=3, max_len=11, causal=True, device=CPU,
                        dtype=torch.float64)
    rows = evaluate(model, member, CPU, torch.float64, step=0, baselines=True)
    kinds = {(r["metric"], r["predictor"], r["infer_iter"]) for r in rows}
    assert {("mse", "model", None), ("w_mse", "model", 0), ("w_mse", "model", 5),
            ("w_mse", "gd_float32", 5), ("w_mse", "gd_float64", 0)} <= kinds
    at0 = {r["predictor"]: r["value"] for r in rows
           if r["metric"] == "w_mse" and r["infer_iter"] == 0 and r["statistic"] == "mean"}
    assert at0["model"] == pytest.approx(at0["gd_float64"], rel=1e-12)  # both start at w0
