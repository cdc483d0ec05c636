"""ReLU-network teachers, ReLU attention and the trained-teacher baseline (Wu et al. 2024):
causality and an explicit formula for the mixer, teacher statistics, exact R², the batched
baseline against training one network alone, and clear refusals of bad settings."""

from __future__ import annotations

import pytest
import torch

from icl_core.algorithms.teacher_baseline import (
    batch_mean_r2,
    he_network,
    network_forward,
    pooled_r2,
    train_networks,
)
from icl_core.models import build_model, count_params
from icl_core.models.mixers import MIXERS
from icl_core.spec.config import ConfigError, resolve_member
from icl_core.tasks import build_task

CPU, F64 = torch.device("cpu"), torch.float64


def relu_attention(width=8, heads=2, causal=True):
    torch.manual_seed(0)
    return MIXERS["relu_attention"](width=width, heads=heads, causal=causal, max_len=16).to(F64)


def teacher_task(**fields):
    cfg = resolve_member({"task": {"name": "relu_teacher", "dim": 4, "n_points": 6,
                                   "hidden": 8, **fields},
                          "model": {"name": "transformer"}}).task
    return build_task(cfg, task_seed=0, device=CPU, dtype=F64)


def test_relu_attention_is_causal():
    mixer = relu_attention()
    x = torch.randn(2, 9, 8, dtype=F64, requires_grad=True)
    out = mixer(x)
    for t in range(9):
        (grad,) = torch.autograd.grad(out[:, t].sum(), x, retain_graph=True)
        assert torch.all(grad[:, t + 1:] == 0), f"output {t} depends on a later token"
        assert grad[:, : t + 1].abs().sum() > 0


@pytest.mark.parametrize("causal", [True, False])
def test_relu_attention_equals_the_double_loop(causal):
    mixer = relu_attention(causal=causal)
    x = torch.randn(2, 7, 8, dtype=F64)
    B, T, W, H = 2, 7, 8, 2
    with torch.no_grad():
        q, k, v = mixer.qkv(x).split(W, dim=-1)
    hd = W // H
    y = torch.zeros(B, T, W, dtype=F64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * hd, (h + 1) * hd)
            for t in range(T):
                keys = range(t + 1) if causal else range(T)
                for s in keys:
                    score = max(0.0, float(q[b, t, sl] @ k[b, s, sl]) / hd ** 0.5)
                    y[b, t, sl] += score * v[b, s, sl] / len(keys)
    torch.testing.assert_close(mixer(x), mixer.out(y), rtol=0, atol=1e-12)


def test_relu_transformer_prefix_is_independent_of_prompt_length():
    """1/(t+1) normalisation: appending tokens leaves every earlier output unchanged."""
    cfg = resolve_member({"task": {"name": "relu_teacher"},
                          "model": {"name": "transformer", "width": 8, "depth": 2, "heads": 2,
                                    "mixer": "relu_attention"}}).model
    torch.manual_seed(1)
    model = build_model(cfg, d_in=4, d_out=1, max_len=20, causal=True, device=CPU, dtype=F64)
    x = torch.randn(3, 20, 4, dtype=F64)
    torch.testing.assert_close(model(x[:, :11]), model(x)[:, :11], rtol=0, atol=1e-12)
    assert count_params(cfg, d_in=4, d_out=1, max_len=20, causal=True) == model.num_params()  # the planner's


def test_prompt_layout_and_mixture():
    task = teacher_task(mix=0.3)
    batch = task.sample(4000, torch.Generator().manual_seed(0))
    xs, ys = batch.extras["xs"], batch.extras["ys"]
    assert batch.inputs.shape == (4000, 13, 4) and task.seq_len == 13
    torch.testing.assert_close(batch.inputs[:, 0::2], xs)
    torch.testing.assert_close(batch.inputs[:, 1::2, 0], ys[:, :6])
    assert torch.all(batch.inputs[:, 1::2, 1:] == 0)  # y zero-padded to d
    torch.testing.assert_close(batch.targets[:, 0::2, 0], ys)
    assert task.positions.tolist() == [0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6]
    plus = (xs.mean(-1) > 0).double().mean()  # components are 4 sigma apart along 1
    assert abs(float(plus) - 0.3) < 0.01
    assert teacher_task(mix=0.0).sample(100, torch.Generator()).extras["xs"].mean() < -1.8


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_teacher_output_statistics(depth):
    """He scaling: over teachers, E[f(x)] = 0 and E[f(x)²] = 2|x|²/d at every depth."""
    gen = torch.Generator().manual_seed(depth)
    P, d = 20000, 5
    x = torch.full((P, 1, d), -2.0, dtype=F64) + torch.linspace(-1, 1, d, dtype=F64)
    y = network_forward(he_network(P, d, 16, depth, gen, dtype=F64), x)[:, 0]
    expected = 2 * float(x[0, 0].pow(2).sum()) / d
    se = float(y.pow(2).std()) / P ** 0.5
    assert abs(float(y.pow(2).mean()) - expected) < 5 * se
    assert abs(float(y.mean())) < 5 * float(y.std()) / P ** 0.5
    assert len(he_network(1, d, 16, depth, gen)) == depth


