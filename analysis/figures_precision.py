"""Figures of the least-squares precision study (transformers and BaseConv on least squares
and its primitives, against OLS / GD in float32 and float64; digest:
shared/notes/paper_least_squares_precision.md §5).

* icl_prefix (Fig 1): query MSE at every prefix length k = 0..N, model vs OLS float32/float64,
  a dotted line at k = D (left of it the problem is under-determined).
* mse_vs_axis: final query MSE against one config axis, one line per hue (median over seeds
  of the per-prompt median, shaded band = min–max over seeds of it, short ticks = the
  per-prompt q25/q75, medians over seeds), optional panels (facet) and a scaling fit per hue. Registered as precision_depth (Figs 2, 10),
  primitives_depth (Figs 3, 8), multiply_width / multiply_heads / multiply_mlp (Fig 4),
  multiply_steps (Fig 9) and features_depth (Fig 6).
* construction (Fig 5) and explicit_gradient (Fig 7): in analysis.figures_construction.

Every figure: fn(rows, out_dir, name=..., n_boot=1000, seed=0, **_context) -> summary dict
(see analysis.figures.depth_figure); members not "ok" are excluded and counted. Every figure
draws the trivial predictors (zero, prompt mean, ridge; thin grey, values in the legend) where
their rows exist, rings the cells outside the learned regime and says "not testable at this
scale" under a panel whose model never clears the bar (analysis.verdicts); fits that are not
resolved (analysis.fit.fit_status) are drawn dotted and labelled "unresolved (why)". Data
shaping lives in analysis.frames, the shared look in analysis.plotting.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.fit import Fit, fit_scaling
from analysis.frames import (
    OLS,
    STATS,
    cell_regime,
    excluded_note,
    final_eval,
    labels,
    last_step,
    levels,
    number,
    require,
    short,
    with_hue,
)
from analysis.frames import members as _members
from analysis.plot_baselines import (
    baseline_curve,
    draw_references,
    ridge_solves,
)
from analysis.plot_legends import legend_right
from analysis.plot_notes import hollow, panel_note, regime_note, study_title
from analysis.plotting import (
    COLORS,
    band,
    draw_fit,
    finish,
    fit_label,
    grid_ticks,
    log_axes,
    palette,
    prompt_iqr,
    seed_band,
    style,
)
from analysis.regime import TRIVIAL, regime_notes, trivial_levels

MIN_FIT_X = 3  # distinct x values a hue needs before it is fitted
# Panels in the paper's order; other facets are sorted.
FACET_ORDER = {"task.op": ("read", "affine", "multiply")}


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


# ----------------------------------------------------------------------------- mse_vs_axis


def _fit_hue(points: pl.DataFrame, label: str, form: str, n_boot: int, seed: int,
             claim_sign: int | None = 1) -> tuple[Fit | None, list[str]]:
    """A `form` fit of one hue's seed-level points (positive medians), or None and why; the
    fit carries the claim's sign (+1: the error falls as x grows) for `fit_status`."""
    points = points.filter(pl.col("median") > 0)
    n_x = points["x"].n_unique()
    if n_x < MIN_FIT_X:
        return None, [f"{label}: no fit ({n_x} x value(s), a fit needs >= {MIN_FIT_X})"]
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = fit_scaling(points["x"].to_numpy(), points["median"].to_numpy(),
                              points["seed"].to_numpy(), form=form, n_boot=n_boot, seed=seed)
    except (ValueError, RuntimeError) as exc:
        return None, [f"{label}: no fit: {exc}"]
    fit.claim_sign = claim_sign
    why = [f"{label}: {w.message}" for w in caught]
    if fit.status != "ok":
        why.append(f"{label}: fit unresolved ({fit.status})")
    return fit, why


@dataclass(frozen=True)
class AxisData:
    """What `mse_vs_axis` draws, shaped from the rows (no drawing): the final rows, the
    model's seed-level and cell-level tables per (facet, hue, x), the learned-regime table, the
    hues and facets in drawing order, a fit per hue with enough x values, the best x per hue."""

    final: pl.DataFrame  # final rows of every predictor, with a "facet" column ("" unfaceted)
    model: pl.DataFrame  # the model's final rows, with "x" and "hue"
    seeds: pl.DataFrame  # seed level: facet, hue, x, seed, median, q25, q75
    table: pl.DataFrame  # cells: facet, hue, x, median, q25, q75, n_seeds, seed_min, seed_max
    regime: pl.DataFrame  # learned-regime table per facet, hue, x
    hues: list[str]
    facets: list[str]
    fits: dict[str, Fit]  # "<facet>=<value>: <hue>" (unfaceted: the hue) -> fit
    best: dict[str, dict]  # facet value -> {hue: (x, median)} at the hue's lowest median
    notes: list[str]
    ok: int
    excluded: int


