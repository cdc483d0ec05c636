"""Analysis: the scaling-law fitter, the row reader, the depth figure, regeneration.

Stores are built by hand with icl_core.storage.store (no Ray, no training) except the one `slow`
end-to-end test, which trains the smoke preset's members.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from analysis.figures.depth import depth_figure
from analysis.fitting.fit import fit_scaling
from analysis.fitting.forms import FORMS
from analysis.reading.store import MissingResults, load_rows
from icl.catalog import SWEEPS_DIR
from icl.commands.regenerate import main as regenerate_main
from icl.regenerate_from_sweeps import load_sweep, regenerate, sweep_names
from icl_core.storage.store import Store, rows_table

SWEEP, STUDY = "depth_scaling", "least_squares"
DEPTHS, SEEDS, STEPS = (1, 2, 4, 8), (0, 1, 2), 100
A, B, C = 2.0, 1.3, 1e-6


def saturating_data(a=A, b=B, c=C, sigma=0.05, n_seeds=5, rng_seed=0):
    """x = depths 1..64 (geometric), n_seeds seeds, multiplicative log-normal noise."""
    rng = np.random.default_rng(rng_seed)
    depths = 2.0 ** np.arange(7)
    x = np.tile(depths, n_seeds)
    groups = np.repeat(np.arange(n_seeds), depths.size)
    y = (c + a * x ** -b) * np.exp(sigma * rng.standard_normal(x.size))
    return x, y, groups


@pytest.fixture(scope="module")
def saturating_fit():
    return fit_scaling(*saturating_data(), form="saturating", n_boot=200, seed=0)


# ---------------------------------------------------------------------------------- fitter


def test_fit_recovers_saturating_parameters(saturating_fit):
    fit = saturating_fit
    lo, hi = fit.ci["b"]
    assert lo <= B <= hi
    assert 0.005 < hi - lo < 0.3  # a real interval, and an informative one
    assert abs(fit.params["a"] - A) / A < 0.1
    assert fit.params["c"] >= 0 and fit.ci["c"][0] >= 0
    assert fit.rms_log_residual == pytest.approx(0.05, rel=0.4)  # the noise level
    assert fit.n_points == 35 and fit.n_groups == 5 and fit.n_boot == 200
    assert fit.decades == pytest.approx(math.log10(64))
    row = fit.to_row()
    assert {"form", "a", "b", "c", "b_lo", "b_hi", "rms_log_residual", "decades"} <= set(row)
    np.testing.assert_allclose(fit.predict([1.0, 8.0]),
                               fit.params["c"] + fit.params["a"] * np.array([1.0, 8.0]) ** -fit.params["b"])


def test_fit_ci_excludes_a_wrong_exponent(saturating_fit):
    lo, hi = saturating_fit.ci["b"]
    assert not lo <= 0.65 <= hi


def test_fit_flags_a_floor_the_data_cannot_see(saturating_fit):
    """c = 1e-6 lies far below every y (>= 9e-3): the fit says so instead of claiming it."""
    assert any("floor unresolved" in note for note in saturating_fit.notes)
    assert "(unresolved)" in saturating_fit.label()
    assert "floor unresolved" in saturating_fit.to_row()["fit_notes"]


def test_misspecified_form_shows_in_residuals_and_exponent():
    """Power law fitted to data with a visible floor: worse residuals, exponent biased low."""
    x, y, groups = saturating_data(c=1e-2)
    good = fit_scaling(x, y, groups, form="saturating", n_boot=0)
    bad = fit_scaling(x, y, groups, form="power", n_boot=100)
    assert good.params["c"] == pytest.approx(1e-2, rel=0.2) and good.notes == []
    assert bad.rms_log_residual > 2 * good.rms_log_residual
    assert bad.ci["b"][1] < B


def test_power_form_recovers_exponent():
    x, y, groups = saturating_data(a=3.0, b=0.7, c=0.0)
    fit = fit_scaling(x, y, groups, form="power", n_boot=200, seed=1)
    lo, hi = fit.ci["b"]
    assert lo <= 0.7 <= hi and hi - lo < 0.2
    assert set(fit.params) == {"a", "b"}
    assert "power" in FORMS and "saturating" in FORMS


def test_fit_excludes_bad_points_and_rejects_unknown_forms():
    x, y, groups = saturating_data()
    y[3] = 0.0
    fit = fit_scaling(x, y, groups, n_boot=0)
    assert fit.excluded == [(x[3], 0.0, "non-positive y")] and fit.n_points == x.size - 1
    with pytest.raises(ValueError, match="unknown"):
        fit_scaling(x, np.abs(y) + 1, groups, form="cubic", n_boot=0)


# ------------------------------------------------------------------------------ row store


def write_member(store: Store, study: str, h: str, rows: list[dict], status: str = "ok",
                 sweep: str = SWEEP, **config) -> None:
    constants = {"sweep": sweep, "study": study, "trial_id": h, "member": 0, "config_hash": h,
                 "status": status, "reason": None if status == "ok" else f"{status} on purpose",
                 **config}
    store.write_rows(store.rows_path(sweep, study, h, status), rows_table(rows, constants))


def test_load_rows_reads_all_studies_and_skips_corrupt(tmp_path, capsys):
    store = Store(str(tmp_path))
    row = {"metric": "mse", "statistic": "median", "value": 0.5, "step": 10, "predictor": "model"}
    write_member(store, "a", "h1", [row, {**row, "statistic": "q25"}], **{"model.depth": 2, "seed": 0})
    write_member(store, "a", "h2", [row], **{"model.depth": None, "seed": 1, "train.eps": 1e-8})
    write_member(store, "a", "h3", [{"metric": "steps_completed", "value": 0.0, "step": 0}],
                 status="failed", **{"model.depth": 4, "seed": 0})
    write_member(store, "b", "h4", [row], **{"model.width": 32, "seed": 0})
    corrupt = Path(store.rows_path(SWEEP, "a", "zzcorrupt"))
    corrupt.write_bytes(b"PAR1 this is not parquet" * 10)

    with pytest.warns(UserWarning, match="zzcorrupt"):
        rows = load_rows(str(tmp_path), SWEEP)
    assert rows.height == 5
    assert sorted(rows["config_hash"].unique()) == ["h1", "h2", "h3", "h4"]
    assert {"model.depth", "model.width", "train.eps", "status", "reason"} <= set(rows.columns)
    assert rows.schema["model.depth"] == pl.Int64  # all-null in one file, typed in others
    assert set(rows["status"]) == {"ok", "failed"}
    assert "1 skipped" in capsys.readouterr().out

    with pytest.warns(UserWarning, match="zzcorrupt"):
        only_a = load_rows(str(tmp_path), SWEEP, "a")
    assert set(only_a["study"]) == {"a"}
    assert set(load_rows(str(tmp_path), SWEEP, "b")["study"]) == {"b"}


def test_missing_results_names_the_command(tmp_path, capsys):
    with pytest.raises(MissingResults, match=r"python sweeps/depth_scaling\.py"):
        load_rows(str(tmp_path / "empty"), SWEEP)
    with pytest.raises(MissingResults, match="--study least_squares"):
        load_rows(str(tmp_path), SWEEP, STUDY)
    assert regenerate_main([SWEEP, "--storage", str(tmp_path), "--out", str(tmp_path / "figs"),
                            "--from-sweeps"]) == 2
    assert "python sweeps/depth_scaling.py" in capsys.readouterr().err


# ---------------------------------------------------------------------------- depth figure


def true_median(depth: float, seed: int) -> float:
    """Per-prompt median MSE of a synthetic member: saturating in depth, seed-level noise."""
    noise = np.exp(0.05 * np.sin(3.0 * depth + seed))
    return float((1e-4 + A * depth ** -B) * noise)


def member_rows(median: float) -> list[dict]:
    base = {"metric": "mse", "position": 20, "prompt_len": 20, "test_dist": "train"}
    out = [{"metric": "train_loss", "statistic": "mean", "value": 1.0, "step": STEPS,
            "predictor": "model"}]
    for step, scale in ((STEPS // 2, 10.0), (STEPS, 1.0)):  # an earlier evaluation is worse
        for stat, factor in (("mean", 2.0), ("median", 1.0), ("q25", 0.3), ("q75", 3.0)):
            out.append({**base, "statistic": stat, "value": median * factor * scale,
                        "step": step, "predictor": "model"})
    refs = [("ols_float32", None, 1e-13), ("ols_float64", None, 1e-30),
            ("gd_float32", 10, 1e-2), ("gd_float32", 100, 1e-9),
            ("gd_float64", 10, 1e-2), ("gd_float64", 100, 1e-12)]
    for predictor, iters, value in refs:
        out.append({**base, "statistic": "median", "value": value, "step": STEPS,
                    "predictor": predictor, "infer_iter": iters})
    return out


@pytest.fixture(scope="module")
def depth_store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("store")
    store = Store(str(root))
    config = {"task.dim": 5, "task.noise_std": 0.0, "dtype": "float32", "train.steps": STEPS}
    for depth in DEPTHS:
        for seed in SEEDS:
            write_member(store, STUDY, f"d{depth}s{seed}", member_rows(true_median(depth, seed)),
                         **config, **{"model.depth": depth, "seed": seed})
    # Excluded members: a diverged one that looks best, a failed one.
    write_member(store, STUDY, "diverged16", member_rows(1e-12), status="diverged",
                 **config, **{"model.depth": 16, "seed": 0})
    write_member(store, STUDY, "failed32", [{"metric": "steps_completed", "value": 0.0}],
                 status="failed", **config, **{"model.depth": 32, "seed": 0})
    return str(root)


def test_depth_figure(depth_store, tmp_path):
    rows = load_rows(depth_store, SWEEP, STUDY)
    summary = depth_figure(rows, tmp_path, n_boot=100)
    assert [p.name for p in summary["paths"]] == ["depth.png", "depth.pdf"]
    assert all(p.stat().st_size > 0 for p in summary["paths"])
    assert summary["excluded"] == 2 and summary["ok"] == 12
    assert summary["best_depth"] == 8
    expected = [np.median([true_median(d, s) for s in SEEDS]) for d in DEPTHS]
    np.testing.assert_allclose(summary["y"], expected, rtol=1e-12)  # final step, not step 50
    assert summary["best_median_mse"] == pytest.approx(expected[-1])
    assert summary["var_y"] == 5.0
    assert summary["references"]["gd_float32"] == 1e-9  # the largest GD iteration count
    assert summary["references"]["ols_float64"] == 1e-30

    ax = summary["ax"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    model = [line for line in ax.get_lines() if line.get_label().startswith("transformer")]
    assert len(model) == 1
    np.testing.assert_array_equal(model[0].get_xdata(), DEPTHS)
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(label.startswith("GD float32 (100 it.)") for label in labels)
    assert any("b = " in label for label in labels)  # the fitted curve with its exponent
    assert ax.get_title() == "Liu et al. Fig 2: least squares, query MSE vs depth (float32)"

    fit = summary["fit"]
    assert fit is not None and fit.n_points == 12 and fit.n_groups == 3
    assert 1.0 < fit.params["b"] < 1.6


def test_depth_figure_without_enough_depths(depth_store, tmp_path):
    rows = load_rows(depth_store, SWEEP, STUDY).filter(pl.col("model.depth") <= 2)
    summary = depth_figure(rows, tmp_path, name="two")
    assert summary["fit"] is None and "no fit" in summary["note"]
    assert (tmp_path / "two.png").exists() and summary["best_depth"] == 2


def test_regenerate_writes_figures_and_fit_report(depth_store, tmp_path, capsys):
    assert load_sweep(SWEEP).study(STUDY).figure == "depth"
    out = tmp_path / "figs"
    (summary,) = regenerate(SWEEP, storage=depth_store, out=str(out), n_boot=50)
    folder = out / SWEEP / STUDY
    for name in ("depth.png", "depth.pdf", "fits.parquet", "fits.md"):
        assert (folder / name).exists()
    fits = pl.read_parquet(folder / "fits.parquet")
    assert fits.height == 1 and fits["form"][0] == "saturating"
    assert fits["b"][0] == pytest.approx(summary["fit"].params["b"])
    assert fits["b_lo"][0] <= fits["b"][0] <= fits["b_hi"][0]
    assert "| sweep | study |" in (folder / "fits.md").read_text()
    printed = capsys.readouterr().out
    assert str(folder / "depth.png") in printed and "b = " in printed


def test_regenerate_loads_every_sweep_file_as_the_command_line_does(monkeypatch, tmp_path,
                                                                    capsys):
    """Without the test suite's sys.path (conftest puts sweeps/ on it), sweep files that
    import shared helpers (sweeps/bases.py) still load; helpers are not listed as sweeps."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(SWEEPS_DIR)])
    for name in [m for m in sys.modules if m == "bases" or m.startswith("icl_sweeps_")]:
        monkeypatch.delitem(sys.modules, name)
    names = sweep_names()
    assert SWEEP in names and "bases" not in names
    for name in names:
        assert load_sweep(name).name == name  # rows are stored under SWEEP.name
    assert regenerate_main(["--all", "--storage", str(tmp_path / "none"), "--from-sweeps"]) == 2
    assert "python sweeps/depth_scaling.py" in capsys.readouterr().err


