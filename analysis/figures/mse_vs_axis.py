"""Final error against one config axis (Liu et al. Figs 2-4, 6, 8-10; registered with its
axes in analysis.figures.precision): one line per hue (median over seeds of the per-prompt
median, shaded band = min–max over seeds of it, short ticks = the per-prompt q25/q75, medians
over seeds), optional panels (facet) and a scaling fit per hue.

`axis_data` shapes the rows (tables, learned regime, fits, best x per hue) into an `AxisData`;
`mse_vs_axis` draws it and returns the summary. Members not "ok" are excluded and counted; the
trivial predictors are drawn where their rows exist, cells outside the learned regime get a
ring and a hue with none in it is "not testable at this scale" (analysis.reading.regime); fits that
are not resolved (analysis.fitting.fit.fit_status) are drawn dotted and labelled "unresolved (why)".
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.fitting.fit import Fit, fit_scaling
from analysis.plotting import (
    draw_fit,
    draw_references,
    finish,
    fit_label,
    grid_ticks,
    hollow,
    legend_right,
    log_axes,
    palette,
    panel_note,
    prompt_iqr,
    regime_note,
    seed_band,
    study_title,
    style,
)
from analysis.reading.frames import (
    STATS,
    cell_regime,
    excluded_note,
    final_eval,
    labels,
    levels,
    number,
    require,
    short,
    with_hue,
)
from analysis.reading.frames import members as _members
from analysis.reading.regime import FLOOR, TRIVIAL, regime_notes

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("task.name", "task.op",)

MIN_FIT_X = 3  # distinct x values a hue needs before it is fitted
# Panels in the paper's order; other facets are sorted.
FACET_ORDER = {"task.op": ("read", "affine", "multiply")}


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
    trivial_rows = final.filter(pl.col("predictor").is_in([*TRIVIAL, FLOOR])).join(
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
