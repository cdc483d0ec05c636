"""Figures of the least-squares precision study built on gradient descent (Liu et al.;
digest: shared/notes/paper_least_squares_precision.md §5), beside analysis.figures.precision:

* construction (Fig 5): the hand-built BaseConv GD construction (no training) against GD
  iterations, per dtype.
* explicit_gradient (Fig 7): gradient MSE vs depth (left); the error of the iterate w_i
  against w* under iterative inference (right), with GD.

Every figure: fn(rows, out_dir, name=..., n_boot=1000, seed=0, **_context) -> summary dict
(see analysis.figures.depth.depth_figure); members not "ok" are excluded and counted. The trivial
predictors (zero, prompt mean, ridge) are drawn where their rows exist; explicit_gradient rings
the cells outside the learned regime and says "not testable at this scale" under a panel whose
model never clears the bar (analysis.reading.regime).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import polars as pl

from analysis.plotting import (
    COLORS,
    LOOKS,
    PALETTE,
    band,
    baseline_curve,
    baseline_line,
    finish,
    grid_ticks,
    hollow,
    log_axes,
    palette,
    prompt_iqr,
    regime_note,
    seed_band,
    seed_caption,
    study_title,
    style,
    trivial_lines,
)
from analysis.reading.frames import (
    GD,
    OLS,
    STATS,
    cell_regime,
    excluded_note,
    final_eval,
    labels,
    levels,
    reference_levels,
    require,
    with_hue,
)
from analysis.reading.frames import members as _members
from analysis.reading.regime import regime_notes, trivial_levels

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.construction_layers", "model.depth", "model.layer_norm", "model.mixer", "model.name",
           "model.steps", "train.lr",)

CONSTRUCTION_COLORS = {"construction float32": COLORS["model"], "construction float64": PALETTE[1]}


@dataclass(frozen=True)
class ConstructionData:
    """What `construction_figure` draws, shaped from the rows (no drawing): the construction
    and GD tables per (line, iter), the table of both, each line's floor, the max relative
    difference per dtype, the final rows (for the references) and the notes."""

    final: pl.DataFrame
    cons: pl.DataFrame  # construction: dtype, iter, line, STATS, n
    gd_table: pl.DataFrame  # GD: predictor, iter, dtype, line, STATS, n
    table: pl.DataFrame  # both: line, iter, STATS, n
    floor: dict[str, float]  # line label -> its lowest median
    max_rel: dict[str, float]  # dtype -> max |construction - GD| / GD
    notes: list[str]
    ok: int
    excluded: int


def _max_rel_diff(cons: pl.DataFrame, gd_table: pl.DataFrame,
                  notes: list[str]) -> dict[str, float]:
    """{dtype: max over common iterations of |construction - GD| / GD} (NaN and a note when
    none is in common)."""
    max_rel: dict[str, float] = {}
    for dtype in cons["dtype"].unique().sort().to_list():
        c = cons.filter(pl.col("dtype") == dtype).select("iter", pl.col("median").alias("c"))
        g = gd_table.filter(pl.col("predictor") == f"gd_{dtype}").select(
            "iter", pl.col("median").alias("g"))
        both = c.join(g, on="iter", how="inner").filter(pl.col("g") > 0)
        if both.height == 0:
            max_rel[dtype] = math.nan
            notes.append(f"construction {dtype}: no GD {dtype} iteration in common")
            continue
        max_rel[dtype] = float(
            both.select(((pl.col("c") - pl.col("g")).abs() / pl.col("g")).max()).item())
    return max_rel


def construction_data(rows: pl.DataFrame, name: str = "construction") -> ConstructionData:
    """The data of `construction_figure`: ValueError without final construction rows."""
    require(rows, name, ["model.steps", "dtype", "infer_iter"])
    ok, excluded = _members(rows, name)
    notes = excluded_note(excluded)
    final = final_eval(rows)
    model = final.filter((pl.col("predictor") == "model") & pl.col("model.steps").is_not_null())
    if "model.name" in final.columns:
        model = model.filter(pl.col("model.name") == "baseconv_gd")
    if model.height == 0:
        raise ValueError(f"{name} figure: no final 'mse' rows of a 'baseconv_gd' construction "
                         f"member with 'model.steps' ({excluded} members excluded)")
    model = model.with_columns(pl.col("model.steps").cast(pl.Int64).alias("iter"),
                               pl.col("dtype").cast(pl.String))
    _, cons = levels(model, ["dtype", "iter"])
    cons = cons.with_columns((pl.lit("construction ") + pl.col("dtype")).alias("line"))
    gd = final.filter(pl.col("predictor").is_in(GD) & pl.col("infer_iter").is_not_null())
    gd = gd.with_columns(pl.col("infer_iter").cast(pl.Int64).alias("iter"))
    _, gd_table = levels(gd, ["predictor", "iter"], unit="config_hash")
    gd_table = gd_table.with_columns(
        pl.col("predictor").str.replace("gd_", "").alias("dtype"),
        pl.col("predictor").replace({p: LOOKS[p].label for p in GD}).alias("line"))
    if gd_table.height == 0:
        notes.append("no GD rows with infer_iter: nothing to compare against")
    max_rel = _max_rel_diff(cons, gd_table, notes)
    columns = ["line", "iter", *STATS, "n"]
    table = pl.concat([cons.select(columns), gd_table.select(columns)], how="vertical_relaxed")
    floor = {r["line"]: r["median"] for r in table.group_by("line").agg(
        pl.col("median").min()).iter_rows(named=True)}
    return ConstructionData(final, cons, gd_table, table, floor, max_rel, notes, ok, excluded)


def _draw_construction(ax, data: ConstructionData) -> None:
    """The construction lines (nested widths), GD curves, OLS and trivial levels on `ax`; the
    OLS levels join data.floor."""
    cons, gd_table, floor = data.cons, data.gd_table, data.floor
    ax.set_yscale("log")
    # the curves coincide where the construction is GD: nested widths keep each visible
    widths = {"construction float32": 3.4, "construction float64": 1.8}
    for label in cons["line"].unique().sort().to_list():
        part = cons.filter(pl.col("line") == label).sort("iter")
        drawn = band(ax, part["iter"], part["median"], part["q25"], part["q75"],
                     f"{label} (min {floor[label]:.2g})", CONSTRUCTION_COLORS.get(label))
        drawn.set_linewidth(widths.get(label, 1.8))
        drawn.set_alpha(0.7)
    for predictor in GD:
        part = gd_table.filter(pl.col("predictor") == predictor).sort("iter")
        if part.height:
            text = f" (min {floor[LOOKS[predictor].label]:.2g})"
            baseline_curve(ax, predictor, part["iter"], part["median"], text).set_zorder(3)
    refs = reference_levels(data.final, names=OLS)
    for predictor in OLS:
        if predictor in refs:
            baseline_line(ax, predictor, refs[predictor][0])
            floor[LOOKS[predictor].label] = refs[predictor][0]
    trivial_lines(ax, trivial_levels(data.final, "median"))  # not trained: no regime to judge


def construction_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "construction",
                        n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """The hand-built BaseConv GD construction (model.name "baseconv_gd", no training) vs GD
    (Fig 5): per-prompt median MSE against GD iterations (model.steps for the construction,
    infer_iter for GD), one construction line per dtype, GD float32/float64 (medians over
    members). max_rel_diff {dtype: max over common iterations of |construction - GD| / GD}."""
    data = construction_data(rows, name)
    style()
    fig, ax = plt.subplots()
    _draw_construction(ax, data)
    ax.set_xlabel("GD iterations (construction: model.steps)")
    ax.set_ylabel("MSE of the output vs target (per-prompt median)")
    ax.set_title(study_title(rows), fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(data.notes), "ok": data.ok, "excluded": data.excluded,
        "paths": paths, "table": data.table.sort("line", "iter"), "max_rel_diff": data.max_rel,
        "floor": data.floor, "ax": ax,
    }


# ----------------------------------------------------------------------- explicit_gradient


def _frozen_depth(rows: pl.DataFrame) -> int:
    """The depth the frozen-construction members use (the most common depth among ok members
    with construction_layers > 0, ties to the larger), else the largest depth."""
    members = rows.filter(pl.col("status") == "ok").group_by("config_hash").agg(
        pl.col("model.depth").first(), pl.col("model.construction_layers").first())
    members = members.filter(pl.col("model.depth").is_not_null())
    frozen = members.filter(pl.col("model.construction_layers") > 0)
    if frozen.height:
        counts = frozen.group_by("model.depth").len().sort(
            "len", "model.depth", descending=True)
        return int(counts["model.depth"][0])
    return int(members["model.depth"].max())


def _varying(rows: pl.DataFrame, column: str) -> tuple[str, ...]:
    """(column,) when the members differ in it (e.g. the reduced preset's learning rates: each
    its own line, never medianed into one seed's value), else ()."""
    if column not in rows.columns:
        return ()
    return (column,) if rows[column].drop_nulls().n_unique() > 1 else ()


@dataclass(frozen=True)
class ExplicitGradientData:
    """What `explicit_gradient_figure` draws, shaped from the rows (no drawing). Left: the
    scratch members' final rows, seed-level and cell tables per (hue, x = depth), the regime
    table. Right: at the frozen depth, the model's seed-level and cell tables per (hue, x =
    infer_iter), GD per (predictor, x), both as one table, the trivial w_mse levels."""

    scratch: pl.DataFrame  # final mse rows of every predictor trained from scratch, with hue, x
    hues_left: list[str]
    seeds_left: pl.DataFrame
    table_left: pl.DataFrame
    regime: pl.DataFrame
    depth: int
    hues_right: list[str]
    seeds_right: pl.DataFrame
    model_right: pl.DataFrame
    gd_right: pl.DataFrame
    table_right: pl.DataFrame  # line, x, STATS, n
    w_trivial: dict
    final: dict[str, float]  # line -> median w_mse at its largest infer_iter
    notes: list[str]
    ok: int
    excluded: int


def explicit_gradient_data(rows: pl.DataFrame,
                           name: str = "explicit_gradient") -> ExplicitGradientData:
    """The data of `explicit_gradient_figure`: ValueError without scratch model rows."""
    hue_left = ("model.mixer", "model.layer_norm", *_varying(rows, "train.lr"))
    hue_right = (*hue_left, "model.construction_layers")
    require(rows, name, ["model.depth", *hue_right, "infer_iter"])
    ok, excluded = _members(rows, name)
    notes = excluded_note(excluded)

    final_left = final_eval(rows, metric="mse")
    scratch = final_left.filter((pl.col("model.construction_layers") == 0)
                                & pl.col("model.depth").is_not_null())
    left = scratch.filter(pl.col("predictor") == "model")
    if left.height == 0:
        raise ValueError(f"{name} figure: no final 'mse' rows of ok members trained from "
                         f"scratch (model.construction_layers == 0; {excluded} excluded)")
    scratch = scratch.with_columns(pl.col("model.depth").cast(pl.Float64).alias("x"))
    scratch, hues_left = with_hue(scratch, hue_left)
    left = scratch.filter(pl.col("predictor") == "model")
    seeds_left, table_left = levels(left, ["hue", "x"])
    table_left = table_left.rename({"n": "n_seeds"})
    regime = cell_regime(scratch, ["hue", "x"])

    depth = _frozen_depth(rows)
    w = final_eval(rows, metric="w_mse")
    w_trivial = trivial_levels(w.filter(pl.col("model.depth") == depth), "median")
    w = w.filter(pl.col("infer_iter").is_not_null()).with_columns(
        pl.col("infer_iter").cast(pl.Int64).alias("x"))
    right = w.filter((pl.col("predictor") == "model") & (pl.col("model.depth") == depth))
    right, hues_right = with_hue(right, hue_right)
    seeds_right, model_right = levels(right, ["hue", "x"])
    _, gd_right = levels(w.filter(pl.col("predictor").is_in(GD)), ["predictor", "x"],
                         unit="config_hash")
    gd_right = gd_right.with_columns(
        pl.col("predictor").replace({p: LOOKS[p].label for p in GD}).alias("hue"))
    columns = ["hue", "x", *STATS, "n"]
    table_right = pl.concat([model_right.select(columns), gd_right.select(columns)],
                            how="vertical_relaxed").rename({"hue": "line"})
    if model_right.height == 0:
        notes.append(f"no 'w_mse' rows with infer_iter of the model at depth {depth}")
    final = {r["line"]: r["median"] for r in table_right.filter(
        pl.col("x") == pl.col("x").max().over("line")).iter_rows(named=True)}
    return ExplicitGradientData(scratch, hues_left, seeds_left, table_left, regime, depth,
                                hues_right, seeds_right, model_right, gd_right, table_right,
                                w_trivial, final, notes, ok, excluded)


def _draw_scratch(ax, data: ExplicitGradientData, colors: dict) -> None:
    """Left panel: gradient MSE vs depth of the members trained from scratch."""
    log_axes(ax)
    for h in data.hues_left:
        line = data.table_left.filter(pl.col("hue") == h).sort("x")
        seed_band(ax, data.seeds_left.filter(pl.col("hue") == h), "x", "median", label=h,
                  color=colors[h])
        prompt_iqr(ax, line["x"], line["q25"], line["q75"], colors[h])
        out = data.regime.filter((pl.col("hue") == h) & pl.col("learned").not_())
        hollow(ax, out["x"], out["model"], colors[h])
    trivial_lines(ax, trivial_levels(data.scratch, "median"))
    regime_note(ax, regime_notes(data.regime, group="hue", x="x"))
    grid_ticks(ax, data.table_left["x"].to_list())
    ax.set_xlabel("depth L (layers)")
    ax.set_ylabel("gradient MSE (per-prompt median)")
    ax.set_title("explicit gradient: trained from scratch")
    # one depth: the points sit mid-axis, where an inside legend can land on them
    place = {"loc": "center right", "bbox_to_anchor": (-0.18, 0.5)} \
        if data.table_left["x"].n_unique() == 1 else {"loc": "best"}
    ax.legend(**place, fontsize=6, title=seed_caption(ax), title_fontsize=6, alignment="left")


def _draw_inference(ax, data: ExplicitGradientData, colors: dict) -> None:
    """Right panel: w_mse vs inference iteration at the frozen depth, with GD."""
    ax.set_yscale("log")
    for h in data.hues_right:
        line = data.model_right.filter(pl.col("hue") == h).sort("x")
        if line.height:
            seed_band(ax, data.seeds_right.filter(pl.col("hue") == h), "x", "median", label=h,
                      color=colors[h])
            prompt_iqr(ax, line["x"], line["q25"], line["q75"], colors[h])
    for predictor in GD:
        line = data.gd_right.filter(pl.col("predictor") == predictor).sort("x")
        if line.height:
            baseline_curve(ax, predictor, line["x"], line["median"])
    trivial_lines(ax, data.w_trivial)
    if data.table_right.height == 0:
        ax.text(0.5, 0.5, "no w_mse rows", transform=ax.transAxes, ha="center")
    ax.set_xlabel("inference iteration i")
    ax.set_ylabel("MSE of w_i vs w* (per-prompt median)")
    ax.set_title(f"iterative inference, depth {data.depth}")
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), title=seed_caption(ax) or None,
              title_fontsize=6.5, alignment="left")


