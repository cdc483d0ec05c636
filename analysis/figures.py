"""Figures by name (`Study.figure` in a sweep file names one): fn(rows, out_dir) -> summary dict.

Shared steps live here too: which members count (status "ok"), the final evaluation of each
member (its largest step, the query position) and the reference predictors' levels.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.figures_lsa import lsa_convergence_figure, lsa_scaling_figure
from analysis.fit import Fit, fit_scaling
from analysis.plotting import COLORS, band, draw_fit, log_axes, reference_line, save, style

# (predictor, legend label, line style): the classical references on the same test prompts.
REFERENCES = (
    ("ols_float32", "OLS float32", ":"),
    ("ols_float64", "OLS float64", ":"),
    ("gd_float32", "GD float32", "--"),
    ("gd_float64", "GD float64", "--"),
)
MIN_FIT_DEPTHS = 3
STATS = ("median", "q25", "q75")  # statistics over test prompts a band needs


def member_counts(rows: pl.DataFrame) -> tuple[int, int]:
    """(members with status "ok", members excluded: diverged or failed)."""
    status = rows.group_by("config_hash").agg(pl.col("status").first())["status"]
    ok = int((status == "ok").sum())
    return ok, status.len() - ok


def final_eval(rows: pl.DataFrame, metric: str = "mse", test_dist: str = "train") -> pl.DataFrame:
    """Rows of `ok` members at each member's last evaluated step and its last position
    (the query after all in-context examples)."""
    out = rows.filter(
        (pl.col("status") == "ok") & (pl.col("metric") == metric)
        & (pl.col("test_dist") == test_dist)
    )
    out = out.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    position = pl.col("position").fill_null(-1)
    return out.filter(position == position.max().over("config_hash"))


def reference_levels(final: pl.DataFrame) -> dict[str, tuple[float, int | None]]:
    """{predictor: (per-prompt median MSE, GD iterations or None)} over members; iterative
    predictors at their largest iteration count (the converged reference)."""
    names = [name for name, _, _ in REFERENCES]
    it = pl.col("infer_iter").fill_null(-1)
    refs = final.filter(pl.col("predictor").is_in(names) & (pl.col("statistic") == "median"))
    refs = refs.filter(it == it.max().over("predictor"))
    levels = refs.group_by("predictor").agg(
        pl.col("value").median(), pl.col("infer_iter").max()
    )
    return {r["predictor"]: (r["value"], r["infer_iter"]) for r in levels.iter_rows(named=True)}


def var_y(rows: pl.DataFrame) -> float:
    """Var(y) of linear regression with x, w ~ N(0, I_D): D (+ noise_std^2); NaN if unknown."""
    ok = rows.filter(pl.col("status") == "ok")
    if "task.dim" not in ok.columns:
        return math.nan
    dims = ok["task.dim"].drop_nulls().unique().to_list()
    noises = [0.0]
    if "task.noise_std" in ok.columns:
        noises = ok["task.noise_std"].drop_nulls().unique().to_list() or [0.0]
    if len(dims) != 1 or len(noises) != 1:
        warnings.warn(f"Var(y): members differ (task.dim {dims}, noise_std {noises})", stacklevel=2)
        return math.nan
    return float(dims[0]) + float(noises[0]) ** 2


def _labels(rows: pl.DataFrame, column: str) -> str:
    if column not in rows.columns:
        return "?"
    return "/".join(str(v) for v in sorted(rows[column].drop_nulls().unique().to_list())) or "?"


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
    return fit, ""


def depth_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "depth",
                 n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """Query MSE vs depth (log-log): median over seeds of the per-prompt median, IQR band,
    OLS/GD references, and a saturating fit c + a L^-b over seed-level points."""
    if "model.depth" not in rows.columns:
        raise ValueError("depth figure: rows lack the 'model.depth' column")
    ok, excluded = member_counts(rows)
    final = final_eval(rows)
    seeds, depths = depth_table(final)
    if depths.height == 0:
        raise ValueError(f"depth figure: no final 'mse' rows of ok members ({excluded} excluded)")
    fit, note = _fit_depth(seeds, n_boot, seed)
    refs = reference_levels(final)

    style()
    fig, ax = plt.subplots()
    log_axes(ax)
    x, y = depths["depth"].to_numpy(), depths["median"].to_numpy()
    band(ax, x, y, depths["q25"], depths["q75"], "transformer (median, IQR over prompts)",
         COLORS["model"])
    if fit is not None:
        draw_fit(ax, fit, (x.min(), x.max()), label=f"fit c + a L$^{{-b}}$: {fit.label()}")
    for predictor, label, line_style in REFERENCES:
        if predictor in refs:
            value, iters = refs[predictor]
            text = f"{label} ({iters} it.)" if iters is not None else label
            reference_line(ax, value, text, line_style, COLORS[predictor])
    if note:
        ax.text(0.02, 0.02, note, transform=ax.transAxes, fontsize=7, color="0.3")
    ax.set_xticks(x)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("query MSE (per-prompt median)")
    study = f"{_labels(rows, 'sweep')}/{_labels(rows, 'study')}"
    ax.set_title(f"{study}: query MSE vs depth ({_labels(rows, 'dtype')})")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = save(fig, out_dir, name)
    plt.close(fig)

    best = int(np.argmin(y))
    best_depth = float(x[best])
    return {
        "fit": fit, "note": note, "excluded": excluded, "ok": ok, "paths": paths,
        "best_depth": int(best_depth) if best_depth.is_integer() else best_depth,
        "best_median_mse": float(y[best]), "var_y": var_y(rows),
        "references": {k: v for k, (v, _) in refs.items()},
        "ax": ax, "x": x, "y": y, "table": depths,
    }


# Imported here, not on top: analysis.figures_precision uses the helpers above.
from analysis.figures_algoformer import ALGOFORMER_FIGURES  # noqa: E402
from analysis.figures_deep import DEEP_FIGURES  # noqa: E402
from analysis.figures_precision import PRECISION_FIGURES  # noqa: E402
from analysis.figures_retrieval import RETRIEVAL_FIGURES  # noqa: E402

# name -> fn(rows, out_dir, name=..., n_boot=..., storage=...) -> summary (see depth_figure)
FIGURES: dict[str, Callable[..., dict]] = {
    "depth": depth_figure,
    "lsa_convergence": lsa_convergence_figure,
    "lsa_scaling": lsa_scaling_figure,
    # icl_prefix, precision_depth, primitives_depth, multiply_width, multiply_heads,
    # multiply_mlp, multiply_steps, features_depth, construction, explicit_gradient
    **PRECISION_FIGURES,
    # str_sample_complexity, str_heads, str_attention (sparse token retrieval)
    **RETRIEVAL_FIGURES,
    **DEEP_FIGURES,  # deep_shift, deep_depth, deep_scaling (Wu et al. 2024)
    # algo_examples, algo_loops, algo_layers_heads, algo_newton (AlgoFormer)
    **ALGOFORMER_FIGURES,
}