def test_r2_of_the_exact_teacher_is_one_and_of_the_mean_is_zero():
    task = teacher_task(depth=4)
    batch = task.sample(256, torch.Generator().manual_seed(2))
    exact = network_forward(task.teacher(batch), batch.extras["xs"])  # (P, n+1)
    pred = torch.zeros_like(batch.targets)
    pred[:, 0::2, 0] = exact
    rows = task.prediction_metrics(pred, batch)
    assert {r["statistic"] for r in rows} == {"pooled", "batch_mean"}
    assert sorted({r["position"] for r in rows}) == list(range(7))
    assert all(abs(r["value"] - 1) < 1e-12 for r in rows)
    ys = batch.extras["ys"]
    mean = ys.mean(0, keepdim=True).expand_as(ys)
    torch.testing.assert_close(pooled_r2(mean, ys), torch.zeros(7, dtype=F64), atol=1e-12,
                               rtol=0)
    by_hand = torch.stack([pooled_r2(mean[i:i + 64], ys[i:i + 64]) for i in range(0, 256, 64)])
    torch.testing.assert_close(batch_mean_r2(mean, ys, 64), by_hand.mean(0))


def test_batched_baseline_equals_training_each_network_alone():
    gen = torch.Generator().manual_seed(3)
    P, k, d = 5, 12, 4
    X, xq = torch.randn(P, k, d, dtype=F64) - 2, torch.randn(P, d, dtype=F64) - 2
    y = network_forward(he_network(P, d, 8, 3, gen, dtype=F64), X)
    init = he_network(P, d, 8, 3, gen, dtype=F64)
    batched = train_networks(X, y, xq, init, epochs=40, lr=1e-2)
    assert batched.shape == (41, P)
    for p in range(P):
        alone = train_networks(X[p:p + 1], y[p:p + 1], xq[p:p + 1],
                               [W[p:p + 1] for W in init], epochs=40, lr=1e-2)
        torch.testing.assert_close(batched[:, p], alone[:, 0], rtol=0, atol=1e-10)
    assert not torch.equal(batched[0], batched[-1])  # it did train
    # training reduces the loss on the prompt's own examples (the fit is real)
    fitted = train_networks(X, y, X[:, 0], init, epochs=200, lr=1e-2)
    assert (fitted[-1] - y[:, 0]).abs().mean() < 0.5 * (fitted[0] - y[:, 0]).abs().mean()


def test_baseline_rows_per_epoch_and_best():
    task = teacher_task(baseline_k=[1, 3, 6, 9], baseline_epochs=5)
    batch = task.sample(32, torch.Generator().manual_seed(4))
    eval_cfg = resolve_member({"task": {"name": "relu_teacher"},
                               "model": {"name": "transformer"}}).eval
    rows = task.baseline_errors(batch, "teacher_net", torch.float32, eval_cfg)
    assert task.baseline_errors(batch, "teacher_net", torch.float64, eval_cfg) == []
    best = [r for r in rows if r["metric"] == "r2" and r["infer_iter"] is None]
    assert sorted({r["position"] for r in best}) == [1, 3, 6]  # k <= n_points only
    for r in best:
        epochs = [e["value"] for e in rows if e["metric"] == "r2" and e["infer_iter"] is not None
                  and e["position"] == r["position"] and e["statistic"] == r["statistic"]]
        assert len(epochs) == 6 and r["value"] == pytest.approx(max(epochs))
    again = task.baseline_errors(batch, "teacher_net", torch.float32, eval_cfg)
    assert again == rows  # deterministic: init seeds from eval.seed and k
    ols = task.baseline_errors(batch, "ols", torch.float64, eval_cfg)
    assert {r["position"] for r in ols} == {1, 3, 6}


def test_float64_run_evaluates_longer_prompts_than_trained():
    from icl_core.training.evaluate import evaluate
    from icl_core.training.train import MemberRun

    member = resolve_member({
        "task": {"name": "relu_teacher", "dim": 3, "n_points": 4, "hidden": 6,
                 "baseline_k": [2, 6], "baseline_epochs": 3},
        "model": {"name": "transformer", "width": 8, "depth": 1, "heads": 2,
                  "mixer": "relu_attention"},
        "train": {"steps": 4, "batch_size": 8, "report_every": 2, "checkpoint_every": 2},
        "eval": {"n_prompts": 16, "baselines": ["teacher_net"],
                 "grid": [{"test_dist": "w0.0", "n_points": 6},
                          {"test_dist": "w0.5", "n_points": 6, "mix": 0.5}]},
        "dtype": "float64", "device": "cpu",
    })
    run = MemberRun(member)
    assert run.model.max_len == 13  # positions for the 6-pair evaluation prompts
    run.train_until(4)
    assert next(run.model.parameters()).dtype == F64
    rows = evaluate(run.model, member, run.device, run.dtype, 4, True)
    r2 = [r for r in rows if r["metric"] == "r2" and r["predictor"] == "model"]
    assert {r["test_dist"] for r in r2} == {"w0.0", "w0.5"}
    assert sorted({r["position"] for r in r2}) == list(range(7))
    assert {r["predictor"] for r in rows} == {"model", "teacher_net_float32", "zero",
                                              "prompt_mean", "ridge"}  # + trivial predictors


@pytest.mark.parametrize("raw, field, choices", [
    ({"model": {"mixer": "relu"}}, "model.mixer", "relu_attention"),
    ({"task": {"mix": 1.5}}, "task.mix", "[0, 1]"),
    ({"task": {"depth": 0}}, "task.depth", ">= 1"),
    ({"task": {"baseline_k": [0, 5]}}, "task.baseline_k", ">= 1"),
    ({"eval": {"baselines": ["gd"]}}, "eval.baselines", "ols, teacher_net"),
])
def test_bad_settings_are_refused_naming_the_field(raw, field, choices):
    config = {"task": {"name": "relu_teacher", **raw.get("task", {})},
              "model": {"name": "transformer", **raw.get("model", {})},
              "eval": raw.get("eval", {})}
    with pytest.raises(ConfigError) as err:
        resolve_member(config)
    assert field in str(err.value) and choices in str(err.value)