def axis_data(rows: pl.DataFrame, name: str, *, x: str, hue=(), facet: str | None = None,
              metric: str = "mse", form: str | None = None, n_boot: int = 1000, seed: int = 0,
              claim_sign: int | None = 1) -> AxisData:
    """The data of `mse_vs_axis` (same arguments): ValueError without final model rows."""
    hue = tuple(hue)
    require(rows, name, [x, *hue, *([facet] if facet else [])])
    ok, excluded = _members(rows, name)
    notes = excluded_note(excluded)
    final = final_eval(rows, metric=metric)
    final = final.with_columns(
        (pl.col(facet).cast(pl.String) if facet else pl.lit("")).alias("facet"))
    model = final.filter(pl.col("predictor") == "model")
    n_null = model[x].null_count()
    if n_null:
        notes.append(f"{n_null} model row(s) without {x} left out")
        model = model.filter(pl.col(x).is_not_null())
    if model.height == 0:
        raise ValueError(f"{name} figure: no final {metric!r} rows of the model from ok members "
                         f"({excluded} excluded)")
    model = model.with_columns(pl.col(x).cast(pl.Float64).alias("x"))
    model, hues = with_hue(model, hue)
    seeds, table = levels(model, ["facet", "hue", "x"])
    table = table.rename({"n": "n_seeds"}).join(
        seeds.group_by("facet", "hue", "x").agg(pl.col("median").min().alias("seed_min"),
                                                pl.col("median").max().alias("seed_max")),
        on=["facet", "hue", "x"], how="left")
    hue_of = model.select("config_hash", "hue", "x").unique("config_hash")
    trivial_rows = final.filter(pl.col("predictor").is_in(list(TRIVIAL))).join(
        hue_of, on="config_hash", how="inner")
    regime = cell_regime(pl.concat([model, trivial_rows], how="diagonal_relaxed"),
                         ["facet", "hue", "x"], metric=metric)

    facets = table["facet"].unique().to_list()
    order = FACET_ORDER.get(facet or "", ())
    facets.sort(key=lambda v: (order.index(v) if v in order else len(order), v))
    fits: dict[str, Fit] = {}
    best: dict[str, dict] = {}
    for fv in facets:
        panel = table.filter(pl.col("facet") == fv)
        best[fv] = {}
        for h in hues:
            line = panel.filter(pl.col("hue") == h).sort("x")
            if line.height == 0:
                continue
            i = int(np.nanargmin(line["median"].fill_null(np.inf).to_numpy()))
            best[fv][h] = (number(line["x"][i]), float(line["median"][i]))
            if form is None:
                continue
            key = f"{short(facet)}={fv}: {h}" if facet else h
            points = seeds.filter((pl.col("facet") == fv) & (pl.col("hue") == h))
            fit, why = _fit_hue(points, key, form, n_boot, seed, claim_sign)
            notes += why
            if fit is not None:
                fits[key] = fit
    return AxisData(final=final, model=model, seeds=seeds, table=table, regime=regime,
                    hues=hues, facets=facets, fits=fits, best=best, notes=notes, ok=ok,
                    excluded=excluded)


