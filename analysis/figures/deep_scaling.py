"""The scale-up of Wu et al. 2024 (sweeps/deep_optimizers.py, study `scaleup`), beside
analysis.figures.deep_shift:

* deep_scaling: 1 - R² at the training length vs depth, one curve per width (median over
  seeds, min–max error bars), with a saturating fit c + a L^-b per width (vs width, one curve
  per depth, where the grid has more widths than depths: the reduced preset's one depth); and
  1 - R² vs k per model with a fit of the best; the trivial predictors' 1 - R² on both.

R² is pooled over the test prompts (deep.STATISTIC); cells short of the learned-regime
margin (analysis.reading.regime.LEARNED_R2_GAP) get a ring and the panel says "not testable at this
scale". A curve's law is fitted over its learned cells only (a law on unlearned cells tests
nothing), and only where they span `MIN_LEARNED_X` x; else the note says no law was tested.
Fits that are not resolved (analysis.fitting.fit.fit_status) are drawn dotted.
"""

from __future__ import annotations

import textwrap
import warnings
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.figures.deep_shift import STATISTIC
from analysis.fitting.fit import Fit, fit_scaling
from analysis.plotting import (
    PALETTE,
    baseline_curve,
    baseline_line,
    draw_fit,
    fit_label,
    grid_ticks,
    hollow,
    legend_title,
    log_axes,
    panel_note,
    regime_note,
    save,
    seed_band,
    study_title,
    style,
)
from analysis.reading.frames import cell_regime
from analysis.reading.regime import TRIVIAL, final_rows, regime_notes

MIN_LEARNED_X = 3  # a law is fitted over the learned cells only, and needs this many x

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.depth", "model.width", "task.n_points",)
_NAMES = {"model.depth": "depth", "model.width": "width"}


