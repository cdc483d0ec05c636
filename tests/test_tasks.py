"""Task contract: shapes, masks, positions and the statistics of the generated prompts."""

from __future__ import annotations

import pytest
import torch

from icl_core.spec.config import resolve_member
from icl_core.tasks import build_task
from icl_core.tasks.linear_regression import LinearRegression, LinearRegressionConfig


def make(layout: str, dim=4, n=7, noise=0.0, dtype=torch.float64) -> LinearRegression:
    cfg = LinearRegressionConfig(dim=dim, n_points=n, layout=layout, noise_std=noise)
    return build_task(cfg, task_seed=0, device=torch.device("cpu"), dtype=dtype)


def test_fixed_n_layout_supervises_only_the_query():
    task = make("fixed_n")
    batch = task.sample(5, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (5, 8, 5) and batch.targets.shape == (5, 8, 1)
    assert batch.mask.tolist() == [False] * 7 + [True]
    assert task.positions[-1] == 7 and task.prompt_len == 7
    xs, ys, w = batch.extras["xs"], batch.extras["ys"], batch.extras["w"]
    torch.testing.assert_close(batch.inputs[:, :, :4], xs)
    torch.testing.assert_close(batch.inputs[:, :7, 4], ys[:, :7])
    assert torch.all(batch.inputs[:, 7, 4] == 0), "the query's label must not be visible"
    torch.testing.assert_close(batch.targets[:, -1, 0], (xs[:, -1] * w).sum(-1))


def test_all_prefix_layout_interleaves_and_predicts_every_x():
    task = make("all_prefix", dim=3, n=4)
    batch = task.sample(2, torch.Generator().manual_seed(1))
    assert batch.inputs.shape == (2, 9, 3)
    assert batch.mask.tolist() == [True, False] * 4 + [True]
    assert task.positions[batch.mask].tolist() == [0, 1, 2, 3, 4]
    ys = batch.extras["ys"]
    torch.testing.assert_close(batch.inputs[:, 1::2, 0], ys[:, :4])
    assert torch.all(batch.inputs[:, 1::2, 1:] == 0)
    torch.testing.assert_close(batch.targets[:, 0::2, 0], ys)


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_label_statistics(noise):
    """x, w ~ N(0, I): Var(y) = D + sigma^2; noiseless labels are exactly w.x."""
    task = make("fixed_n", dim=5, n=10, noise=noise)
    batch = task.sample(20000, torch.Generator().manual_seed(2))
    ys = batch.extras["ys"]
    assert abs(ys.var().item() - (5 + noise**2)) < 0.15
    resid = ys - torch.einsum("bnd,bd->bn", batch.extras["xs"], batch.extras["w"])
    if noise == 0:
        assert resid.abs().max() < 1e-12
    else:
        assert abs(resid.std().item() - noise) < 0.01


def test_sampling_is_deterministic_and_dtype_follows_config():
    task = make("fixed_n", dtype=torch.float32)
    a = task.sample(3, torch.Generator().manual_seed(7))
    b = task.sample(3, torch.Generator().manual_seed(7))
    assert a.inputs.dtype == torch.float32
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


def test_eval_grid_points_are_tasks():
    member = resolve_member({
        "task": {"name": "linear_regression", "n_points": 5},
        "model": {"name": "transformer", "width": 8, "depth": 1},
        "eval": {"grid": [{}, {"test_dist": "long", "n_points": 9}]},
    })
    from icl_core.training.evaluate import eval_max_len

    assert eval_max_len(member) == 10  # positions sized for the longest evaluated prompt


def test_masked_mse_is_the_mean_over_supervised_tokens_only():
    from icl_core.tasks import Batch, masked_mse

    g = torch.Generator().manual_seed(0)
    pred = torch.randn(4, 7, 3, generator=g, dtype=torch.float64)
    targets = torch.randn(4, 7, 3, generator=g, dtype=torch.float64)
    mask = torch.tensor([False, True, False, True, True, False, True])
    pred[:, ~mask] = float("inf")  # unsupervised outputs never reach the loss
    expected = (pred[:, mask] - targets[:, mask]).pow(2).mean()
    got = masked_mse(pred, Batch(pred.clone(), targets, mask))
    torch.testing.assert_close(got, expected, rtol=1e-14, atol=0)
