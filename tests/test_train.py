"""Training: determinism, bit-exact resume, divergence recorded, rows and artifacts."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import tiny_member

from icl_core.running.trial import TrialFailed, TrialSpec, run_trial
from icl_core.running.tune_trainable import load_state, save_state
from icl_core.spec.config import resolve_member
from icl_core.storage.artifacts import load_artifact
from icl_core.storage.store import Store
from icl_core.training.train import MemberRun, lr_factor


def f64(**over):
    return resolve_member({**tiny_member(**over), "dtype": "float64"})


def test_same_config_and_seed_give_the_same_numbers():
    a, b = MemberRun(f64()), MemberRun(f64())
    assert a.train_until(20) == b.train_until(20)
    c = MemberRun(resolve_member({**tiny_member(), "dtype": "float64", "seed": 1}))
    assert c.train_until(20) != a.step  # a different seed trains differently
    for pa_, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa_, pb)


def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path):
    member = f64(train__schedule="step", train__step_size=7, train__warmup_steps=5)
    straight = MemberRun(member)
    straight.train_until(15)
    straight.train_until(30)

    first = MemberRun(member)
    first.train_until(15)
    save_state(str(tmp_path), {"run": first.state_dict()})
    resumed = MemberRun(member)  # a fresh process would start here
    resumed.load_state_dict(load_state(str(tmp_path))["run"])
    resumed.train_until(30)

    assert resumed.rows == straight.rows
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_lr_schedule_warmup_then_step():
    cfg = f64(train__schedule="step", train__step_size=10, train__gamma=0.5,
              train__warmup_steps=4).train
    assert [lr_factor(s, cfg) for s in (0, 3, 9, 10, 25)] == [0.25, 1.0, 1.0, 0.5, 0.25]


def test_diverging_member_is_recorded_and_the_trial_goes_on(tmp_path):
    bad = resolve_member(tiny_member(train__lr=1e30, train__steps=40))  # float32 overflows
    good = f64()
    spec = TrialSpec("sw", "st", str(tmp_path), [bad.to_dict(), good.to_dict()])
    statuses = run_trial(spec)
    assert statuses == {bad.hash: "diverged", good.hash: "ok"}
    rows = pl.read_parquet(tmp_path / "sw" / "st" / "rows" / f"{bad.hash}.parquet")
    assert rows["status"].unique().to_list() == ["diverged"]
    reason = rows["reason"][0]
    assert reason.startswith("non-finite training loss at step ")
    step = int(reason.rsplit(" ", 1)[1])
    assert 1 <= step <= 40
    assert rows.filter(pl.col("metric") == "steps_completed")["value"][0] == step
    assert rows.filter(pl.col("metric") == "mse").height == 0  # no evaluation of a dead model


def test_failing_member_is_recorded_and_raises_after_the_others(tmp_path):
    bad = resolve_member({**tiny_member(), "device": "cuda:99", "seed": 5})  # no such device
    good = resolve_member(tiny_member())
    spec = TrialSpec("sw", "st", str(tmp_path), [bad.to_dict(), good.to_dict()])
    with pytest.raises(TrialFailed, match=f"member 0 \\({bad.hash}\\)"):
        run_trial(spec)
    store = Store(str(tmp_path))
    assert store.finished("sw", "st") == {good.hash}  # the other member still ran
    status, reason = store.member_status("sw", "st", [bad.hash])[bad.hash]
    assert status == "failed" and reason


def test_rows_have_fixed_columns_config_and_provenance(tmp_path):
    member = resolve_member(tiny_member(eval__grid=[{}, {"test_dist": "long", "n_points": 9}]))
    run_trial(TrialSpec("sw", "st", str(tmp_path), [member.to_dict()], provenance={"code_version": "x"}))
    rows = pl.read_parquet(tmp_path / "sw" / "st" / "rows" / f"{member.hash}.parquet")
    mse = rows.filter((pl.col("metric") == "mse") & (pl.col("predictor") == "model"))
    assert set(mse["statistic"]) == {"mean", "median", "q25", "q75"}
    assert set(mse["test_dist"]) == {"train", "long"}
    assert sorted(set(mse["prompt_len"])) == [6, 9]
    assert set(mse["position"]) == {6, 9}
    med = mse.filter(pl.col("statistic") == "median")["value"]
    q25 = mse.filter(pl.col("statistic") == "q25")["value"]
    assert (q25 <= med).all()
    assert rows["model.depth"][0] == 2 and rows["config_hash"][0] == member.hash
    assert rows["code_version"][0] == "x" and rows["tokens_per_s"][0] > 0
    assert set(rows.filter(pl.col("predictor") == "ols_float64")["statistic"]) == {
        "mean", "median", "q25", "q75"}
    assert Store(str(tmp_path)).finished("sw", "st") == {member.hash}


def test_artifacts_channel_round_trips(tmp_path):
    from icl_core.models.base import HasArtifacts
    from icl_core.models.transformer import Transformer

    Transformer.artifacts = lambda self: {"read_in": self.read_in.weight}
    try:
        member = resolve_member(tiny_member(train__artifact_every=10))
        run_trial(TrialSpec("sw", "st", str(tmp_path), [member.to_dict()]))
    finally:
        del Transformer.artifacts
        HasArtifacts._abc_caches_clear()  # isinstance() cached "has artifacts" for the class
    steps, values = load_artifact(str(tmp_path), "sw", "st", member.hash, "read_in")
    assert steps.tolist() == [10, 20]
    assert values.shape == (2, 8, 4)
    assert not np.allclose(values[0], values[1])  # weights moved between the two records


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_dtypes_end_to_end(tmp_path, dtype):
    member = resolve_member({**tiny_member(), "dtype": dtype})
    run = MemberRun(member)
    run.train_until(5)
    assert next(run.model.parameters()).dtype == getattr(torch, dtype)


def test_evaluation_does_not_depend_on_chunking():
    """`eval.chunk` bounds memory only: same rows, same config hash."""
    from icl_core.training.evaluate import evaluate

    small, big = f64(eval__chunk=7), f64(eval__chunk=500)
    assert small.hash == big.hash
    run = MemberRun(small)
    run.train_until(5)
    assert evaluate(run.model, small, run.device, run.dtype, 5, True) == evaluate(
        run.model, big, run.device, run.dtype, 5, True)
    # prompts drawn once and reused give the very same rows as drawing them again
    from icl_core.training.evaluate import eval_prompts

    assert evaluate(run.model, small, run.device, run.dtype, 5, True, eval_prompts(small)) == \
        evaluate(run.model, small, run.device, run.dtype, 5, True)


def test_worker_refuses_a_config_whose_hash_differs_from_the_drivers(tmp_path):
    member = resolve_member(tiny_member())
    spec = TrialSpec("sw", "st", str(tmp_path), [member.to_dict()], hashes=["0" * 16])
    with pytest.raises(TrialFailed, match="different versions of icl_core"):
        run_trial(spec)
    assert not (tmp_path / "sw").exists()  # nothing written under a wrong name


def test_throughput_records_and_the_cached_matmul_peak(tmp_path, monkeypatch):
    import json
    import math

    from icl_core.training import throughput
    monkeypatch.setenv("ICL_CACHE", str(tmp_path / "cache"))
    members = [resolve_member(tiny_member(train__steps=30, seed=s, dtype=dt)).to_dict()
               for s, dt in ((0, "float32"), (1, "bfloat16"))]
    assert set(run_trial(TrialSpec("s", "t", str(tmp_path), members)).values()) == {"ok"}
    rows = pl.read_parquet(tmp_path / "s" / "t" / "rows" / "*.parquet")
    per = rows.group_by("config_hash").agg(pl.all().first())
    for r in per.iter_rows(named=True):
        assert r["step_time_s"] == pytest.approx(r["train_time_s"] / 30)
        assert r["tokens_per_s"] == pytest.approx(30 * 8 * 7 / r["train_time_s"])  # B x T
        assert 0 < r["flops_fraction"] < 1.5
        assert r["achieved_flops"] == pytest.approx(r["flops_fraction"] * r["matmul_peak_flops"])
        assert r["peak_memory_mb"] > 10 and r["peak_memory_kind"] == "process_rss"
    mse = rows.filter((pl.col("metric") == "mse") & (pl.col("predictor") == "model"))
    assert set(mse["dtype"]) == {"float32", "bfloat16"}
    assert all(math.isfinite(v) for v in mse["value"])  # bfloat16 end to end
    # measured once per node: the cache answers from then on (a planted value proves it)
    cache = throughput.cache_file()
    known = json.loads(cache.read_text())
    assert len(known) == 2 and all(v > 1e8 for v in known.values())
    key = next(k for k in known if k.endswith(f"float32|threads={torch.get_num_threads()}"))
    cache.write_text(json.dumps({**known, key: 123.0}))
    assert throughput.matmul_peak(torch.device("cpu"), torch.float32) == 123.0
    # a precision has its own entry, measured under it (TF32 / bf16 peaks are not fp32's)
    assert throughput.matmul_peak(torch.device("cpu"), torch.float32, "bf16") > 1e8
    assert sorted(json.loads(cache.read_text())) == sorted([*known, f"{key}|bf16"])
    # an unwritable cache leaves the fraction empty instead of failing the member
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ICL_CACHE", str(blocker / "cache"))
    assert throughput.matmul_peak(torch.device("cpu"), torch.float32) is None


@pytest.mark.slow
def test_compiled_member_trains_to_the_eager_numbers(tmp_path):
    # torch.compile takes ~30 s on a CPU: run with `pytest -m slow`
    eager = resolve_member(tiny_member(dtype="float64", device="cpu"))
    compiled = resolve_member(tiny_member(dtype="float64", device="cpu", train__compile=True))
    assert eager.hash != compiled.hash
    runs = {}
    for name, member in (("eager", eager), ("compiled", compiled)):
        run = MemberRun(member)
        run.train_until(20)
        runs[name] = run
    assert list(runs["compiled"].model.state_dict()) == list(runs["eager"].model.state_dict())
    np.testing.assert_allclose([r["value"] for r in runs["compiled"].rows],
                               [r["value"] for r in runs["eager"].rows], rtol=1e-8)
