"""The figure toolkit (fitted curves with their CI in the legend, median/IQR over seeds, log
axes, PNG + PDF) and regeneration of a study that has no registered figure."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest
from matplotlib.collections import PolyCollection

from analysis import regenerate as regen
from analysis.fit import fit_scaling
from analysis.plotting import (
    draw_fit,
    fit_label,
    log_axes,
    power_reference,
    reference_line,
    save,
    seed_band,
    style,
)
from icl_core import catalog
from icl_core.store import Store, rows_table

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


def test_seed_band_plots_the_median_and_iqr_over_seeds():
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
    assert (table["q25"] <= table["median"]).all() and (table["median"] <= table["q75"]).all()
    assert table["n_seeds"].to_list() == [5] * GRID.size
    ref = reference_line(ax, 1e-3, "OLS")
    guide = power_reference(ax, 1.0, 1.0, -1.0, "slope -1", x_range=(1.0, 64.0))
    assert ref.get_label() == "OLS" and guide.get_ydata()[-1] == pytest.approx(1 / 64)
    assert reference_line(ax, 0.0, "zero on a log axis") is None
    plt.close(fig)


SWEEP_FILE = '''
from icl_core.sweep import Preset, Study, Sweep

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
    code = regen.main(["generic_sweep", "--storage", str(tmp_path / "store"), "--out", str(out),
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
