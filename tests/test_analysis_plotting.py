"""The figure toolkit (fitted curves with their CI in the legend, median and min–max band over
seeds, log axes, PNG + PDF) and regeneration of a study that has no registered figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from analysis.fitting.fit import fit_scaling
from analysis.plotting import (
    draw_fit,
    fit_label,
    log_axes,
    power_reference,
    prompt_iqr,
    reference_line,
    save,
    seed_band,
    seed_caption,
    seed_level,
    style,
)
from icl import catalog
from icl.commands.regenerate import main as regenerate_main
from icl_core.storage.store import Store, rows_table

GRID = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])


@pytest.fixture(scope="module")
def power_fit():
    rng = np.random.default_rng(0)
    x = np.tile(GRID, 4)
    y = 3.0 * x**-0.7 * np.exp(0.05 * rng.standard_normal(x.size))
    return fit_scaling(x, y, np.repeat(np.arange(4), GRID.size), form="power", n_boot=200)


def test_draw_fit_solid_inside_dashed_outside_with_band(power_fit, tmp_path):
    style()
    fig, ax = plt.subplots()
    log_axes(ax)
    line = draw_fit(ax, power_fit, (0.25, 1024.0))
    assert line.get_label() == fit_label(power_fit)
    lo, hi = power_fit.ci["b"]
    assert f"b = {power_fit.params['b']:.2f} [{lo:.2f}, {hi:.2f}]" in line.get_label()
    assert line.get_label().startswith("fit a x^-b: ")
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    inside = np.isfinite(x)
    assert x[inside].min() >= 1.0 - 1e-9 and x[inside].max() <= 64.0 + 1e-9
    np.testing.assert_allclose(y[inside], power_fit.predict(x[inside]))
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 2  # extrapolation below 1 and above 64
    assert min(d.get_xdata().min() for d in dashed) == pytest.approx(0.25)
    assert max(d.get_xdata().max() for d in dashed) == pytest.approx(1024.0)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    b_lo, b_hi = power_fit.predict_band(np.array([8.0]))
    assert b_lo[0] < power_fit.predict(8.0) < b_hi[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    paths = save(fig, tmp_path, "fit")
    plt.close(fig)
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size for p in paths)


def test_seed_band_plots_the_median_and_min_max_over_seeds():
    rng = np.random.default_rng(1)
    frame = pl.DataFrame({"depth": np.repeat(GRID, 5), "seed": np.tile(np.arange(5), GRID.size),
                          "value": rng.lognormal(size=GRID.size * 5)})
    style()
    fig, ax = plt.subplots()
    log_axes(ax)
    line, table = seed_band(ax, frame, "depth", "value", label="model")
    np.testing.assert_array_equal(line.get_xdata(), GRID)  # the study grid, in order
    for depth, y in zip(GRID, line.get_ydata(), strict=True):
        values = frame.filter(pl.col("depth") == depth)["value"].to_numpy()
        assert y == pytest.approx(np.median(values))
    assert (table["min"] <= table["q25"]).all() and (table["q75"] <= table["max"]).all()
    assert (table["q25"] <= table["median"]).all() and (table["median"] <= table["q75"]).all()
    assert table["n_seeds"].to_list() == [5] * GRID.size
    assert line.get_label() == "model"
    ref = reference_line(ax, 1e-3, "OLS")
    guide = power_reference(ax, 1.0, 1.0, -1.0, "slope -1", x_range=(1.0, 64.0))
    assert ref.get_label() == "OLS" and guide.get_ydata()[-1] == pytest.approx(1 / 64)
    assert reference_line(ax, 0.0, "zero on a log axis") is None
    plt.close(fig)


# three seeds, the third far off: the band must reach it (an IQR would not)
OUTLIER = pl.DataFrame({"x": [1, 1, 1, 2, 2, 2, 4, 4, 4], "seed": [0, 1, 2] * 3,
                        "value": [1.0, 1.2, 50.0, 0.5, 0.6, 30.0, 0.2, 0.25, 0.01]})


def band_extent(ax) -> dict[float, tuple[float, float]]:
    """{x: (lowest, highest) y} of the shaded bands (PolyCollections) on the axes."""
    out: dict[float, tuple[float, float]] = {}
    for coll in ax.collections:
        if not isinstance(coll, PolyCollection):
            continue
        for path in coll.get_paths():
            for x, y in path.vertices:
                lo, hi = out.get(round(x, 9), (np.inf, -np.inf))
                out[round(x, 9)] = (min(lo, y), max(hi, y))
    return out


def test_seed_band_spans_every_seed_with_one_far_off():
    style()
    fig, ax = plt.subplots()
    line, table = seed_band(ax, OUTLIER, "x", "value", label="model", color="C0")
    extent = band_extent(ax)
    for x, part in OUTLIER.group_by("x"):
        lo, hi = extent[float(x[0])]
        assert lo == pytest.approx(part["value"].min()) and hi == pytest.approx(part["value"].max())
    np.testing.assert_allclose(line.get_ydata(), [1.2, 0.6, 0.2])  # the median, not the mean
    assert table["min"].to_list() == [1.0, 0.5, 0.01] and table["max"].to_list() == [50, 30, 0.25]
    caption = seed_caption(ax)
    assert "line: median over seeds" in caption
    assert "band: min–max over seeds (n = 3)" in caption
    plt.close(fig)


def test_seed_band_with_one_seed_draws_no_band_and_says_so():
    style()
    fig, ax = plt.subplots()
    line, table = seed_band(ax, OUTLIER.filter(pl.col("seed") == 2), "x", "value", label="model")
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert line.get_label() == "model (1 seed)" and table["n_seeds"].to_list() == [1, 1, 1]
    assert seed_caption(ax) == "1 seed: no spread over seeds"
    plt.close(fig)


def test_seed_band_error_bars_span_every_seed_and_the_caption_says_bars():
    style()
    fig, ax = plt.subplots()
    seed_band(ax, OUTLIER, "x", "value", label="model", linestyle="none", errorbars=True)
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 1
    spans = {float(seg[0][0]): (min(seg[:, 1]), max(seg[:, 1])) for seg in bars[0].get_segments()}
    assert spans == {1.0: (1.0, 50.0), 2.0: (0.5, 30.0), 4.0: (pytest.approx(0.01), 0.25)}
    assert "bars: min–max over seeds (n = 3)" in seed_caption(ax)
    plt.close(fig)


def test_seed_band_at_a_lone_x_draws_bars_not_an_empty_band():
    # a band over one x has no width (nothing shows): one x gets error bars, said so
    style()
    fig, ax = plt.subplots()
    ax.set_xscale("log")
    seed_band(ax, OUTLIER.filter(pl.col("x") == 2), "x", "value", label="model")
    lo, hi = ax.get_xlim()  # bars alone once collapsed a log axis onto the point
    assert lo < 2.0 < hi and hi / lo > 2
    (bars,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    (segment,) = bars.get_segments()
    assert (min(segment[:, 1]), max(segment[:, 1])) == (0.5, 30.0)
    assert "bars: min–max over seeds (n = 3)" in seed_caption(ax)
    plt.close(fig)


def test_seed_level_and_prompt_iqr_keep_their_meanings_apart():
    style()
    fig, ax = plt.subplots()
    line, table = seed_level(ax, OUTLIER.filter(pl.col("x") == 1), label="reference", color="k")
    assert line.get_ydata()[0] == pytest.approx(1.2)
    (span,) = [c for c in ax.patches]  # the seed band: an axhspan from min to max
    ys = span.get_path().transformed(span.get_patch_transform()).vertices[:, 1]
    assert min(ys) == pytest.approx(1.0) and max(ys) == pytest.approx(50.0)
    prompt_iqr(ax, [1, 2], [0.5, 0.4], [2.0, 1.5], color="k")
    caption = seed_caption(ax).splitlines()
    assert caption[1] == "band: min–max over seeds (n = 3)"
    assert caption[2] == "ticks (–): IQR over prompts (median over seeds)"
    plt.close(fig)


SWEEP_FILE = '''
from icl.sweep import Preset, Study, Sweep

STUDY = Study(
    name="widths",
    figure=None,
    base={"task": {"name": "linear_regression", "dim": 3, "n_points": 6},
          "model": {"name": "transformer", "width": 8, "depth": 2, "heads": 2},
          "train": {"steps": 20, "batch_size": 8, "report_every": 10, "checkpoint_every": 10},
          "eval": {"n_prompts": 50, "baselines": ["ols"]}},
    grid={"model.width": [8, 16, 32, 64, 128], "seed": [0, 1, 2]},
    presets={"smoke": Preset(grid={"model.width": [8, 16]}), "cpu": Preset(), "gpu": Preset(),
             "paper": Preset()},
)
SWEEP = Sweep("generic_sweep", [STUDY])
'''


def test_study_without_a_figure_still_gets_a_fit_report(tmp_path, monkeypatch, capsys):
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    (sweeps / "generic_sweep.py").write_text(SWEEP_FILE)
    monkeypatch.setattr(catalog, "SWEEPS_DIR", sweeps)  # a real sweep file in a temp folder
    store = Store(str(tmp_path / "store"))
    for width in (8, 16, 32, 64, 128):
        for seed in (0, 1, 2):
            value = (1e-2 + 2.0 * width**-1.0) * math.exp(0.03 * math.sin(width + seed))
            rows = [{"metric": "mse", "statistic": "median", "value": value, "step": 20,
                     "predictor": "model", "position": 5, "test_dist": "train"}]
            h = f"w{width}s{seed}"
            constants = {"sweep": "generic_sweep", "study": "widths", "trial_id": h,
                         "member": 0, "config_hash": h, "seed": seed, "status": "ok",
                         "reason": None, "model.width": width}
            store.write_rows(store.rows_path("generic_sweep", "widths", h),
                             rows_table(rows, constants))
    out = tmp_path / "figs"
    code = regenerate_main(["--from-sweeps", "generic_sweep", "--storage", str(tmp_path / "store"), "--out", str(out),
                       "--n-boot", "50", "--preset", "smoke"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "no figure registered for generic_sweep/widths" in printed
    assert "6 expected (in the plan)" in printed and "15 read" in printed
    folder = out / "generic_sweep" / "widths"
    fits = pl.read_parquet(folder / "fits.parquet")
    assert fits["form"][0] == "saturating" and fits["delta_aic"][0] == 0.0
    assert set(fits["form"]) == {"power", "saturating", "broken_power"}
    assert fits["delta_aic"].is_sorted()
    assert (fits["trials_read"] == 15).all() and (fits["axis"] == "model.width").all()
    assert fits["b_lo"][0] <= 1.0 <= fits["b_hi"][0]
    md = (folder / "fits.md").read_text()
    assert "| sweep | study | figure | form | status | estimates |" in md and "AIC" in md
    assert fits["status"][0] == "ok"  # b ~ 1 resolved, of the claimed sign
    assert not any(p.suffix == ".png" for p in folder.iterdir())


def test_a_figure_title_names_the_scale_its_rows_are_at():
    """`regenerate --scale` adds a `scale` column; every title built by study_title shows it
    (a reduced-scale figure never reads as the paper's)."""
    from analysis.plotting import study_title

    rows = pl.DataFrame({"sweep": ["deep_optimizers"], "study": ["teacher_shift"]})
    plain = study_title(rows)
    assert "[" not in plain
    scaled = rows.with_columns(pl.lit("reduced: d = 4").alias("scale"))
    assert study_title(scaled) == f"{plain} [reduced: d = 4]"
    assert study_title(scaled, "float32") == f"{plain} (float32) [reduced: d = 4]"
