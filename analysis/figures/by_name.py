"""Figures by name (`Study.figure` in a sweep file names one): fn(rows, out_dir) -> summary dict.

The registry `FIGURES` imports the figure modules (precision, construction,
retrieval, deep, deep_depth, deep_scaling, algoformer,
lsa), never the reverse; it also holds the `depth` figure. The shared data steps (which
members count, each member's final evaluation, the reference predictors' levels) live in
analysis.reading.frames.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.figures.algoformer import ALGOFORMER_FIGURES
from analysis.figures.construction import CONSTRUCTION_FIGURES
from analysis.figures.deep import DEEP_FIGURES
from analysis.figures.deep_depth import DEPTH_FIGURES
from analysis.figures.deep_scaling import SCALING_FIGURES
from analysis.figures.lsa import lsa_convergence_figure, lsa_scaling_figure
from analysis.figures.precision import PRECISION_FIGURES
from analysis.figures.retrieval import RETRIEVAL_FIGURES
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
    HELPER_COLUMNS,
    SHARED_COLUMNS,
    STATS,
    cell_regime,
    final_eval,
    labels,
    member_counts,
    var_y,
)
from analysis.reading.regime import regime_notes

MIN_FIT_DEPTHS = 3
COLUMNS = ("model.depth",)  # the depth figure's, besides SHARED_COLUMNS
NARROW_COLUMNS = True  # it reads no HELPER_COLUMNS (tests/test_sweep_e2e.py, test_figure_columns.py)


def depth_table(final: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(seed-level: depth, seed, median, q25, q75; depth-level: medians over seeds)."""
    model = final.filter((pl.col("predictor") == "model") & pl.col("statistic").is_in(STATS))
    model = model.with_columns(pl.col("model.depth").cast(pl.Float64).alias("depth"))
    seeds = (
        model.group_by("depth", "seed", "statistic")
        .agg(pl.col("value").median(), pl.col("config_hash").n_unique().alias("n_configs"))
    )
    if seeds.height and seeds["n_configs"].max() > 1:
        warnings.warn("several configs share a (depth, seed): they differ in other columns; "
                      "taking the median over them", stacklevel=3)
    seeds = seeds.pivot(on="statistic", index=["depth", "seed"], values="value")
    seeds = seeds.with_columns(
        [pl.lit(None, pl.Float64).alias(s) for s in STATS if s not in seeds.columns]
    ).sort("depth", "seed")
    depths = seeds.group_by("depth").agg(
        pl.col("median").median(), pl.col("q25").median(), pl.col("q75").median(),
        pl.col("seed").n_unique().alias("n_seeds"),
    ).sort("depth")
    return seeds, depths


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


# name -> fn(rows, out_dir, name=..., n_boot=..., storage=...) -> summary (see depth_figure)
FIGURES: dict[str, Callable[..., dict]] = {
    "depth": depth_figure,
    "lsa_convergence": lsa_convergence_figure,
    "lsa_scaling": lsa_scaling_figure,
    # icl_prefix, precision_depth, primitives_depth, multiply_width, multiply_heads,
    # multiply_mlp, multiply_steps, features_depth
    **PRECISION_FIGURES,
    **CONSTRUCTION_FIGURES,  # construction, explicit_gradient
    # str_sample_complexity, str_heads, str_attention (sparse token retrieval)
    **RETRIEVAL_FIGURES,
    **DEEP_FIGURES,  # deep_shift (Wu et al. 2024)
    **DEPTH_FIGURES,  # deep_depth (Wu et al. 2024)
    **SCALING_FIGURES,  # deep_scaling (its scale-up)
    # algo_examples, algo_loops, algo_layers_heads, algo_newton (AlgoFormer)
    **ALGOFORMER_FIGURES,
}


def figure_columns(fn) -> tuple[str, ...]:
    """The columns figure `fn` reads: the shared ones (analysis.reading.frames.SHARED_COLUMNS, and
    HELPER_COLUMNS unless its module sets NARROW_COLUMNS), its module's COLUMNS and, for a
    figure made with functools.partial (mse_vs_axis), the columns its arguments name (x, hue,
    facet). Every figure module declares COLUMNS."""
    func, named = fn, []
    while isinstance(func, partial):
        named += [v for value in func.keywords.values()
                  for v in (value if isinstance(value, (list, tuple)) else [value])
                  if isinstance(v, str) and "." in v]
        func = func.func
    module = sys.modules[func.__module__]
    helpers = () if getattr(module, "NARROW_COLUMNS", False) else HELPER_COLUMNS
    return tuple(dict.fromkeys([*SHARED_COLUMNS, *helpers, *module.COLUMNS, *named]))


# The columns each figure reads: regenerate reads only these from the store (projection
# pushdown; a study of 100,000 members then fits in memory), with the study's grid axes and
# figure arguments. A module's COLUMNS must name every config column its figures (and the
# helpers they call) look at, including those only checked for
# (tests/test_figure_columns.py compares each figure from these columns and from all).
FIGURE_COLUMNS: dict[str, tuple[str, ...]] = {name: figure_columns(fn)
                                              for name, fn in FIGURES.items()}
# Figures drawn the same from strings read as Categorical (4 bytes a row where a config's
# value repeats on each of its rows): what keeps 100,000 members of a study within 2 GB. Not
# every figure: a sort or tie-break on a Categorical follows its categories, not the text, and
# string operations (.str) refuse it (tests/test_figure_columns.py checks those listed).
CATEGORICAL_FIGURES = frozenset({"depth"})
