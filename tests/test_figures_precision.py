"""Figures of the least-squares precision study on synthetic rows with known answers."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis.figures.construction import construction_figure, explicit_gradient_figure
from analysis.figures.mse_vs_axis import mse_vs_axis
from analysis.figures.precision import PRECISION_FIGURES, icl_prefix_figure
from analysis.figures.registry import FIGURES

N_BOOT = 50
STEP = 100
CONFIG = {
    "model.name": "transformer", "model.depth": 2, "model.mixer": "attention",
    "model.layer_norm": True, "model.construction_layers": 0, "model.steps": None,
    "model.width": 64, "model.heads": 4, "model.mlp_ratio": 4,
    "task.name": "least_squares", "task.dim": 5, "task.n_points": 20, "task.op": "read",
    "task.features": 0, "task.target": "w", "train.steps": 1000, "dtype": "float32",
}
SCHEMA = {"position": pl.Int64, "infer_iter": pl.Int64, "model.steps": pl.Int64}


def stat_rows(value: float, **cols) -> list[dict]:
    """The four statistics over prompts of one error: median = value, q25 = value / 2,
    q75 = 2 value, mean = 1.5 value."""
    scale = {"median": 1.0, "q25": 0.5, "q75": 2.0, "mean": 1.5}
    return [{"statistic": s, "value": value * f, **cols} for s, f in scale.items()]


class Rows:
    """Builds one study's rows member by member."""

    def __init__(self):
        self.rows: list[dict] = []
        self.n = 0

    def member(self, seed: int = 0, status: str = "ok", **config) -> dict:
        self.n += 1
        cfg = {**CONFIG, **{k.replace("__", "."): v for k, v in config.items()}}
        return {"sweep": "precision", "study": "ls", "config_hash": f"h{self.n}",
                "seed": seed, "status": status, **cfg}

    def add(self, member: dict, value: float, metric: str = "mse", predictor: str = "model",
            step: int = STEP, position: int | None = None, infer_iter: int | None = None):
        self.rows += stat_rows(value, **member, metric=metric, predictor=predictor, step=step,
                               position=position, infer_iter=infer_iter, prompt_len=41,
                               test_dist="train")

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema_overrides=SCHEMA, infer_schema_length=None)


def png_written(summary: dict) -> bool:
    png = [p for p in summary["paths"] if p.suffix == ".png"]
    return len(png) == 1 and png[0].exists() and png[0].stat().st_size > 0


# ----------------------------------------------------------------------------- mse_vs_axis

SEED_FACTORS = (0.5, 1.0, 3.0)  # median over seeds: factor 1