def _draw_axis(data: AxisData, rows: pl.DataFrame, facet: str | None, metric: str,
               xlabel: str, log_x: bool, form: str | None) -> tuple[object, list, dict]:
    """Draw `mse_vs_axis`'s panels; (figure, axes, references: {facet: {predictor: level}}
    per facet when faceted, else the one panel's {predictor: level})."""
    colors = palette(data.hues)
    references: dict = {}
    style()
    n = len(data.facets)
    fig, axes = plt.subplots(1, n, figsize=(5.0 if n == 1 else 3.8 * n, 3.6), sharey=True,
                             squeeze=False)
    axes = list(axes[0])
    for ax, fv in zip(axes, data.facets, strict=True):
        log_axes(ax, x=log_x, y=True)
        panel = data.table.filter(pl.col("facet") == fv)
        panel_regime = data.regime.filter(pl.col("facet") == fv)
        for h in data.hues:
            line = panel.filter(pl.col("hue") == h).sort("x")
            if line.height == 0:
                continue
            seed_band(ax, data.seeds.filter((pl.col("facet") == fv) & (pl.col("hue") == h)),
                      "x", "median", label=h, color=colors[h])
            prompt_iqr(ax, line["x"], line["q25"], line["q75"], colors[h])
            out = panel_regime.filter((pl.col("hue") == h) & pl.col("learned").not_())
            hollow(ax, out["x"], out["model"], colors[h])
            fit = data.fits.get(f"{short(facet)}={fv}: {h}" if facet else h)
            if fit is not None:
                span = (float(line["x"].min()), float(line["x"].max()))
                draw_fit(ax, fit, span, label=fit_label(fit, prefix=f"fit {h}"),
                         color=colors[h])
        refs = draw_references(ax, data.final.filter(pl.col("facet") == fv),
                               inline=bool(facet))
        regime_note(ax, regime_notes(panel_regime, group="hue", x="x"))
        grid_ticks(ax, panel["x"].to_list())
        ax.set_xlabel(xlabel)
        if facet:
            ax.set_title(f"{short(facet)}: {fv}")
            references[fv] = refs
        else:
            references = refs
    model = data.model
    names = set(model["task.name"].to_list()) if "task.name" in model.columns else set()
    query = names == {"linear_regression"}  # else: all outputs (primitives), or w (features)
    what = metric.upper() if metric != "mse" else ("query MSE" if query else "MSE")
    axes[0].set_ylabel(f"{what} (per-prompt median)")
    title = study_title(rows, labels(rows, "dtype"))
    if facet:
        fig.suptitle(title, fontsize=10)
    else:
        axes[0].set_title(title, fontsize=9)
    if data.notes and form is not None:
        panel_note(axes[0], ["\n".join(t for t in data.notes if "no fit" in t)[:300]])
    legend_right(axes, axes[-1])
    return fig, axes, references


def mse_vs_axis(rows: pl.DataFrame, out_dir: str | Path, name: str | None = None, *, x: str,
                hue=(), facet: str | None = None, metric: str = "mse", form: str | None = None,
                xlabel: str | None = None, log_x: bool = True, n_boot: int = 1000,
                seed: int = 0, claim_sign: int | None = 1, **_context) -> dict:
    """Final `metric` (per-prompt median at each member's last step) against config axis `x`:
    one line per hue (median over seeds; shaded band: its min–max over seeds, `seed_band`;
    short ticks: the per-prompt q25 / q75, medians over seeds, `prompt_iqr`),
    one panel per `facet` value (shared log y), OLS/GD and trivial-predictor levels where
    those rows exist (values in the legend), and a `form` fit per hue with >= 3 distinct x
    (seed-level points), drawn as unresolved when `fit_status` (claim: the fit's exponent has
    `claim_sign`, +1 = the error falls as x grows) is not "ok". Cells where the model is not
    in the learned regime get a ring; a hue with none in it is marked "not testable at
    this scale" on its panel.

    Summary: table (facet, hue, x, median, q25, q75, seed_min, seed_max, n_seeds): median,
    q25, q75 over prompts (medians over seeds), seed_min / seed_max: the min / max over seeds
    of the per-prompt median; fits (list of Fit),
    fits_by_label {label: Fit}, fit (the first or None), best {hue: (x, median)} (per facet
    when faceted: {facet: {hue: (x, median)}}), references, regime (the learned-regime table
    per facet, hue, x), paths, note, ok, excluded."""
    name = name or f"mse_vs_{short(x)}"
    data = axis_data(rows, name, x=x, hue=hue, facet=facet, metric=metric, form=form,
                     n_boot=n_boot, seed=seed, claim_sign=claim_sign)
    fig, axes, references = _draw_axis(data, rows, facet, metric, xlabel or x, log_x, form)
    paths = finish(fig, out_dir, name)

    table, regime = data.table, data.regime
    if not facet:
        table = table.with_columns(pl.lit(None, pl.String).alias("facet"))
        regime = regime.with_columns(pl.lit(None, pl.String).alias("facet"))
    fit_list = list(data.fits.values())
    return {
        "fit": fit_list[0] if fit_list else None, "fits": fit_list, "fits_by_label": data.fits,
        "note": "; ".join(data.notes), "ok": data.ok, "excluded": data.excluded, "paths": paths,
        "table": table.select("facet", "hue", "x", *STATS, "seed_min", "seed_max", "n_seeds"),
        "best": data.best if facet else data.best.get("", {}),
        "references": references, "axis": x, "facets": data.facets if facet else [],
        "axes": axes, "regime": regime,
    }


# name -> figure; analysis.figures.FIGURES includes these.
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