def _fit(x, y, groups, n_boot, seed=0):
    """A saturating fit c + a x^-b with the claim b > 0 (1 - R² falls), or (None, why) when
    there are too few points; a fit that is not resolved (at the bound |b| = B_MAX: a step or a
    flat curve; CI nan or spanning 0) is returned with its status as the note."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_scaling(x, y, groups, form="saturating", n_boot=n_boot, seed=seed)
    except (ValueError, RuntimeError) as exc:
        return None, f"no fit: {exc}"
    fit.claim_sign = 1
    if fit.status != "ok":
        return fit, (f"no law: fit unresolved ({fit.status}; 1-R² spans "
                     f"{np.min(y):.3g}..{np.max(y):.3g})")
    return fit, ""


def _trivial_error(rows: pl.DataFrame) -> pl.DataFrame:
    """(predictor, position, err = 1 - R²) of the trivial predictors, means over members."""
    triv = final_rows(rows, "r2", test_dist=None, position="all").filter(
        pl.col("predictor").is_in(list(TRIVIAL)) & (pl.col("statistic") == STATISTIC))
    return triv.group_by("predictor", "position").agg((1 - pl.col("value")).mean().alias(
        "err")).sort("predictor", "position")


@dataclass(frozen=True)
class ScalingData:
    """What `deep_scaling_figure` draws, shaped and fitted from the rows (no drawing): the
    model's final 1 - R² rows, those at the training length, the trivial predictors' errors,
    the regime table, a fit per curve (x: depth, curves: widths; or the other way round where
    there are more widths than depths), the best model and its fit against k."""

    ok: pl.DataFrame  # final r2 rows of the model, with err = 1 - R²
    n_train: int
    at_train: pl.DataFrame  # ok at position n_train
    trivial: pl.DataFrame  # predictor, position, err
    regime: pl.DataFrame
    x: str  # the left panel's x: model.depth, or model.width
    by: str  # one curve per value of this: the other of the two
    curves: list[tuple]  # (value of `by`, points by x, fit or None) in order
    curve_notes: list[str]
    best: dict  # model.depth, model.width, err of the best model at n_train
    fit_k: Fit | None
    k_note: str


def scaling_data(rows: pl.DataFrame, n_boot: int = 1000) -> ScalingData:
    """The data of `deep_scaling_figure`: ValueError without final r2 rows of ok members."""
    ok = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "r2")
                     & (pl.col("predictor") == "model") & (pl.col("statistic") == STATISTIC))
    ok = ok.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    if ok.height == 0:
        raise ValueError("deep_scaling: no final r2 rows of ok members")
    n_train = int(ok["task.n_points"].max())
    ok = ok.with_columns((1 - pl.col("value")).alias("err"))
    trivial = _trivial_error(rows)
    regime = cell_regime(final_rows(rows, "r2", test_dist=None, position="all").filter(
        pl.col("position") == n_train), ["model.width", "model.depth"], statistic=STATISTIC,
        metric="r2")
    curves, notes = [], []
    at_train = ok.filter(pl.col("position") == n_train)
    x, by = ("model.depth", "model.width")
    if at_train[by].n_unique() > at_train[x].n_unique():
        x, by = by, x
    for value in sorted(at_train[by].unique().to_list()):
        pts = at_train.filter(pl.col(by) == value).sort(x)
        learned = regime.filter((pl.col(by) == value) & pl.col("learned"))[x]
        used = pts.filter(pl.col(x).is_in(learned.implode()))
        if used[x].n_unique() < MIN_LEARNED_X:  # a law on unlearned cells tests nothing
            fit, why = None, (f"no law tested: {used[x].n_unique()} learned {_NAMES[x]}(s), "
                              f"a law needs {MIN_LEARNED_X}")
        else:
            fit, why = _fit(used[x].to_numpy(), used["err"].to_numpy(),
                            used["seed"].to_numpy(), n_boot)
        scope = f"fit over the learned {_NAMES[x]}s {sorted(set(used[x].to_list()))}" \
            if fit is not None and used.height < pts.height else ""
        curves.append((value, pts, fit))
        text = f"{why}; {scope}" if why and scope else why or \
            f"1-R² = {fit.label()}" + (f" ({scope})" if scope else "")
        notes.append(f"{_NAMES[by]} {value}: {text}")
    best = at_train.group_by("model.depth", "model.width").agg(pl.col("err").mean()).sort(
        "err").row(0, named=True)
    curve = ok.filter((pl.col("model.depth") == best["model.depth"])
                      & (pl.col("model.width") == best["model.width"])
                      & (pl.col("position") >= 1) & (pl.col("position") <= n_train))
    fit_k, note_k = _fit(curve["position"].to_numpy(), curve["err"].to_numpy(),
                         curve["seed"].to_numpy(), n_boot)
    k_note = f"best model vs k: {note_k or '1-R² = ' + fit_k.label()}"
    return ScalingData(ok, n_train, at_train, trivial, regime, x, by, curves, notes, best,
                       fit_k, k_note)


def _draw_size(ax, data: ScalingData) -> None:
    """Left panel: 1 - R² at the training length vs depth (or width), one curve and fit per
    width (or depth)."""
    n_train, at_train, regime, x, by = data.n_train, data.at_train, data.regime, data.x, data.by
    for value, pts, fit in data.curves:
        line, _ = seed_band(ax, pts, x, "err", label=f"{_NAMES[by]} {value}",
                            linestyle="none", errorbars=True)
        out = regime.filter((pl.col(by) == value) & pl.col("learned").not_())
        hollow(ax, out[x], 1 - out["model"], line.get_color())
        if fit is not None:
            xs = pts[x].to_numpy()
            draw_fit(ax, fit, (xs.min(), xs.max()),
                     label=fit_label(fit, f"{_NAMES[by][0]}{value}"),
                     color=line.get_color())
    for predictor, value in data.trivial.filter(pl.col("position") == n_train).select(
            "predictor", "err").iter_rows():
        baseline_line(ax, predictor, value, f" (1 - R², k = {n_train})")
    ax.set_xticks(sorted(at_train[x].unique().to_list()))
    if at_train["err"].max() < 3 * at_train["err"].min():  # < half a decade: linear y reads
        ax.set_yscale("linear")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    panel_note(ax, [textwrap.fill(n, 55) for n in data.curve_notes if "no " in n],
               loc="upper right", fontsize=6)  # the points sit low: the best are the widest
    part = regime.with_columns(pl.format(f"{_NAMES[by]} {{}}", by).alias("w"))
    regime_note(ax, regime_notes(part, group="w", x=x))
    ax.set_xlabel("transformer depth L" if x == "model.depth" else "transformer width")
    ax.set_ylabel(f"1 - R² ({STATISTIC}) at k = {n_train}")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), **legend_title([ax]))


def _draw_k(ax, data: ScalingData) -> None:
    """Right panel: 1 - R² vs k for every model; a fit c + a k^-b of the best one (k >= 1)."""
    ok, best, n_train = data.ok, data.best, data.n_train
    models = ok.group_by("model.depth", "model.width", "position").agg(pl.col("err").mean())
    for (depth, width), curve in sorted(models.group_by("model.depth", "model.width"),
                                        key=lambda kv: kv[0]):
        curve = curve.filter(pl.col("position") >= 1).sort("position")
        is_best = depth == best["model.depth"] and width == best["model.width"]
        ax.plot(curve["position"], curve["err"], lw=1.4 if is_best else 0.6,
                alpha=1 if is_best else 0.4, color="k" if is_best else None,
                label=f"best: L={depth}, w={width}" if is_best else None)
    for predictor in TRIVIAL:
        part = data.trivial.filter((pl.col("predictor") == predictor)
                                   & (pl.col("position") >= 1))
        if part.height:
            baseline_curve(ax, predictor, part["position"], part["err"])
    if data.fit_k is not None:
        draw_fit(ax, data.fit_k, (1, float(ok["position"].max())),
                 label=fit_label(data.fit_k, f"fit k ≤ {n_train}"), color=PALETTE[3])
    ax.axvline(n_train, color="0.6", lw=0.8, ls="-.")
    grid_ticks(ax, ok["position"].filter(ok["position"] >= 1).unique().to_list())
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel(f"1 - R² ({STATISTIC})")
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))


def deep_scaling_figure(rows: pl.DataFrame, out_dir, name: str = "deep_scaling",
                        n_boot: int = 1000, **_context) -> dict:
    """1 - R² at the training length vs depth per width (or vs width per depth), with a
    saturating fit per curve;
    1 - R² vs k per model with a fit of the best; the trivial predictors' 1 - R² on both.
    Fits that are not resolved are drawn dotted and labelled "unresolved (why)"."""
    data = scaling_data(rows, n_boot)
    style()
    fig, (ax_l, ax_k) = plt.subplots(1, 2, figsize=(13, 3.8))  # legends right of each panel
    log_axes(ax_l)
    log_axes(ax_k)
    _draw_size(ax_l, data)
    _draw_k(ax_k, data)
    fig.suptitle(study_title(rows), fontsize=9)
    fig.tight_layout()
    paths = save(fig, out_dir, name)
    plt.close(fig)
    fits = [fit for _, _, fit in data.curves if fit is not None]
    if data.fit_k is not None:
        fits.append(data.fit_k)
    best = data.best
    # "fit" stays None: these fits are of different curves, not alternative forms of one
    return {"fit": None, "fits": fits, "excluded": 0, "paths": paths, "regime": data.regime,
            "best_depth": best["model.depth"], "best_width": best["model.width"],
            "best_err": float(best["err"]), "note": "; ".join([*data.curve_notes, data.k_note])}


SCALING_FIGURES = {"deep_scaling": deep_scaling_figure}
