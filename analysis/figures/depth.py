"""The `depth` figure: a study's final MSE against model depth, a band over seeds, the fitted
law MSE(depth) (analysis.fitting.fit) and the reference predictors' levels."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.fitting.fit import Fit, fit_scaling
from analysis.plotting import (
    COLORS,
    band,
    draw_fit,
    draw_references,
    fit_label,
    hollow,
    log_axes,
    regime_note,
    save,
    study_title,
    style,
)
from analysis.reading.frames import (
    cell_regime,
    final_eval,
    labels,
    levels,
    member_counts,
    var_y,
)
from analysis.reading.regime import regime_notes

MIN_FIT_DEPTHS = 3
COLUMNS = ("model.depth",)  # the depth figure's, besides SHARED_COLUMNS
NARROW_COLUMNS = True  # it reads no HELPER_COLUMNS (tests/test_sweep_e2e.py, test_figure_columns.py)


def depth_table(final: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(seed-level: depth, seed, median, q25, q75; depth-level: medians over seeds)."""
    model = final.filter(pl.col("predictor") == "model")
    seeds, depths = levels(model.with_columns(pl.col("model.depth").cast(pl.Float64)
                                              .alias("depth")), ["depth"])
    return seeds, depths.rename({"n": "n_seeds"})


def _fit_depth(seeds: pl.DataFrame, n_boot: int, seed: int) -> tuple[Fit | None, str]:
    n_depths = seeds["depth"].n_unique()
    if n_depths < MIN_FIT_DEPTHS:
        return None, f"no fit: {n_depths} depth(s), a fit needs >= {MIN_FIT_DEPTHS}"
    points = seeds.filter(pl.col("median") > 0)
    try:
        fit = fit_scaling(points["depth"].to_numpy(), points["median"].to_numpy(),
                          points["seed"].to_numpy(), form="saturating", n_boot=n_boot, seed=seed)
    except (ValueError, RuntimeError) as exc:
        return None, f"no fit: {exc}"
    fit.claim_sign = 1  # the claim: depth helps (b > 0)
    return fit, ""


def depth_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "depth",
                 n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """Query MSE vs depth (log-log): median over seeds of the per-prompt median, IQR band,
    OLS/GD and trivial-predictor references, and a saturating fit c + a L^-b over seed-level
    points (claim: b > 0; drawn as unresolved otherwise). Depths where the model is not in the
    learned regime get a ring, and the panel says "not testable at this scale" when no
    depth is."""
    if "model.depth" not in rows.columns:
        raise ValueError("depth figure: rows lack the 'model.depth' column")
    ok, excluded = member_counts(rows)
    final = final_eval(rows)
    seeds, depths = depth_table(final)
    if depths.height == 0:
        raise ValueError(f"depth figure: no final 'mse' rows of ok members ({excluded} excluded)")
    fit, note = _fit_depth(seeds, n_boot, seed)
    regime = cell_regime(final.with_columns(pl.col("model.depth").cast(pl.Float64).alias(
        "depth")), ["depth"])

    style()
    fig, ax = plt.subplots()
    log_axes(ax)
    x, y = depths["depth"].to_numpy(), depths["median"].to_numpy()
    band(ax, x, y, depths["q25"], depths["q75"], "transformer (median over seeds; band: "
         "IQR over prompts)", COLORS["model"])
    out = regime.filter(pl.col("learned").not_())
    hollow(ax, out["depth"], out["model"], COLORS["model"])
    if fit is not None:
        draw_fit(ax, fit, (x.min(), x.max()), label=fit_label(fit, "fit c + a L$^{-b}$"))
    refs = draw_references(ax, final)
    if note:
        ax.text(0.02, 0.02, note, transform=ax.transAxes, fontsize=7, color="0.3")
    regime_note(ax, regime_notes(regime, x="depth"))
    ax.set_xticks(x)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("query MSE (per-prompt median)")
    ax.set_title(study_title(rows, labels(rows, "dtype")), fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = save(fig, out_dir, name)
    plt.close(fig)

    best = int(np.argmin(y))
    best_depth = float(x[best])
    return {
        "fit": fit, "note": note, "excluded": excluded, "ok": ok, "paths": paths,
        "best_depth": int(best_depth) if best_depth.is_integer() else best_depth,
        "best_median_mse": float(y[best]), "var_y": var_y(rows),
        "references": refs, "regime": regime,
        "ax": ax, "x": x, "y": y, "table": depths,
    }
