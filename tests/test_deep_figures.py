"""The deep-optimizers sweep's smoke preset trained for real (no Ray), then every figure it
names drawn from its rows: R² rows pooled and per batch, the baseline only on the ReLU member."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from analysis.figures.deep_shift import fig3_ks
from analysis.figures.registry import FIGURES
from analysis.reading.store import read_rows
from icl import catalog
from icl_core.running.trial import TrialSpec, run_trial


@pytest.fixture(scope="module")
def smoke_rows(tmp_path_factory):
    storage = tmp_path_factory.mktemp("deep")
    sweep = catalog.load_sweep("deep_optimizers")
    out = {}
    for study in sweep.studies:
        members = [m.to_dict() for m in study.members("smoke")]
        run_trial(TrialSpec("deep_optimizers", study.name, str(storage), members))
        out[study.name] = (study, read_rows(str(storage), "deep_optimizers", study.name)[0])
    return storage, out


def test_smoke_rows_hold_r2_and_the_baseline_once(smoke_rows):
    _, studies = smoke_rows
    _, rows = studies["teacher_shift"]
    assert set(rows["status"]) == {"ok"}
    r2 = rows.filter(pl.col("metric") == "r2")
    assert set(r2["statistic"]) == {"pooled", "batch_mean"}
    model = r2.filter(pl.col("predictor") == "model")
    assert set(model["test_dist"]) == {"w0.0", "w0.5"}
    assert sorted(set(model["position"])) == list(range(7))  # trained on 4 pairs, tested to 6
    net = r2.filter(pl.col("predictor") == "teacher_net_float32")
    assert set(net["model.mixer"]) == {"relu_attention"}  # once per teacher depth
    assert sorted(set(net["position"])) == [1, 3, 6]
    assert set(net["infer_iter"].drop_nulls()) == set(range(6))  # epochs 0..5


def test_every_figure_is_drawn_from_smoke_rows(smoke_rows, tmp_path):
    storage, studies = smoke_rows
    for name, (study, rows) in studies.items():
        summary = FIGURES[study.figure](rows, tmp_path / name, name=study.figure, n_boot=10,
                                        storage=str(storage))
        assert summary["paths"] and all(Path(p).exists() for p in summary["paths"]), name
    # ReLU, softmax, summary, the baseline over epochs
    assert len(list((tmp_path / "teacher_shift").glob("*.png"))) == 4


def test_fig3_ks_match_the_paper_at_its_length():
    assert fig3_ks(50) == [15, 30, 45]
    assert fig3_ks(20) == [6, 12, 18]
