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
* construction (Fig 5): the hand-built BaseConv GD construction (no training) against GD
  iterations, per dtype.
* explicit_gradient (Fig 7): gradient MSE vs depth (left); the error of the iterate w_i
  against w* under iterative inference (right), with GD.

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
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.fit import Fit, fit_scaling
from analysis.frames import (
    GD,
    OLS,
    STATS,
    cell_regime,
    excluded_note,
    final_eval,
    labels,
    last_step,
    levels,
    number,
    reference_levels,
    require,
    short,
    with_hue,
)
from analysis.frames import members as _members
from analysis.plot_baselines import (
    LOOKS,
    baseline_curve,
    baseline_line,
    draw_references,
    ridge_solves,
    trivial_lines,
)
from analysis.plot_legends import legend_right
from analysis.plot_notes import hollow, panel_note, regime_note, study_title
from analysis.plotting import (
    COLORS,
    PALETTE,
    band,
    draw_fit,
    finish,
    fit_label,
    grid_ticks,
    log_axes,
    palette,
    prompt_iqr,
    seed_band,
    seed_caption,
    style,
)
from analysis.regime import TRIVIAL, regime_notes, trivial_levels

MIN_FIT_X = 3  # distinct x values a hue needs before it is fitted
# Panels in the paper's order; other facets are sorted.
FACET_ORDER = {"task.op": ("read", "affine", "multiply")}
CONSTRUCTION_COLORS = {"construction float32": COLORS["model"], "construction float64": PALETTE[1]}


# ------------------------------------------------------------------------------ icl_prefix


