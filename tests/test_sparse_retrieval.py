"""Sparse token retrieval (qSTR): position codes, labels, the four architectures, the
paper's attention construction (eq. A.2), the epoch trainer and the stop-at-threshold run."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
import torch

from analysis.figures.retrieval import reachable
from icl_core.common.device import generator
from icl_core.models import build_model
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.tasks import build_task
from icl_core.tasks.qstr import code_dim, qk_contrast
from icl_core.training.train import MemberRun

CPU = torch.device("cpu")


def member(task=None, model=None, train=None, eval_=None, dtype="float64"):
    return resolve_member({
        "task": {"name": "qstr", "n_points": 8, "dim": 3, **(task or {})},
        "model": {"name": "attention_mlp", "mlp_width": 8} if model is None else model,
        "train": {"optimizer": "adamw", "batch_size": 16, "steps": 20, "report_every": 10,
                  "checkpoint_every": 10, **(train or {})},
        "eval": {"n_prompts": 64, **(eval_ or {})}, "dtype": dtype,
    })


def task_of(m, seed=0):
    return build_task(m.task, seed, CPU, torch.float64)


def test_code_dim_follows_the_peer_code():
    assert [code_dim(n) for n in (2, 4, 12, 100)] == [3, 6, 12, 23]  # Fig 2: N=100 -> 23


@pytest.mark.parametrize("n", [16, 64, 256])
def test_codes_are_unit_rademacher_with_bounded_overlap(n):
    codes = task_of(member({"n_points": n})).codes
    d_e = code_dim(n)
    assert codes.shape == (n, d_e)
    assert torch.allclose(codes.abs(), torch.full_like(codes, 1 / math.sqrt(d_e)))
    gram = codes @ codes.T
    assert torch.allclose(gram.diagonal(), torch.ones(n, dtype=gram.dtype))
    assert (gram - torch.eye(n, dtype=gram.dtype)).abs().max() <= 0.5 + 1e-12


def test_task_parameters_come_from_the_task_seed():
    m = member({"n_points": 32})
    a, b, c = task_of(m, 0), task_of(m, 0), task_of(m, 1)
    assert torch.equal(a.codes, b.codes) and torch.equal(a.u, b.u)
    assert not torch.equal(a.codes, c.codes) and not torch.equal(a.u, c.u)
    assert torch.isclose(a.u.norm(), torch.tensor(1.0, dtype=a.u.dtype))


def decode(task, batch, slot):
    """Indices read back from the inputs: the code in `slot` (0: own, 1..q: pointed)."""
    d, d_e = task.cfg.dim, task.cfg.d_e
    part = batch.inputs[..., d + slot * d_e:d + (slot + 1) * d_e]
    return (part @ task.codes.T).argmax(-1)  # a code matches itself (1) far above others


def test_layout_and_linear_labels_are_consistent():
    task = task_of(member({"n_points": 12}))
    batch = task.sample(200, generator(CPU, 3))
    assert batch.inputs.shape == (200, 12, 3 + 2 * code_dim(12)) and batch.mask.all()
    assert torch.equal(decode(task, batch, 0), torch.arange(12).expand(200, 12))
    t = decode(task, batch, 1)
    x = batch.inputs[..., :3]
    expected = torch.gather(x, 1, t.unsqueeze(-1).expand(-1, -1, 3)) @ task.u
    torch.testing.assert_close(batch.targets[..., 0], expected, rtol=0, atol=1e-12)
    assert len(set(t[:, 0].tolist())) > 1  # 1STR: indices differ across prompts ...
    assert (t != t[:, :1]).any()  # ... and across positions


def test_simple_variant_shares_one_index_per_prompt():
    task = task_of(member({"simple": True}))
    t = decode(task, task.sample(100, generator(CPU, 0)), 1)
    assert torch.equal(t, t[:, :1].expand_as(t)) and len(set(t[:, 0].tolist())) > 1


def test_sqnorm_link_has_distinct_indices_and_unit_variance():
    task = task_of(member({"q": 3, "n_points": 6, "dim": 4, "link": "sqnorm"}))
    batch = task.sample(40_000, generator(CPU, 0))
    t = torch.stack([decode(task, batch, s) for s in (1, 2, 3)], -1)  # (B, N, 3)
    assert (t[..., 0] != t[..., 1]).all() and (t[..., 1] != t[..., 2]).all() \
        and (t[..., 0] != t[..., 2]).all()
    y = batch.targets[:, 0, 0]  # one position per prompt: independent draws
    assert abs(float(y.mean())) < 0.02 and abs(float(y.var()) - 1.0) < 0.03
    x = batch.inputs[..., :4]
    picked = torch.gather(x.unsqueeze(1).expand(-1, 6, -1, -1), 2,
                          t.unsqueeze(-1).expand(-1, -1, -1, 4))
    expected = (picked.pow(2).sum(-1) - 4).sum(-1) / math.sqrt(2 * 3 * 4)
    torch.testing.assert_close(batch.targets[..., 0], expected, rtol=0, atol=1e-12)


def test_attention_construction_retrieves_the_pointed_token():
    """Eq. A.2: W_QK = α·I on the (query w_t, key w_j) block puts weight >= 1/(1+(N-1)e^{-α/2})
    on token t_i (⟨w_t, w_j⟩ <= 1/2 for j != t); with a read-out of ⟨u, x⟩ through the
    ReLU MLP the one-layer transformer then solves 1STR."""
    m = member({"n_points": 16, "dim": 3}, {"name": "attention_mlp", "mlp_width": 2})
    task = task_of(m)
    model = build_model(m.model, d_in=task.d_in, d_out=1, max_len=16, causal=False,
                        device=CPU, dtype=torch.float64)
    d, d_e, alpha = 3, task.cfg.d_e, 60.0
    with torch.no_grad():
        model.qk.zero_()
        model.qk[0, d + d_e:d + 2 * d_e, d:d + d_e] = alpha * torch.eye(d_e)
        first, second = model.mlp[0], model.mlp[2]
        first.weight.zero_(), first.bias.zero_(), second.bias.zero_()
        first.weight[0, :d], first.weight[1, :d] = task.u, -task.u  # relu(a) - relu(-a) = a
        second.weight.copy_(torch.tensor([[1.0, -1.0]]))
    batch = task.sample(256, generator(CPU, 1))
    with torch.no_grad():
        weights = model.attention(batch.inputs)[:, 0]  # (B, N, N)
    t = decode(task, batch, 1)
    on_target = torch.gather(weights, 2, t.unsqueeze(-1)).squeeze(-1)
    bound = 1 / (1 + 15 * math.exp(-alpha / 2))
    assert float(on_target.min()) >= bound - 1e-12
    with torch.no_grad():
        mse = float((model(batch.inputs) - batch.targets).pow(2).mean())
    assert mse < 1e-10
    # the artifact is the matrix itself, and the diagonal stands out
    qk = model.artifacts()["qk"][0].detach().numpy()
    assert qk_contrast(qk + 1e-9, d, d_e) > 1e9  # alpha / 1e-9 outside the block


def test_mha_artifact_is_the_score_matrix():
    m = member(model={"name": "mha_mlp"})
    task = task_of(m)
    model = build_model(m.model, d_in=task.d_in, d_out=1, max_len=8, causal=False,
                        device=CPU, dtype=torch.float64)
    with torch.no_grad():
        model.attn.in_proj_bias.zero_()
    z = task.sample(4, generator(CPU, 0)).inputs
    _, weights = model.attn(z, z, z, need_weights=True)  # (B, N, N), one head
    qk = model.artifacts()["qk"][0]
    torch.testing.assert_close(weights, (z @ qk @ z.transpose(1, 2)).softmax(-1),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["attention_mlp", "mha_mlp", "ffn", "bigru"])
def test_every_architecture_reads_the_whole_sequence(name):
    """Non-causal by design: the output at position 0 depends on the last token."""
    m = member(model={"name": name})
    task = task_of(m)
    model = build_model(m.model, d_in=task.d_in, d_out=1, max_len=8, causal=False,
                        device=CPU, dtype=torch.float64)
    z = task.sample(2, generator(CPU, 0)).inputs.requires_grad_(True)
    out = model(z)
    assert out.shape == (2, 8, 1)
    (grad,) = torch.autograd.grad(out[:, 0].sum(), z)
    assert grad[:, -1].abs().sum() > 0
    with pytest.raises(ValueError, match="cannot serve a causal task"):
        build_model(m.model, d_in=task.d_in, d_out=1, max_len=8, causal=True, device=CPU,
                    dtype=torch.float64)


def test_epoch_trainer_visits_every_prompt_once_per_epoch():
    m = member(train={"dataset_size": 40, "batch_size": 16, "steps": 6})  # 3 steps an epoch
    run = MemberRun(m)
    assert run.steps_per_epoch == 3
    epochs = [torch.cat([run._dataset_batch(e * 3 + s).inputs for s in range(3)])
              for e in range(2)]
    key = lambda x: sorted(map(tuple, x.flatten(1).tolist()))  # noqa: E731
    assert epochs[0].shape[0] == 40 and key(epochs[0]) == key(epochs[1]) == key(
        run._dataset.inputs)
    assert not torch.equal(epochs[0], epochs[1])  # reshuffled


def test_epoch_trainer_resumes_mid_epoch_exactly():
    m = member(train={"dataset_size": 40, "batch_size": 16, "steps": 20})
    straight = MemberRun(m)
    straight.train_until(10)
    straight.train_until(20)
    first = MemberRun(m)
    first.train_until(10)  # mid-epoch (3 steps an epoch)
    resumed = MemberRun(m)
    resumed.load_state_dict(first.state_dict())
    resumed.train_until(20)
    assert resumed.rows == straight.rows
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_stop_loss_ends_training_at_an_epoch_boundary(tmp_path):
    m = member(train={"dataset_size": 40, "batch_size": 16, "steps": 30, "stop_loss": 1e9})
    run_trial(TrialSpec("sw", "st", str(tmp_path), [m.to_dict()]))
    rows = pl.read_parquet(tmp_path / "sw" / "st" / "rows" / "*.parquet")
    assert rows.filter(pl.col("metric") == "steps_completed")["value"][0] == 3  # one epoch
    assert set(rows["status"]) == {"ok"}


def test_stop_below_ends_the_curve_at_the_first_test_under_it(tmp_path):
    m = member(eval_={"every": 10, "stop_below": 1e9}, train={"steps": 40})
    run_trial(TrialSpec("sw", "st", str(tmp_path), [m.to_dict()]))
    rows = pl.read_parquet(tmp_path / "sw" / "st" / "rows" / "*.parquet")
    assert rows.filter(pl.col("metric") == "steps_completed")["value"][0] == 10
    mse = rows.filter((pl.col("metric") == "mse") & (pl.col("statistic") == "mean")
                      & (pl.col("predictor") == "model"))
    assert mse["step"].to_list() == [10]  # evaluated once, not twice, at the stop
    never = member(eval_={"every": 10, "stop_below": 1e-12}, train={"steps": 40})
    run_trial(TrialSpec("sw", "st2", str(tmp_path), [never.to_dict()]))
    rows = pl.read_parquet(tmp_path / "sw" / "st2" / "rows" / "*.parquet")
    assert rows.filter(pl.col("metric") == "steps_completed")["value"][0] == 40
    curve = rows.filter((pl.col("metric") == "mse") & (pl.col("statistic") == "mean")
                        & (pl.col("predictor") == "model"))
    assert curve["step"].to_list() == [10, 20, 30, 40]


def test_thresholds_below_the_runs_stop_are_not_shown():
    rows = pl.DataFrame({"eval.stop_below": [0.05, 0.05]})
    assert reachable(rows, (0.1, 0.05, 0.02)) == (
        [0.1, 0.05], ["threshold 0.02 is below the runs' stop (0.05): not shown"])
    assert np.isfinite(qk_contrast(np.ones((7, 7)), 1, 2))


def test_planner_counts_the_ffn_once_per_prompt_and_attention_per_token():
    from icl_core.models import num_params
    from icl_core.planning.resources import step_flops

    for name, tokens in (("ffn", 1), ("attention_mlp", 8)):
        m = member(model={"name": name})
        task = task_of(m)
        model = build_model(m.model, d_in=task.d_in, d_out=1, max_len=8, causal=False,
                            device=CPU, dtype=torch.float64)
        assert step_flops(m) == 6.0 * num_params(model) * tokens * m.train.batch_size


def test_attention_figure_shows_the_median_seed_and_the_seeds_spread(tmp_path):
    """Fig 2 with 3 seeds: each panel draws the seed of median diagonal contrast and its title
    the contrast's median [min–max] over seeds (artifacts written through the real store)."""
    from analysis.figures.retrieval import str_attention_figure
    from icl_core.storage.artifacts import save_artifacts
    from icl_core.storage.store import Store

    d, n, d_e = 2, 4, 3
    store, rows = Store(str(tmp_path)), []
    for seed, alpha in enumerate((50.0, 10.0, 200.0)):  # contrasts 50, 10, 200
        qk = np.ones((d + 2 * d_e, d + 2 * d_e))
        qk[d + d_e:, d:d + d_e] += (alpha - 1) * np.eye(d_e)
        config_hash = f"h{seed}"
        save_artifacts(store, "sc", "str_attention", config_hash, {"qk": [(7, qk[None])]})
        rows.append({"sweep": "sc", "study": "str_attention", "config_hash": config_hash,
                     "seed": seed, "status": "ok", "model.name": "mha_mlp",
                     "task.simple": True, "task.dim": d, "task.n_points": n,
                     "task.code_dim": d_e})
    summary = str_attention_figure(pl.DataFrame(rows), tmp_path / "fig", storage=str(tmp_path))
    key = "contrast_mha_mlp_simple-1STR"
    assert summary[key] == pytest.approx(50.0)  # the median seed's (seed 0)
    assert (summary[f"{key}_lo"], summary[f"{key}_hi"], summary[f"{key}_n"]) == (
        pytest.approx(10.0), pytest.approx(200.0), 3)
    assert "50.0 [10.0–200.0], 3 seed(s)" in summary["note"]


