"""Figures of the least-squares precision study (transformers and BaseConv on least squares
and its primitives, against OLS / GD in float32 and float64; digest:
shared/notes/paper_least_squares_precision.md §5).

* icl_prefix (Fig 1): query MSE at every prefix length k = 0..N, model vs OLS float32/float64,
  a dotted line at k = D (left of it the problem is under-determined).
* analysis.figures.mse_vs_axis.mse_vs_axis (final query MSE against one config axis, a line per
  hue, optional panels, a scaling fit per hue), registered here with its axes as
  precision_depth (Figs 2, 10), primitives_depth (Figs 3, 8), multiply_width /
  multiply_heads / multiply_mlp (Fig 4), multiply_steps (Fig 9) and features_depth (Fig 6).
* construction (Fig 5) and explicit_gradient (Fig 7): in analysis.figures.construction.

Every figure: fn(rows, out_dir, name=..., n_boot=1000, seed=0, **_context) -> summary dict
(see analysis.figures.depth.depth_figure); members not "ok" are excluded and counted. Every figure
draws the trivial predictors (zero, prompt mean, ridge; thin grey, values in the legend) where
their rows exist, rings the cells outside the learned regime and says "not testable at this
scale" under a panel whose model never clears the bar (analysis.reading.regime); fits that are not
resolved (analysis.fitting.fit.fit_status) are drawn dotted and labelled "unresolved (why)". Data
shaping lives in analysis.reading.frames, the shared look in analysis.plotting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from analysis.figures.mse_vs_axis import mse_vs_axis
from analysis.plotting import (
    COLORS,
    band,
    baseline_curve,
    finish,
    hollow,
    panel_note,
    regime_note,
    ridge_solves,
    study_title,
    style,
)
from analysis.reading.frames import (
    OLS,
    cell_regime,
    excluded_note,
    labels,
    last_step,
    levels,
    require,
)
from analysis.reading.frames import members as _members
from analysis.reading.regime import TRIVIAL, regime_notes, trivial_levels

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.depth", "model.heads", "model.layer_norm", "model.mixer", "model.mlp_ratio",
           "model.width", "task.dim", "task.features", "task.op", "train.steps",)

# ------------------------------------------------------------------------------ icl_prefix


@dataclass(frozen=True)
class PrefixData:
    """What `icl_prefix_figure` draws, shaped from the rows (no drawing)."""

    last: pl.DataFrame  # rows at each member's last step, every position
    table: pl.DataFrame  # position, median, q25, q75, n_seeds, ols_float32, ols_float64
    trivial: pl.DataFrame  # position, predictor, value
    regime: pl.DataFrame  # learned-regime table per position k > D
    dim: int  # D: the largest task.dim of the ok members
    ols_levels: dict[str, float | None]  # OLS medians over k > D
    plateau: float  # the model's median over k > D
    floor: float  # OLS float32 median over k > D
    floor64: float  # OLS float64 median over k > D
    gap: float  # log10(plateau / floor), NaN without both
    notes: list[str]
    ok: int
    excluded: int


def prefix_data(rows: pl.DataFrame, name: str = "icl_prefix") -> PrefixData:
    """The data of `icl_prefix_figure`: ValueError without per-position model rows."""
    require(rows, name, ["task.dim"])
    ok, excluded = _members(rows, name)
    last = last_step(rows, "mse").filter(pl.col("position").is_not_null())
    model = last.filter(pl.col("predictor") == "model")
    _, table = levels(model, ["position"])
    if table.height == 0:
        raise ValueError(f"{name} figure: no per-position 'mse' rows of the model "
                         f"({excluded} members excluded)")
    notes = excluded_note(excluded)
    dims = sorted(rows.filter(pl.col("status") == "ok")["task.dim"].drop_nulls().unique().to_list())
    if not dims:
        raise ValueError(f"{name} figure: no ok member has a 'task.dim'")
    if len(dims) > 1:
        notes.append(f"members differ in task.dim {dims}: the line is at the largest")
    dim = int(dims[-1])

    ols = last.filter(pl.col("predictor").is_in(OLS) & (pl.col("statistic") == "median"))
    ols = ols.group_by("predictor", "position").agg(pl.col("value").median())
    table = table.rename({"n": "n_seeds"})
    for predictor in OLS:
        part = ols.filter(pl.col("predictor") == predictor).select(
            "position", pl.col("value").alias(predictor))
        table = table.join(part, on="position", how="left")
    table = table.sort("position")
    trivial = trivial_levels(last, "median", by=["position"])
    regime = cell_regime(last.filter(pl.col("position") > dim), ["position"])

    determined = table.filter(pl.col("position") > dim)
    plateau = determined["median"].drop_nulls().median() if determined.height else None
    floor = determined["ols_float32"].drop_nulls().median() if determined.height else None
    floor64 = determined["ols_float64"].drop_nulls().median() if determined.height else None
    plateau = math.nan if plateau is None else float(plateau)
    floor = math.nan if floor is None else float(floor)
    floor64 = math.nan if floor64 is None else float(floor64)
    if plateau > 0 and floor > 0:
        gap = math.log10(plateau / floor)
    else:
        gap = math.nan
        notes.append(f"no gap: plateau {plateau:.3g}, OLS float32 floor {floor:.3g} "
                     f"(positions k > D = {dim})")
    ols_levels = {p: determined[p].drop_nulls().median() for p in OLS}
    return PrefixData(last=last, table=table, trivial=trivial, regime=regime, dim=dim,
                      ols_levels=ols_levels, plateau=plateau, floor=floor, floor64=floor64,
                      gap=gap, notes=notes, ok=ok, excluded=excluded)


def _draw_prefix(data: PrefixData, rows: pl.DataFrame):
    """Draw `icl_prefix_figure`; (figure, axes)."""
    table, dim = data.table, data.dim
    style()
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    k = table["position"].to_numpy()
    band(ax, k, table["median"], table["q25"], table["q75"],
         "model (median over seeds; band: IQR over prompts)", COLORS["model"])
    out = data.regime.filter(pl.col("learned").not_())
    hollow(ax, out["position"], out["model"], COLORS["model"])
    for predictor in OLS:
        part = table.filter(pl.col(predictor).is_not_null())
        if part.height:
            level = data.ols_levels[predictor]
            note = f" (k > D: {level:.2g})" if level is not None else ""
            baseline_curve(ax, predictor, part["position"], part[predictor], note)
    for predictor in TRIVIAL:
        part = data.trivial.filter(pl.col("predictor") == predictor).sort("position")
        if part.height:
            note = " (solves the task: not a bar)" if predictor == "ridge" and ridge_solves(
                data.last) else ""
            baseline_curve(ax, predictor, part["position"], part["value"], note)
    ax.axvline(dim, linestyle=":", color="0.4", linewidth=1.0, label=f"k = D = {dim}")
    ax.text(dim, 0.98, "under-determined ", transform=ax.get_xaxis_transform(), ha="right",
            va="top", fontsize=7, color="0.3")
    ax.text(dim, 0.98, " determined", transform=ax.get_xaxis_transform(), ha="left",
            va="top", fontsize=7, color="0.3")
    if math.isfinite(data.gap):
        panel_note(ax, [f"gap {data.gap:.1f} orders (k > D; medians)"], loc="lower right",
                   fontsize=7)
    regime_note(ax, [f"k > D: {t}" for t in regime_notes(data.regime, x="position")])
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel("query MSE (per-prompt median)")
    ax.set_title(study_title(rows, labels(rows, "dtype")), fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig, ax


def icl_prefix_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "icl_prefix",
                      n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """Query MSE vs the number of in-context examples k (Fig 1): the model (median over seeds
    of the per-prompt median, IQR band), OLS float32/float64 and the trivial predictors at the
    same positions; a dotted line at k = D. plateau / ols_float32_floor: medians over k > D;
    gap_orders = log10(plateau / ols_float32_floor). Positions k > D where the model is not
    in the learned regime get a ring and the panel says so."""
    data = prefix_data(rows, name)
    fig, ax = _draw_prefix(data, rows)
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(data.notes), "ok": data.ok, "excluded": data.excluded,
        "paths": paths, "table": data.table, "dim": data.dim, "plateau": data.plateau,
        "ols_float32_floor": data.floor, "ols_float64_floor": data.floor64,
        "gap_orders": data.gap, "ax": ax, "regime": data.regime, "trivial": data.trivial,
    }


# name -> figure; analysis.figures.registry.FIGURES includes these.
PRECISION_FIGURES = {
    "icl_prefix": icl_prefix_figure,
    "precision_depth": partial(mse_vs_axis, x="model.depth",
                               hue=("model.mixer", "model.layer_norm"), form="saturating",
                               xlabel="depth L (layers)"),
    "primitives_depth": partial(mse_vs_axis, x="model.depth",
                                hue=("model.mixer", "model.layer_norm"), facet="task.op",
                                xlabel="depth L (layers)"),
    "multiply_width": partial(mse_vs_axis, x="model.width", hue=("model.mixer",), form="power",
                              xlabel="width (attention dim)"),
    "multiply_heads": partial(mse_vs_axis, x="model.heads", hue=("model.mixer",), form="power",
                              xlabel="attention heads"),
    "multiply_mlp": partial(mse_vs_axis, x="model.mlp_ratio", hue=("model.mixer",),
                            form="power", xlabel="MLP ratio (hidden / width)"),
    "multiply_steps": partial(mse_vs_axis, x="train.steps", hue=("model.mixer",), form="power",
                              xlabel="training steps"),
    "features_depth": partial(mse_vs_axis, x="model.depth", hue=("model.mixer", "task.features"),
                              xlabel="depth L (layers)"),
}