def icl_prefix_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "icl_prefix",
                      n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """Query MSE vs the number of in-context examples k (Fig 1): the model (median over seeds
    of the per-prompt median, IQR band), OLS float32/float64 and the trivial predictors at the
    same positions; a dotted line at k = D. plateau / ols_float32_floor: medians over k > D;
    gap_orders = log10(plateau / ols_float32_floor). Positions k > D where the model is not
    in the learned regime get a ring and the panel says so."""
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

    style()
    fig, ax = plt.subplots()
    ax.set_yscale("log")
    k = table["position"].to_numpy()
    band(ax, k, table["median"], table["q25"], table["q75"],
         "model (median over seeds; band: IQR over prompts)", COLORS["model"])
    out = regime.filter(pl.col("learned").not_())
    hollow(ax, out["position"], out["model"], COLORS["model"])
    for predictor in OLS:
        part = table.filter(pl.col(predictor).is_not_null())
        if part.height:
            level = determined[predictor].drop_nulls().median()
            note = f" (k > D: {level:.2g})" if level is not None else ""
            baseline_curve(ax, predictor, part["position"], part[predictor], note)
    for predictor in TRIVIAL:
        part = trivial.filter(pl.col("predictor") == predictor).sort("position")
        if part.height:
            note = " (solves the task: not a bar)" if predictor == "ridge" and ridge_solves(
                last) else ""
            baseline_curve(ax, predictor, part["position"], part["value"], note)
    ax.axvline(dim, linestyle=":", color="0.4", linewidth=1.0, label=f"k = D = {dim}")
    ax.text(dim, 0.98, "under-determined ", transform=ax.get_xaxis_transform(), ha="right",
            va="top", fontsize=7, color="0.3")
    ax.text(dim, 0.98, " determined", transform=ax.get_xaxis_transform(), ha="left",
            va="top", fontsize=7, color="0.3")
    if math.isfinite(gap):
        panel_note(ax, [f"gap {gap:.1f} orders (k > D; medians)"], loc="lower right",
                   fontsize=7)
    regime_note(ax, [f"k > D: {t}" for t in regime_notes(regime, x="position")])
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel("query MSE (per-prompt median)")
    ax.set_title(study_title(rows, labels(rows, "dtype")), fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(notes), "ok": ok, "excluded": excluded, "paths": paths,
        "table": table, "dim": dim, "plateau": plateau, "ols_float32_floor": floor,
        "ols_float64_floor": floor64, "gap_orders": gap, "ax": ax, "regime": regime,
        "trivial": trivial,
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
    hue = tuple(hue)
    name = name or f"mse_vs_{short(x)}"
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
    colors = palette(hues)
    fits: dict[str, Fit] = {}
    best: dict = {}
    references: dict = {}

    style()
    n = len(facets)
    fig, axes = plt.subplots(1, n, figsize=(5.0 if n == 1 else 3.8 * n, 3.6), sharey=True,
                             squeeze=False)
    axes = list(axes[0])
    xlabel = xlabel or x
    for ax, fv in zip(axes, facets, strict=True):
        log_axes(ax, x=log_x, y=True)
        panel = table.filter(pl.col("facet") == fv)
        panel_regime = regime.filter(pl.col("facet") == fv)
        panel_best = {}
        for h in hues:
            line = panel.filter(pl.col("hue") == h).sort("x")
            if line.height == 0:
                continue
            seed_band(ax, seeds.filter((pl.col("facet") == fv) & (pl.col("hue") == h)), "x",
                      "median", label=h, color=colors[h])
            prompt_iqr(ax, line["x"], line["q25"], line["q75"], colors[h])
            out = panel_regime.filter((pl.col("hue") == h) & pl.col("learned").not_())
            hollow(ax, out["x"], out["model"], colors[h])
            i = int(np.nanargmin(line["median"].fill_null(np.inf).to_numpy()))
            panel_best[h] = (number(line["x"][i]), float(line["median"][i]))
            if form is None:
                continue
            key = f"{short(facet)}={fv}: {h}" if facet else h
            points = seeds.filter((pl.col("facet") == fv) & (pl.col("hue") == h))
            fit, why = _fit_hue(points, key, form, n_boot, seed, claim_sign)
            notes += why
            if fit is not None:
                fits[key] = fit
                span = (float(line["x"].min()), float(line["x"].max()))
                draw_fit(ax, fit, span, label=fit_label(fit, prefix=f"fit {h}"),
                         color=colors[h])
        refs = draw_references(ax, final.filter(pl.col("facet") == fv), inline=bool(facet))
        regime_note(ax, regime_notes(panel_regime, group="hue", x="x"))
        grid_ticks(ax, panel["x"].to_list())
        ax.set_xlabel(xlabel)
        if facet:
            ax.set_title(f"{short(facet)}: {fv}")
            best[fv] = panel_best
            references[fv] = refs
        else:
            best, references = panel_best, refs
    names = set(model["task.name"].to_list()) if "task.name" in model.columns else set()
    query = names == {"linear_regression"}  # else: all outputs (primitives), or w (features)
    what = metric.upper() if metric != "mse" else ("query MSE" if query else "MSE")
    axes[0].set_ylabel(f"{what} (per-prompt median)")
    title = study_title(rows, labels(rows, "dtype"))
    if facet:
        fig.suptitle(title, fontsize=10)
    else:
        axes[0].set_title(title, fontsize=9)
    if notes and form is not None:
        panel_note(axes[0], ["\n".join(t for t in notes if "no fit" in t)[:300]])
    legend_right(axes, axes[-1])
    paths = finish(fig, out_dir, name)

    if not facet:
        table = table.with_columns(pl.lit(None, pl.String).alias("facet"))
        regime = regime.with_columns(pl.lit(None, pl.String).alias("facet"))
    fit_list = list(fits.values())
    return {
        "fit": fit_list[0] if fit_list else None, "fits": fit_list, "fits_by_label": fits,
        "note": "; ".join(notes), "ok": ok, "excluded": excluded, "paths": paths,
        "table": table.select("facet", "hue", "x", *STATS, "seed_min", "seed_max", "n_seeds"),
        "best": best,
        "references": references, "axis": x, "facets": facets if facet else [],
        "axes": axes, "regime": regime,
    }


# ---------------------------------------------------------------------------- construction


def construction_figure(rows: pl.DataFrame, out_dir: str | Path, name: str = "construction",
                        n_boot: int = 1000, seed: int = 0, **_context) -> dict:
    """The hand-built BaseConv GD construction (model.name "baseconv_gd", no training) vs GD
    (Fig 5): per-prompt median MSE against GD iterations (model.steps for the construction,
    infer_iter for GD), one construction line per dtype, GD float32/float64 (medians over
    members). max_rel_diff {dtype: max over common iterations of |construction - GD| / GD}."""
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

    columns = ["line", "iter", *STATS, "n"]
    table = pl.concat([cons.select(columns), gd_table.select(columns)], how="vertical_relaxed")
    floor = {r["line"]: r["median"] for r in table.group_by("line").agg(
        pl.col("median").min()).iter_rows(named=True)}

    style()
    fig, ax = plt.subplots()
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
    refs = reference_levels(final, names=OLS)
    for predictor in OLS:
        if predictor in refs:
            baseline_line(ax, predictor, refs[predictor][0])
            floor[LOOKS[predictor].label] = refs[predictor][0]
    trivial_lines(ax, trivial_levels(final, "median"))  # not trained: no regime to judge
    ax.set_xlabel("GD iterations (construction: model.steps)")
    ax.set_ylabel("MSE of the output vs target (per-prompt median)")
    ax.set_title(study_title(rows), fontsize=9)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(notes), "ok": ok, "excluded": excluded, "paths": paths,
        "table": table.sort("line", "iter"), "max_rel_diff": max_rel, "floor": floor, "ax": ax,
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
    hue_left = ("model.mixer", "model.layer_norm")
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

    style()
    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(11.5, 4.0), layout="constrained")
    colors = palette(list(dict.fromkeys([*hues_left, *hues_right])))
    log_axes(ax_l)
    for h in hues_left:
        line = table_left.filter(pl.col("hue") == h).sort("x")
        seed_band(ax_l, seeds_left.filter(pl.col("hue") == h), "x", "median", label=h,
                  color=colors[h])
        prompt_iqr(ax_l, line["x"], line["q25"], line["q75"], colors[h])
        out = regime.filter((pl.col("hue") == h) & pl.col("learned").not_())
        hollow(ax_l, out["x"], out["model"], colors[h])
    trivial_lines(ax_l, trivial_levels(scratch, "median"))
    regime_note(ax_l, regime_notes(regime, group="hue", x="x"))
    grid_ticks(ax_l, table_left["x"].to_list())
    ax_l.set_xlabel("depth L (layers)")
    ax_l.set_ylabel("gradient MSE (per-prompt median)")
    ax_l.set_title("explicit gradient: trained from scratch")
    ax_l.legend(loc="best", fontsize=6, title=seed_caption(ax_l), title_fontsize=6,
                alignment="left")

    ax_r.set_yscale("log")
    for h in hues_right:
        line = model_right.filter(pl.col("hue") == h).sort("x")
        if line.height:
            seed_band(ax_r, seeds_right.filter(pl.col("hue") == h), "x", "median", label=h,
                      color=colors[h])
            prompt_iqr(ax_r, line["x"], line["q25"], line["q75"], colors[h])
    for predictor in GD:
        line = gd_right.filter(pl.col("predictor") == predictor).sort("x")
        if line.height:
            baseline_curve(ax_r, predictor, line["x"], line["median"])
    trivial_lines(ax_r, w_trivial)
    if table_right.height == 0:
        ax_r.text(0.5, 0.5, "no w_mse rows", transform=ax_r.transAxes, ha="center")
    ax_r.set_xlabel("inference iteration i")
    ax_r.set_ylabel("MSE of w_i vs w* (per-prompt median)")
    ax_r.set_title(f"iterative inference, depth {depth}")
    ax_r.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), title=seed_caption(ax_r) or None,
                title_fontsize=6.5, alignment="left")
    fig.suptitle(study_title(rows, labels(rows, "dtype")), fontsize=10)
    paths = finish(fig, out_dir, name)
    return {
        "fit": None, "note": "; ".join(notes), "ok": ok, "excluded": excluded, "paths": paths,
        "table_left": table_left, "table_right": table_right.sort("line", "x"),
        "final": final, "depth": depth, "axes": [ax_l, ax_r], "regime": regime,
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
    "construction": construction_figure,
    "explicit_gradient": explicit_gradient_figure,
}