def test_the_final_evaluation_writes_fig2s_contrast_as_a_row(tmp_path):
    """An attention model's last evaluation carries "qk_offblock_ratio" = 1 / the contrast of
    its recorded query-key matrix (the row Fig 2's claim reads); an FFN, which records none,
    gets no such row."""
    from icl_core.storage.artifacts import load_artifact

    m = member(train={"artifact_every": 10})
    run_trial(TrialSpec("sw", "st", str(tmp_path), [m.to_dict()]))
    rows = pl.read_parquet(tmp_path / "sw" / "st" / "rows" / "*.parquet")
    ratio = rows.filter(pl.col("metric") == "qk_offblock_ratio")
    assert ratio.height == 1 and ratio["step"][0] == 20
    steps, values = load_artifact(str(tmp_path), "sw", "st", ratio["config_hash"][0], "qk")
    assert steps[-1] == 20
    t = task_of(m)
    assert ratio["value"][0] == pytest.approx(1 / qk_contrast(values[-1][0], 3, t.cfg.d_e))
    ffn = member(model={"name": "ffn"})
    run_trial(TrialSpec("sw", "ffn", str(tmp_path), [ffn.to_dict()]))
    rows = pl.read_parquet(tmp_path / "sw" / "ffn" / "rows" / "*.parquet")
    assert rows.filter(pl.col("metric") == "qk_offblock_ratio").height == 0
