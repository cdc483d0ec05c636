"""The learned-regime bar (analysis.reading.regime) on synthetic Polars rows with known
answers: the gate every verdict passes first (the engine's own rules: tests/test_claims_engine.py)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis.reading.regime import (
    LEARNED_ERROR_RATIO,
    LEARNED_R2_GAP,
    REACH,
    excess_bar,
    learned_regime,
    regime_notes,
    threshold_regime,
)
from analysis.reading.spreads import seed_spreads, spread

TRIVIAL_MSE = 3.0  # Var(y) of D = 3 least squares: what predicting the prompt mean costs


def rows(levels: dict[str, list[float]], metric: str = "mse", trivial: dict | None = None,
         task: str = "linear_regression") -> pl.DataFrame:
    """One member per (mixer, seed): the model's final error levels[mixer][seed], the trivial
    predictors' and OLS's on the same prompts, an earlier step worth 1e3 (ignored)."""
    trivial = trivial if trivial is not None else {"prompt_mean": TRIVIAL_MSE, "zero": 3.3,
                                                   "ridge": 1e-12}
    out = []
    for mixer, values in levels.items():
        for seed, value in enumerate(values):
            base = {"config_hash": f"{mixer}{seed}", "seed": seed, "status": "ok",
                    "model.mixer": mixer, "model.depth": 2, "task.name": task, "metric": metric,
                    "statistic": "median", "position": 20, "test_dist": "train",
                    "infer_iter": None, "loop_iter": None}
            out.append({**base, "predictor": "model", "step": 50, "value": 1e3})
            out.append({**base, "predictor": "model", "step": 100, "value": value})
            out.append({**base, "predictor": "ols_float32", "step": 100, "value": 1e-14})
            out += [{**base, "predictor": p, "step": 100, "value": v} for p, v in trivial.items()]
    return pl.DataFrame(out, schema_overrides={"infer_iter": pl.Int64, "loop_iter": pl.Int64})


def cell(table: pl.DataFrame, mixer: str) -> dict:
    return table.filter(pl.col("model.mixer") == mixer).row(0, named=True)


def test_a_model_at_the_prompt_mean_is_not_testable():
    table = learned_regime(rows({"attention": [3.0, 2.9, 3.1]}), by=["model.mixer"])
    row = cell(table, "attention")
    assert row["trivial_predictor"] == "prompt_mean"  # ridge solves least squares: not the bar
    assert row["trivial"] == pytest.approx(TRIVIAL_MSE) and row["n_seeds"] == 3
    assert row["learned"] is False and row["margin"] == pytest.approx(1.0)
    assert row["bar"] == pytest.approx(LEARNED_ERROR_RATIO * TRIVIAL_MSE)
    assert "not learned" in row["regime"] and "needs <= 0.1x" in row["regime"]


def test_a_model_100x_better_than_trivial_is_judged():
    table = learned_regime(rows({"attention": [0.03, 0.02, 0.04]}), by=["model.mixer"])
    row = cell(table, "attention")
    assert row["learned"] is True and row["margin"] == pytest.approx(0.01)


def test_ridge_is_the_bar_where_it_does_not_solve_the_task():
    table = learned_regime(rows({"a": [0.5, 0.5, 0.5]}, task="primitives",
                                trivial={"prompt_mean": 3.0, "ridge": 1.0}), by=["model.mixer"])
    row = cell(table, "a")
    assert row["trivial_predictor"] == "ridge" and row["learned"] is False


def test_r2_needs_a_gap_over_the_best_trivial_predictor():
    trivial = {"zero": -0.1, "prompt_mean": 0.0, "ridge": 0.40}
    table = learned_regime(rows({"relu": [0.43, 0.44, 0.45], "soft": [0.70, 0.72, 0.71]},
                                metric="r2", trivial=trivial, task="relu_teacher"),
                           by=["model.mixer"], metric="r2")
    relu, soft = cell(table, "relu"), cell(table, "soft")
    assert relu["trivial_predictor"] == "ridge" and relu["learned"] is False
    assert relu["margin"] == pytest.approx(0.04) and relu["bar"] == pytest.approx(
        0.40 + LEARNED_R2_GAP)
    assert soft["learned"] is True
    assert regime_notes(table, "model.mixer") == [
        "relu: not testable at this scale (median R² gap +0.040 over ridge; needs >= +0.05)"]


def test_without_trivial_rows_the_regime_is_unknown_and_verdicts_refuse():
    table = learned_regime(rows({"a": [0.01, 0.02, 0.03]}, trivial={}), by=["model.mixer"])
    row = cell(table, "a")
    assert row["learned"] is None and row["trivial"] is None
    assert regime_notes(table, "model.mixer") == []  # figures draw nothing then








def test_threshold_claims_need_the_threshold_below_half_the_trivial_error():
    assert threshold_regime(0.3, 0.95, "no_retrieval").learned is True
    regime = threshold_regime(0.7, 0.95, "no_retrieval", label="N=20")
    assert regime.learned is False and "needs <= 0.5x" in regime.text()
    assert threshold_regime(0.3, None).learned is None




def test_seed_spreads_min_median_max_per_cell():
    frame = pl.DataFrame({"x": [1, 1, 1, 2, 2], "seed": [0, 1, 2, 0, 1],
                          "value": [1.0, 2.0, 4.0, 5.0, 7.0]})
    table = seed_spreads(frame, ["x"])
    one = table.row(0, named=True)
    assert (one["n_seeds"], one["min"], one["median"], one["max"]) == (3, 1.0, 2.0, 4.0)
    assert table.row(1, named=True)["n_seeds"] == 2
    s = spread([1.0, 2.0, 4.0, math.nan])
    assert s.n == 3 and s.median == 2.0 and "3 seeds, min-max" in s.text()


# ---------------------------------------------------------------- the floor and its reach


def with_floor(frame: pl.DataFrame, floor: float) -> pl.DataFrame:
    """The rows plus a floor row per member (predictor "floor", value `floor`)."""
    extra = frame.filter(pl.col("predictor") == "prompt_mean").with_columns(
        pl.lit("floor").alias("predictor"), pl.lit(floor).alias("value"))
    return pl.concat([frame, extra])


def test_the_excess_rule_is_todays_rule_when_the_floor_is_zero():
    """floor 0 (error) / ceiling 1 (R²), given or absent: the very same bar, margin and
    verdict as the rule without a floor, at every level."""
    g = np.random.default_rng(0)
    for t in g.uniform(1e-6, 10, 200).tolist():
        assert excess_bar(t, 0.0) == LEARNED_ERROR_RATIO * t == excess_bar(t)
    for t in g.uniform(-1, 0.999, 200).tolist():
        assert excess_bar(t, 1.0, r2=True) == t + LEARNED_R2_GAP == excess_bar(t, r2=True)
    levels = {"a": [0.2, 0.3, 0.31], "b": [0.3, 0.31, 0.32], "c": [0.03, 0.02, 0.04],
              "d": [2.0, 3.0, 4.0]}
    cols = ["model.mixer", "trivial", "raw_bar", "bar", "reach", "margin", "learned"]
    plain = learned_regime(rows(levels), by=["model.mixer"])
    zero = learned_regime(with_floor(rows(levels), 0.0), by=["model.mixer"])
    assert plain.select(cols).equals(zero.select(cols))
    assert plain["floor"].is_null().all() and (zero["floor"] == 0).all()
    assert plain["bar"].to_list() == plain["raw_bar"].to_list()
    assert plain["learned"].to_list() == [True, False, True, False]  # a: at the bar
    assert set(plain["reach"]) == {"reachable"}
    trivial = {"zero": -0.1, "prompt_mean": 0.0, "ridge": 0.40}
    r2 = {"x": [0.43, 0.44, 0.45], "y": [0.44, 0.45, 0.46], "z": [0.7, 0.7, 0.7]}
    plain = learned_regime(rows(r2, "r2", trivial, "relu_teacher"), by=["model.mixer"],
                           metric="r2")
    one = learned_regime(with_floor(rows(r2, "r2", trivial, "relu_teacher"), 1.0),
                         by=["model.mixer"], metric="r2")
    assert plain.select(cols).equals(one.select(cols))
    assert plain["learned"].to_list() == [False, True, True]


def test_a_floor_above_todays_bar_is_judged_on_the_excess_and_said_so():
    """Noisy regression (prompt mean 3.0, floor 1.0 > today's bar 0.3): today's bar is out
    of reach, the excess bar 1.0 + 0.1 x 2.0 = 1.2 is not; a model at 1.1 is learned (0.05x
    the excess), one at 1.5 is not learned (0.25x), never 'out of reach'."""
    table = learned_regime(with_floor(rows({"near": [1.1, 1.08, 1.12], "far": [1.5] * 3}), 1.0),
                           by=["model.mixer"])
    near, far = cell(table, "near"), cell(table, "far")
    for row in (near, far):
        assert row["floor"] == 1.0 and row["reach"] == "excess only"
        assert row["raw_bar"] == pytest.approx(0.3) and row["bar"] == pytest.approx(1.2)
    assert near["learned"] is True and near["margin"] == pytest.approx(0.05)
    assert far["learned"] is False and far["margin"] == pytest.approx(0.25)
    assert "over the floor 1: 0.25x prompt mean's excess 2" in far["regime"]
    assert "today's bar lies beyond it" in far["regime"]
    assert regime_notes(table.filter(pl.col("model.mixer") == "far"), "model.mixer") == [
        "far: not testable at this scale (median: best 0.25x prompt mean over the floor 1; "
        "needs <= 0.1x)"]


def test_a_bar_no_predictor_can_clear_is_out_of_reach_not_unlearned():
    """Error: the best trivial predictor at the floor (k = 0: the zero predictor is the Bayes
    predictor) leaves nothing to learn. R²: ridge 0.968 on the paper's ReLU teacher needs R²
    1.018 > 1 (no floor row: ceiling 1). Both: 'bar out of reach', with the numbers."""
    table = learned_regime(with_floor(rows({"a": [3.0, 3.1, 2.9]}), 3.0), by=["model.mixer"])
    row = cell(table, "a")
    assert row["reach"] == "out of reach" and row["learned"] is False
    assert row["regime"] == ("bar out of reach: this setting cannot test the claim (best "
                             "trivial prompt mean 3, floor 3, bar 0.3)")
    r2 = learned_regime(rows({"soft": [0.97, 0.98, 0.975]}, "r2",
                             {"zero": 0.0, "prompt_mean": 0.2, "ridge": 0.968}, "relu_teacher"),
                        by=["model.mixer"], metric="r2")
    row = cell(r2, "soft")
    assert row["reach"] == "out of reach" and row["learned"] is False
    assert row["bar"] == pytest.approx(1.018)
    assert regime_notes(r2, "model.mixer") == [
        "soft: bar out of reach: this setting cannot test the claim (best trivial ridge "
        "0.968, ceiling 1 (none reported), bar 1.02)"]


def test_an_r2_ceiling_scales_the_gap_to_the_room_left():
    """R² ceiling C: the gap demanded is 0.05 x (C − t) / (1 − t): t = 0.7, C = 0.9 needs
    +0.0333 (a model at 0.74 is learned, at 0.72 not); C = 0.72 < t + 0.05: excess only."""
    trivial = {"zero": 0.0, "prompt_mean": 0.2, "ridge": 0.7}
    base = rows({"a": [0.74] * 3, "b": [0.72] * 3}, "r2", trivial, "relu_teacher")
    table = learned_regime(with_floor(base, 0.9), by=["model.mixer"], metric="r2")
    a, b = cell(table, "a"), cell(table, "b")
    assert a["bar"] == pytest.approx(0.7 + 0.05 * 0.2 / 0.3) and a["reach"] == "reachable"
    assert a["learned"] is True and b["learned"] is False
    assert "needs >= +0.0333; ceiling 0.9" in b["regime"]
    tight = learned_regime(with_floor(base, 0.72), by=["model.mixer"], metric="r2")
    assert set(tight["reach"]) == {"excess only"}
    assert cell(tight, "b")["learned"] is True  # 0.72 >= 0.7 + 0.05 x 0.02 / 0.3
    assert REACH == ("reachable", "excess only", "out of reach")