def test_regenerate_all_from_the_store_skips_a_pools_own_folder(depth_store, tmp_path, capsys):
    """A store a pool of several sweep files ran into holds `_pool/tune` (its Tune state):
    `--all` without the sweep files regenerates the store's sweeps and reads no `_pool`
    sweep (it stopped there with exit 2 before)."""
    import shutil

    store_main = regenerate_main
    from icl_core.running.study_report import write_manifest

    store = tmp_path / "store"
    shutil.copytree(depth_store, store)
    sweep = load_sweep(SWEEP)
    write_manifest(Store(str(store)), sweep, sweep.study(STUDY))  # as a sweep run writes it
    (store / "_pool" / "tune").mkdir(parents=True)
    out = tmp_path / "figs"
    assert store_main(["--all", "--storage", str(store), "--out", str(out), "--n-boot", "20"]) == 0
    assert (out / SWEEP / STUDY / "depth.png").exists()
    assert "_pool" not in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_sweep_end_to_end(tmp_path):
    """Train the smoke preset's members, then regenerate its figure from the real rows."""
    from icl_core.running.trial import TrialSpec, run_trial

    study = load_sweep(SWEEP).study(STUDY)
    for member in study.members("smoke"):
        run_trial(TrialSpec(SWEEP, STUDY, str(tmp_path / "store"), [member.to_dict()]))
    (summary,) = regenerate(SWEEP, storage=str(tmp_path / "store"), out=str(tmp_path / "figs"))
    assert summary["ok"] == 4 and summary["excluded"] == 0
    assert sorted(summary["x"]) == [1, 2] and summary["fit"] is None
    assert summary["references"]["ols_float64"] < summary["references"]["ols_float32"]
    assert load_sweep(SWEEP) is sys.modules["sweeps.depth_scaling"].SWEEP  # the package's