def depth_rows(level, depths=(1, 2, 4, 8), mixers=("attention", "baseconv"), **extra) -> Rows:
    """Members over depth x mixer x LN x seed with median MSE level(mixer, ln, depth) times a
    seed factor; every member also has an earlier step worth 1e3 (must be ignored) and OLS
    rows at the last step."""
    r = Rows()
    for mixer in mixers:
        for ln in (True, False):
            for depth in depths:
                for seed, factor in enumerate(SEED_FACTORS):
                    m = r.member(seed=seed, model__mixer=mixer, model__layer_norm=ln,
                                 model__depth=depth, **extra)
                    r.add(m, 1e3, step=STEP // 2, position=20)
                    r.add(m, level(mixer, ln, depth) * factor, position=20)
                    r.add(m, 1e-14, predictor="ols_float64", position=20)
                    r.add(m, 1e-7, predictor="ols_float32", position=20)
    return r


def level(mixer: str, ln: bool, depth: int) -> float:
    return (1e-2 if mixer == "attention" else 1e-3) * (10.0 if ln else 1.0) / depth


def test_mse_vs_axis_takes_final_step_and_median_over_seeds(tmp_path):
    r = depth_rows(level)
    bad = r.member(seed=0, status="diverged", model__depth=4)
    r.add(bad, 1e-30, position=20)  # excluded: would be the best point
    summary = FIGURES["precision_depth"](r.frame(), tmp_path, name="precision_depth",
                                         n_boot=N_BOOT, storage="unused")
    table = summary["table"]
    assert table.columns == ["facet", "hue", "x", "median", "q25", "q75", "seed_min",
                             "seed_max", "n_seeds"]
    assert set(table["hue"]) == {"attention, LN on", "attention, LN off", "baseconv, LN on",
                                 "baseconv, LN off"}
    row = table.filter((pl.col("hue") == "baseconv, LN off") & (pl.col("x") == 4.0)).row(
        0, named=True)
    expected = level("baseconv", False, 4)
    assert row["median"] == pytest.approx(expected)
    assert row["q25"] == pytest.approx(0.5 * expected)
    assert row["q75"] == pytest.approx(2.0 * expected)
    assert row["seed_min"] == pytest.approx(min(SEED_FACTORS) * expected)  # over seeds
    assert row["seed_max"] == pytest.approx(max(SEED_FACTORS) * expected)
    assert row["n_seeds"] == 3 and row["facet"] is None
    assert summary["excluded"] == 1 and summary["ok"] == 48
    assert "1 member(s) excluded" in summary["note"]
    assert summary["best"]["baseconv, LN off"] == (8, pytest.approx(level("baseconv", False, 8)))
    assert summary["references"]["ols_float32"] == pytest.approx(1e-7)
    assert summary["axis"] == "model.depth"
    assert png_written(summary) and summary["paths"][0].name == "precision_depth.png"


def test_saturating_fit_recovers_the_floor(tmp_path):
    a, b, c = 1.0, 1.5, 1e-2
    r = depth_rows(lambda mixer, ln, depth: c + a * depth ** -b, depths=(1, 2, 4, 8, 16, 32, 64),
                   mixers=("baseconv",))
    # identical seeds: the data follow c + a L^-b exactly
    frame = r.frame().with_columns(
        pl.when(pl.col("step") == STEP).then(
            pl.col("value") / pl.col("seed").replace_strict(dict(enumerate(SEED_FACTORS))))
        .otherwise(pl.col("value")).alias("value"))
    summary = mse_vs_axis(frame, tmp_path, x="model.depth",
                          hue=("model.mixer", "model.layer_norm"), form="saturating",
                          n_boot=N_BOOT)
    assert set(summary["fits_by_label"]) == {"baseconv, LN on", "baseconv, LN off"}
    assert summary["fit"] is summary["fits"][0]
    for fit in summary["fits"]:
        assert fit.form == "saturating"
        assert fit.params["c"] == pytest.approx(c, rel=1e-2)
        assert fit.params["b"] == pytest.approx(b, rel=1e-2)
    assert png_written(summary) and summary["paths"][0].name == "mse_vs_depth.png"


def test_fit_needs_three_depths(tmp_path):
    r = depth_rows(level, depths=(1, 2), mixers=("attention",))
    summary = mse_vs_axis(r.frame(), tmp_path, "two", x="model.depth",
                          hue=("model.mixer", "model.layer_norm"), form="power", n_boot=N_BOOT)
    assert summary["fit"] is None and summary["fits"] == []
    assert "no fit (2 x value(s)" in summary["note"]


def test_primitives_facet_one_panel_per_op(tmp_path):
    r = Rows()
    op_level = {"read": 1e-9, "affine": 1e-8, "multiply": 1e-6}
    for op, value in op_level.items():
        for depth in (1, 2, 4, 8):
            for seed in (0, 1):
                m = r.member(seed=seed, task__op=op, model__depth=depth, model__mixer="baseconv",
                             model__layer_norm=False)
                r.add(m, value / depth, position=None)  # pooled over tokens
    summary = FIGURES["primitives_depth"](r.frame(), tmp_path, name="primitives_depth",
                                          n_boot=N_BOOT)
    assert summary["facets"] == ["read", "affine", "multiply"]  # the paper's order
    assert [ax.get_title() for ax in summary["axes"]] == ["op: read", "op: affine",
                                                           "op: multiply"]
    for op, value in op_level.items():
        assert summary["best"][op]["baseconv, LN off"] == (8, pytest.approx(value / 8))
    assert summary["references"] == {"read": {}, "affine": {}, "multiply": {}}
    assert set(summary["table"]["facet"]) == set(op_level)
    assert summary["fit"] is None and png_written(summary)


def test_features_hue_labels_and_power_form_registrations(tmp_path):
    r = Rows()
    for k in (0, 1, 2):
        for depth in (1, 2, 4):
            m = r.member(model__depth=depth, task__features=k)
            r.add(m, 10.0 ** -(k + depth), position=20)
    summary = FIGURES["features_depth"](r.frame(), tmp_path, name="features_depth",
                                        n_boot=N_BOOT)
    assert summary["table"]["hue"].unique().sort().to_list() == [
        "attention, k=0", "attention, k=1", "attention, k=2"]
    assert summary["best"]["attention, k=2"] == (4, pytest.approx(1e-6))
    for name in ("multiply_width", "multiply_heads", "multiply_mlp", "multiply_steps"):
        assert PRECISION_FIGURES[name].keywords["form"] == "power"
    assert PRECISION_FIGURES["multiply_steps"].keywords["x"] == "train.steps"


def test_multiply_steps_power_fit(tmp_path):
    r = Rows()
    for mixer, a in (("attention", 1.0), ("baseconv", 0.1)):
        for steps in (1e5, 1e6, 1e7, 1e8):
            for seed in (0, 1):
                m = r.member(seed=seed, model__mixer=mixer, train__steps=int(steps))
                r.add(m, a * steps ** -0.8, position=20)
    summary = FIGURES["multiply_steps"](r.frame(), tmp_path, name="multiply_steps",
                                        n_boot=N_BOOT)
    assert set(summary["fits_by_label"]) == {"attention", "baseconv"}
    for fit in summary["fits"]:
        assert fit.params["b"] == pytest.approx(0.8, rel=1e-2)
    assert png_written(summary)


# ------------------------------------------------------------------------------ icl_prefix


def test_icl_prefix_gap_orders(tmp_path):
    dim, n = 4, 10
    model = {k: 10.0 ** -(k / 2) if k <= dim else 1e-5 * (1 + k) for k in range(n + 1)}
    ols32 = {k: 1.0 if k < dim else 1e-8 * (1 + k % 3) for k in range(n + 1)}
    r = Rows()
    for seed in (0, 1, 2):
        m = r.member(seed=seed, task__dim=dim, model__depth=12)
        for k in range(n + 1):
            r.add(m, 1.0, step=10, position=k)  # an earlier step
            r.add(m, model[k] * SEED_FACTORS[seed], position=k)
            r.add(m, ols32[k], predictor="ols_float32", position=k)
            r.add(m, ols32[k] * 1e-7, predictor="ols_float64", position=k)
    summary = icl_prefix_figure(r.frame(), tmp_path, n_boot=N_BOOT)
    plateau = np.median([model[k] for k in range(dim + 1, n + 1)])
    floor = np.median([ols32[k] for k in range(dim + 1, n + 1)])
    assert summary["dim"] == dim
    assert summary["plateau"] == pytest.approx(plateau)
    assert summary["ols_float32_floor"] == pytest.approx(floor)
    assert summary["gap_orders"] == pytest.approx(math.log10(plateau / floor))
    table = summary["table"]
    assert table["position"].to_list() == list(range(n + 1))
    assert table["median"].to_list() == pytest.approx([model[k] for k in range(n + 1)])
    assert table["ols_float64"].to_list() == pytest.approx([ols32[k] * 1e-7 for k in range(n + 1)])
    assert summary["fit"] is None and summary["excluded"] == 0 and png_written(summary)


# ---------------------------------------------------------------------------- construction


def test_construction_max_rel_diff(tmp_path):
    iters = range(1, 9)
    gd = {it: 10.0 ** -it for it in iters}
    factor = {"float32": {1: 1.5, 2: 3.0, 4: 1.5, 8: 1.5}, "float64": {1: 1.1, 2: 1.1, 4: 0.95,
                                                                      8: 1.1}}
    r = Rows()
    for dtype, per_step in factor.items():
        for steps, f in per_step.items():
            m = r.member(dtype=dtype, model__name="baseconv_gd", model__mixer="baseconv",
                         model__steps=steps, model__depth=steps)
            r.add(m, gd[steps] * f, position=20)
            for it in iters:
                for predictor in ("gd_float32", "gd_float64"):
                    r.add(m, gd[it], predictor=predictor, position=20, infer_iter=it)
    trained = r.member(model__name="transformer", model__steps=None)  # not a construction
    r.add(trained, 1e-30, position=20)
    summary = construction_figure(r.frame(), tmp_path, n_boot=N_BOOT)
    assert summary["max_rel_diff"]["float32"] == pytest.approx(2.0)
    assert summary["max_rel_diff"]["float64"] == pytest.approx(0.1)
    assert summary["floor"]["construction float32"] == pytest.approx(1.5e-8)
    assert summary["floor"]["GD float64"] == pytest.approx(1e-8)
    assert set(summary["table"]["line"]) == {"construction float32", "construction float64",
                                             "GD float32", "GD float64"}
    gd_line = summary["table"].filter(pl.col("line") == "GD float32")
    assert gd_line["iter"].to_list() == list(iters) and gd_line["n"].to_list() == [8] * 8
    assert png_written(summary)


# ----------------------------------------------------------------------- explicit_gradient


def test_explicit_gradient_depth_and_final_values(tmp_path):
    r = Rows()
    iters = range(1, 6)

    def w_curve(m, base):
        for it in iters:
            r.add(m, base * 10.0 ** -it, metric="w_mse", infer_iter=it)

    for mixer in ("attention", "baseconv"):
        for ln in (True, False):
            for depth in (1, 2, 3, 4):
                for seed in (0, 1):
                    m = r.member(seed=seed, model__mixer=mixer, model__layer_norm=ln,
                                 model__depth=depth, task__target="grad")
                    r.add(m, (10.0 if mixer == "attention" else 1.0) / depth * (1 + ln))
                    w_curve(m, 1e3 * depth + (1 if mixer == "attention" else 0) + 10 * ln)
                    r.add(m, 1e-3, metric="w_mse", predictor="gd_float64", infer_iter=40)
    for cl, depth, seeds in ((1, 3, (0, 1)), (2, 3, (0,)), (1, 2, (0,))):
        for seed in seeds:
            m = r.member(seed=seed, model__mixer="baseconv", model__layer_norm=False,
                         model__depth=depth, model__construction_layers=cl)
            r.add(m, 1e-20)  # frozen members stay out of the left panel
            w_curve(m, 10.0 ** -cl)
    summary = explicit_gradient_figure(r.frame(), tmp_path, n_boot=N_BOOT)
    assert summary["depth"] == 3  # most common depth of the frozen members
    final = summary["final"]
    assert final["baseconv, LN off"] == pytest.approx(3e3 * 1e-5)
    assert final["attention, LN on"] == pytest.approx((3e3 + 11) * 1e-5)
    assert final["baseconv, LN off, frozen k=1"] == pytest.approx(1e-1 * 1e-5)
    assert final["baseconv, LN off, frozen k=2"] == pytest.approx(1e-2 * 1e-5)
    assert final["GD float64"] == pytest.approx(1e-3)
    left = summary["table_left"]
    assert set(left["hue"]) == {"attention, LN on", "attention, LN off", "baseconv, LN on",
                                "baseconv, LN off"}
    assert left.filter((pl.col("hue") == "baseconv, LN off") & (pl.col("x") == 4.0))[
        "median"].item() == pytest.approx(0.25)
    assert left["median"].min() > 1e-3  # no frozen member
    assert summary["table_right"]["x"].max() == 40
    assert summary["fit"] is None and png_written(summary)


def test_explicit_gradient_without_frozen_members_uses_largest_depth(tmp_path):
    r = Rows()
    for depth in (1, 2):
        m = r.member(model__depth=depth)
        r.add(m, 1.0 / depth)
        r.add(m, 1e-4 * depth, metric="w_mse", infer_iter=3)
    summary = explicit_gradient_figure(r.frame(), tmp_path, n_boot=N_BOOT)
    assert summary["depth"] == 2
    assert summary["final"] == {"attention, LN on": pytest.approx(2e-4)}


# ------------------------------------------------------------------------------- errors


def test_missing_columns_and_members_name_the_problem(tmp_path):
    r = depth_rows(level, depths=(1, 2), mixers=("attention",))
    frame = r.frame()
    with pytest.raises(ValueError, match="precision_depth figure: .*'model.depth'"):
        FIGURES["precision_depth"](frame.drop("model.depth"), tmp_path, name="precision_depth")
    with pytest.raises(ValueError, match="'task.op'"):
        FIGURES["primitives_depth"](frame.drop("task.op"), tmp_path, name="primitives_depth")
    with pytest.raises(ValueError, match="icl_prefix figure: .*'task.dim'"):
        icl_prefix_figure(frame.drop("task.dim"), tmp_path)
    with pytest.raises(ValueError, match="construction figure: .*'model.steps'"):
        construction_figure(frame.drop("model.steps"), tmp_path)
    with pytest.raises(ValueError, match="'model.construction_layers'"):
        explicit_gradient_figure(frame.drop("model.construction_layers"), tmp_path)
    with pytest.raises(ValueError, match="construction figure: no final 'mse' rows of a "
                                         "'baseconv_gd'"):
        construction_figure(frame, tmp_path)
    failed = frame.with_columns(pl.lit("failed").alias("status"))
    with pytest.raises(ValueError, match=r"no ok members \(12 excluded"):
        FIGURES["features_depth"](failed, tmp_path, name="features_depth")
    assert not list(tmp_path.iterdir())  # nothing drawn on the way