def explicit_gradient_figure(rows: pl.DataFrame, out_dir: str | Path,
                             name: str = "explicit_gradient", n_boot: int = 1000, seed: int = 0,
                             **_context) -> dict:
    """Fig 7. Left: gradient MSE (metric "mse") vs depth of the members trained from scratch
    (construction_layers 0), one line per (mixer, layer norm), with the trivial predictors'
    levels; cells outside the learned regime get a ring, a hue with none inside is
    "not testable at this scale". Right: w_mse (the iterate w_i against w*) vs inference
    iteration for the members at the frozen members' depth, one line per (mixer, layer norm,
    frozen layers), with GD float32/float64 (and trivial levels where w_mse rows exist).
    final {label: median w_mse at the line's largest infer_iter}."""
    data = explicit_gradient_data(rows, name)
    style()
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(11.5, 4.0), layout="constrained")
    colors = palette(list(dict.fromkeys([*data.hues_left, *data.hues_right])))
    _draw_scratch(ax_l, data, colors)
    _draw_inference(ax_r, data, colors)
    fig.suptitle(study_title(rows, labels(rows, "dtype")), fontsize=10)
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(data.notes), "ok": data.ok, "excluded": data.excluded,
        "paths": paths, "table_left": data.table_left,
        "table_right": data.table_right.sort("line", "x"), "final": data.final,
        "depth": data.depth, "axes": [ax_l, ax_r], "regime": data.regime,
    }


# name -> figure; analysis.figures.registry.FIGURES includes these.
CONSTRUCTION_FIGURES = {
    "construction": construction_figure,
    "explicit_gradient": explicit_gradient_figure,
}
