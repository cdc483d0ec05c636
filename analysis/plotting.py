"""The shared look of every figure: style, seed bands, fitted curves, reference lines, log
axes, save.

    style(); fig, ax = plt.subplots(); log_axes(ax)
    seed_band(ax, frame, "depth", "value", label="transformer")  # median, min–max over seeds
    ax.legend(title=seed_caption(ax))    # "line: median over seeds / band: min–max ... (n = 3)"
    draw_fit(ax, fit, (1, 128))          # the fit, its 95% band, dashed where extrapolated
    reference_line(ax, 1e-9, "GD"); power_reference(ax, 1, 1e-1, -1.0, "slope -1")
    save(fig, out_dir, "name")            # name.png and name.pdf

Every model in a figure that compares models is drawn with `seed_band` (or `seed_level` for a
level that does not vary along x): the line is the median over seeds, the band the min–max
over seeds (the project's spread of a cell, analysis.verdicts), and the legend title
(`seed_caption`; `legend_right` and `figure_legend` add it themselves) says so and gives n.
A band over test prompts (`band` with per-prompt q25/q75) means something else and is never
drawn shaded next to a seed band: such figures draw the prompt IQR as ticks
(`prompt_iqr`) and say so.

Figures render off-screen (the Agg backend) and are saved as PNG and PDF side by side.
Legends of fitted curves read like "b = 0.35 [0.32, 0.37]" (`fit_label`); a fit that is not
resolved (`analysis.fit.fit_status`) reads "unresolved (at bound b=20)" and is drawn dotted.

One look everywhere: the colour-blind-safe `PALETTE`; every baseline predictor its own colour,
dashes and marker (`LOOKS`: OLS / GD per precision, the trivial predictors thin and grey) and
its value in the legend (`baseline_line`); human titles per study (`TITLES`, `study_title`);
the learned-regime verdict boxed on the panel (`regime_note`), and a ring around points
outside the learned regime (`hollow`).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.fit import Fit
from analysis.fit_forms import FORMS
from analysis.frames import REFERENCES, reference_levels
from analysis.regime import RIDGE_SOLVES, trivial_levels
from analysis.spreads import seed_spreads

FORMATS = ("png", "pdf")
DPI = 200
# seaborn's colour-blind-safe palette: every colour in every figure comes from it (or grey).
PALETTE = ("#0173b2", "#de8f05", "#029e73", "#d55e00", "#cc78bc", "#ca9161", "#fbafe4",
           "#949494", "#ece133", "#56b4e9")
# One color per predictor label, the same in every figure.
COLORS = {
    "model": PALETTE[0],
    "fit": "#111111",
    "ols_float32": PALETTE[3],
    "ols_float64": PALETTE[4],
    "gd_float32": PALETTE[2],
    "gd_float64": PALETTE[5],
}


@dataclass(frozen=True)
class Look:
    """How a baseline predictor is drawn: legend name, colour, dashes, marker, line width and
    where along a horizontal line its markers sit (axes fractions, distinct per predictor so
    that coinciding levels, e.g. OLS and GD in float32, stay visible)."""

    label: str
    color: str
    dash: object
    marker: str
    width: float = 1.2
    marks: tuple[float, ...] = (0.1, 0.5, 0.9)


def _marks(phase: float) -> tuple[float, ...]:
    """Marker positions along a horizontal line: phase, phase + 0.4, phase + 0.8 (< 1)."""
    return tuple(round(phase + k * 0.4, 3) for k in range(3) if phase + k * 0.4 < 1.0)


# every predictor its own phase: markers of coinciding lines never sit on each other
LOOKS = {
    "ols_float32": Look("OLS float32", PALETTE[3], (0, (1, 1.5)), "v", 1.5, _marks(0.03)),
    "ols_float64": Look("OLS float64", PALETTE[4], (0, (1, 3)), "^", 1.5, _marks(0.08)),
    "gd_float32": Look("GD float32", PALETTE[2], (0, (5, 2)), "s", 1.0, _marks(0.13)),
    "gd_float64": Look("GD float64", PALETTE[5], (0, (2, 2)), "D", 1.0, _marks(0.18)),
    "gd_tuned_float64": Look("GD (tuned η)", PALETTE[2], (0, (5, 2)), "s", 1.2, _marks(0.01)),
    "newton_float64": Look("Newton–Schulz (tuned α)", PALETTE[3], "-.", "P", 1.2, _marks(0.05)),
    "teacher_net_float32": Look("trained N-layer net (best epoch)", PALETTE[1], (0, (5, 2)),
                                "o", 1.2, _marks(0.11)),
    # trivial predictors (analysis.verdicts.TRIVIAL): thin grey, one dash and marker each
    "zero": Look("zero predictor", "0.55", (0, (1, 2)), "x", 0.9, _marks(0.23)),
    "prompt_mean": Look("prompt mean", "0.30", (0, (6, 2, 1, 2)), "+", 0.9, _marks(0.28)),
    "ridge": Look("ridge", "0.15", (0, (3, 1, 1, 1, 1, 1)), "1", 0.9, _marks(0.33)),
    "no_retrieval": Look("no retrieval", "0.40", (0, (4, 1, 1, 1)), "|", 0.9, _marks(0.38)),
}
TRIVIAL_LOOKS = ("zero", "prompt_mean", "ridge", "no_retrieval")


def look(predictor: str) -> Look:
    """The Look of a baseline predictor (a neutral one for an unknown name)."""
    return LOOKS.get(predictor, Look(predictor, "0.5", "--", "o", 1.0))


def style() -> None:
    """Seaborn 'ticks' theme, paper context, the colour-blind-safe palette as the default
    colour cycle, a light grid, the Agg backend (figures are files, never windows); call
    before building a figure."""
    matplotlib.use("Agg")
    sns.set_theme(context="paper", style="ticks", font_scale=1.1, palette="colorblind")
    plt.rcParams.update({
        "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
        "legend.frameon": False, "legend.fontsize": 8,
        "figure.figsize": (5.0, 3.6), "figure.dpi": 100, "savefig.bbox": "tight",
        "pdf.fonttype": 42,  # editable text in PDFs
    })


def band(ax: Axes, x, median, lo, hi, label: str, color: str | None = None):
    """A median line with markers over a shaded [lo, hi] band (e.g. the IQR); returns the line."""
    x, median = np.asarray(x, dtype=float), np.asarray(median, dtype=float)
    (line,) = ax.plot(x, median, marker="o", markersize=4, label=label, color=color)
    ax.fill_between(x, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float),
                    color=line.get_color(), alpha=0.2, linewidth=0)
    return line


SEED_SPREAD = "min–max over seeds"  # the project's spread of a cell (analysis.verdicts)


def seed_band(ax: Axes, frame: pl.DataFrame, x: str, y: str = "value", label: str | None = None,
              color=None, seed: str = "seed", *, errorbars: bool = False, alpha: float = 0.2,
              **line_kw):
    """The seed spread of `y` along `x`, the one way every figure shows it: a line through
    each x's median over seeds and a shaded band from the seeds' min to their max (error bars
    instead with errorbars=True, for point markers). A seed's value in a cell is the median
    of its rows there (analysis.verdicts.seed_spreads); NaN / null values are left out. With
    one seed at every x there is no band and the label ends in "(1 seed)". The seed counts
    are remembered on the axes for `seed_caption` (the legend title saying what line and
    band mean). line_kw go to ax.plot (marker "o", markersize 4 unless given). Returns
    (line, table: x, n_seeds, min, q25, median, q75, max, values)."""
    value = pl.col(y).cast(pl.Float64)
    data = frame.filter(pl.col(x).is_not_null() & value.is_not_null() & value.is_not_nan())
    data = data.with_columns(value.alias(y))
    table = seed_spreads(data, [x], value=y, seed=seed)
    counts = table["n_seeds"].to_list()
    single = max(counts, default=0) <= 1
    if label is not None and single:
        label = f"{label} (1 seed)"
    line_kw.setdefault("marker", "o")
    line_kw.setdefault("markersize", 4)
    xs = table[x].cast(pl.Float64).to_numpy()
    mid = table["median"].to_numpy()
    (line,) = ax.plot(xs, mid, label=label, color=color, **line_kw)
    if not single:
        lo, hi = table["min"].to_numpy(), table["max"].to_numpy()
        if errorbars:
            ax.errorbar(xs, mid, yerr=[mid - lo, hi - mid], fmt="none",
                        ecolor=line.get_color(), elinewidth=0.9, capsize=2.5, alpha=0.8,
                        zorder=line.get_zorder())
        else:
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=alpha, linewidth=0)
    _remember_seeds(ax, counts, "bars" if errorbars else "band")
    return line, table


def seed_level(ax: Axes, frame: pl.DataFrame, y: str = "value", label: str | None = None,
               color=None, seed: str = "seed", linestyle="--", linewidth: float = 1.0,
               alpha: float = 0.12):
    """A model's level that does not vary along x (e.g. a reference architecture) with its
    seed spread: a horizontal line at the median over seeds over a horizontal band from the
    seeds' min to max (none, and "(1 seed)" in the label, with one seed); the same table as
    `seed_band` (one row, no x). Returns (line, table)."""
    value = pl.col(y).cast(pl.Float64)
    data = frame.filter(value.is_not_null() & value.is_not_nan()).with_columns(value.alias(y))
    table = seed_spreads(data, [], value=y, seed=seed)
    n = int(table["n_seeds"][0]) if table.height else 0
    if label is not None and n <= 1:
        label = f"{label} (1 seed)"
    mid = float(table["median"][0]) if table.height else math.nan
    line = ax.axhline(mid, color=color, linestyle=linestyle, linewidth=linewidth, label=label)
    if n > 1:
        ax.axhspan(float(table["min"][0]), float(table["max"][0]), color=line.get_color(),
                   alpha=alpha, linewidth=0)
    _remember_seeds(ax, [n], "band")
    return line, table


PROMPT_IQR = "ticks (–)"  # how `prompt_iqr` draws the spread over test prompts


def prompt_iqr(ax: Axes, x, q25, q75, color=None):
    """The spread over test prompts of a line (its per-prompt q25 and q75, medians over
    seeds) as short horizontal ticks of its colour at each x, no line and never shaded, so
    that it cannot be read as the seed band or a fitted curve; `seed_caption` then says what
    the ticks are. Returns the markers' Line2D."""
    x = np.asarray(x, dtype=float)
    ys = np.concatenate([np.asarray(q25, dtype=float), np.asarray(q75, dtype=float)])
    (ticks,) = ax.plot(np.concatenate([x, x]), ys, linestyle="none", marker="_",
                       markersize=7, markeredgewidth=1.0, color=color, alpha=0.8)
    ax.__dict__["_prompt_iqr"] = True
    return ticks


def _remember_seeds(ax: Axes, counts, kind: str) -> None:
    ax.__dict__.setdefault("_seed_counts", set()).update(int(c) for c in counts)
    if max(counts, default=0) > 1:
        ax.__dict__.setdefault("_seed_kinds", set()).add(kind)


def seed_caption(axes, prompt_iqr: str | None = None) -> str:
    """What the lines and bands drawn by `seed_band` / `seed_level` on these axes mean, for a
    legend title: "line: median over seeds / band: min–max over seeds (n = 3)" ("n = 2–3"
    where cells differ; "1 seed: no spread over seeds" when no cell has more); prompt_iqr: how
    the spread over test prompts is drawn, if it is (default: "ticks (–)" where `prompt_iqr`
    drew on these axes), says so on its own line so the two spreads are never confused. ""
    when no seed band was drawn."""
    if isinstance(axes, Axes):
        axes = [axes]
    counts = set().union(*(a.__dict__.get("_seed_counts", set()) for a in axes))
    kinds = set().union(*(a.__dict__.get("_seed_kinds", set()) for a in axes))
    counts.discard(0)
    if not counts:
        return ""
    lo, hi = min(counts), max(counts)
    if hi <= 1:
        lines = ["1 seed: no spread over seeds"]
    else:
        n = f"{hi}" if lo == hi else f"{lo}–{hi}"
        kind = "/".join(k for k in ("band", "bars") if k in kinds)
        lines = ["line: median over seeds", f"{kind}: {SEED_SPREAD} (n = {n})"]
    if prompt_iqr is None and any(a.__dict__.get("_prompt_iqr") for a in axes):
        prompt_iqr = PROMPT_IQR
    if prompt_iqr:
        lines.append(f"{prompt_iqr}: IQR over prompts (median over seeds)")
    return "\n".join(lines)


LEGEND_NAMES = {"broken_power": "broken power law"}  # forms whose formula is too long


def fit_label(fit: Fit, prefix: str | None = None) -> str:
    """Legend text of a fit: its form and exponents with 95% CIs, e.g.
    "fit a x^-b: b = 0.35 [0.32, 0.37]"; a fit whose `fit.status` is not "ok" (at a bound,
    wrong sign, CI nan or spanning 0) reads "fit a x^-b: unresolved (at bound b=20)"."""
    if prefix is None:
        prefix = f"fit {LEGEND_NAMES.get(fit.form) or FORMS[fit.form].formula}"
    status = fit.status
    text = fit.label() if status == "ok" else f"unresolved ({status})"
    return f"{prefix}: {text}" if prefix else text


def draw_fit(ax: Axes, fit: Fit, x_range: tuple[float, float], label: str | None = None,
             color: str | None = None, band_level: float | None = 0.95, n: int = 200):
    """The fitted curve over x_range (log-spaced), solid over the fitted x range and dashed
    where it extrapolates, with the bootstrap band of predicted curves; returns the solid
    line (its label is `fit_label(fit)` unless given). A fit that is not resolved
    (`fit.status` != "ok") is drawn thin and dotted over its fitted range only, without a band
    or extrapolation, and its label says "unresolved (why)" whatever label was given."""
    lo, hi = float(x_range[0]), float(x_range[1])
    grid = np.geomspace(lo, hi, n)
    color = color or COLORS["fit"]
    fx_lo, fx_hi = fit.x_range
    if not np.isfinite(fx_lo):
        fx_lo, fx_hi = lo, hi
    inside = (grid >= fx_lo * (1 - 1e-9)) & (grid <= fx_hi * (1 + 1e-9))
    text = label if label is not None else fit_label(fit)
    y = fit.predict(grid)
    status = fit.status
    if status != "ok":
        prefix = text.split(":", 1)[0] if ":" in text else "fit"
        (line,) = ax.plot(np.where(inside, grid, np.nan), y, color=color, linewidth=0.8,
                          linestyle=":", alpha=0.7, label=f"{prefix}: unresolved ({status})")
        return line
    (line,) = ax.plot(np.where(inside, grid, np.nan), y, color=color, linewidth=1.0, label=text)
    for part in (grid < fx_lo, grid > fx_hi):
        if part.any():
            edge = np.flatnonzero(part)
            idx = np.unique(np.clip(np.r_[edge, edge.min() - 1, edge.max() + 1], 0, n - 1))
            ax.plot(grid[idx], y[idx], color=color, linewidth=1.0, linestyle="--")
    if band_level is not None and fit.n_boot:
        b_lo, b_hi = fit.predict_band(grid, band_level)
        ax.fill_between(grid, b_lo, b_hi, color=color, alpha=0.12, linewidth=0)
    return line


def reference_line(ax: Axes, y: float, label: str, style: str = "--", color: str | None = None):
    """A horizontal reference (a baseline's error); skipped (None) if y is not positive-finite
    on a log axis."""
    if not np.isfinite(y) or (ax.get_yscale() == "log" and y <= 0):
        return None
    return ax.axhline(y, linestyle=style, linewidth=1.0, label=label, color=color)


def power_reference(ax: Axes, x0: float, y0: float, slope: float, label: str,
                    x_range: tuple[float, float] | None = None, color: str = "0.5"):
    """A guide line y = y0 (x/x0)^slope (a straight line of that slope on log-log axes)."""
    lo, hi = x_range if x_range is not None else ax.get_xlim()
    grid = np.geomspace(max(lo, 1e-300), hi, 50)
    (line,) = ax.plot(grid, y0 * (grid / x0) ** slope, linestyle="-.", linewidth=0.8,
                      color=color, label=label)
    return line


def log_axes(ax: Axes, x: bool = True, y: bool = True) -> None:
    """Log scales on the chosen axes (base 10)."""
    if x:
        ax.set_xscale("log")
    if y:
        ax.set_yscale("log")


def save(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write <out_dir>/<name>.png and .pdf (creating out_dir); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in FORMATS:
        path = out / f"{name}.{fmt}"
        fig.savefig(path, dpi=DPI)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------- baselines


def _positive(ax: Axes, y: float) -> bool:
    return bool(np.isfinite(y)) and not (ax.get_yscale() == "log" and y <= 0)


def baseline_line(ax: Axes, predictor: str, y: float, note: str = "", value: bool = True,
                  label: str | None = None, inline: bool = False):
    """A baseline predictor's level as a horizontal line across the panel in its `Look`
    (markers at its own positions along the line), labelled "OLS float32 = 4.2e-14" (note
    appended to the name); inline: the value is written on the line (at its first marker)
    and the legend names the predictor only, for panels whose levels differ under one shared
    legend. None (nothing drawn) when y is not positive-finite on a log axis."""
    if not _positive(ax, y):
        return None
    lk = look(predictor)
    marks = sorted(set(lk.marks))
    xs = sorted({0.0, 1.0, *marks})
    name = label if label is not None else f"{lk.label}{note}"
    text = f"{name} = {y:.2g}" if value and not inline else name
    (line,) = ax.plot(xs, [y] * len(xs), transform=ax.get_yaxis_transform(), color=lk.color,
                      linestyle=lk.dash, linewidth=lk.width, marker=lk.marker, markersize=4,
                      markevery=[xs.index(m) for m in marks], label=text,
                      zorder=1.5 if predictor in TRIVIAL_LOOKS else 2)
    written = ax.__dict__.setdefault("_inline_levels", [])  # one number per level
    if inline and not any(abs(y - w) <= 1e-3 * abs(w) for w in written):
        written.append(y)
        ax.text(marks[0] if marks else 0.02, y, f" {y:.2g}", transform=ax.get_yaxis_transform(),
                fontsize=5.5, color=lk.color, ha="left", va="bottom")
    return line


def baseline_curve(ax: Axes, predictor: str, x, y, note: str = "", label: str | None = None):
    """A baseline predictor's values along x (e.g. per position or iteration) in its Look."""
    lk = look(predictor)
    (line,) = ax.plot(np.asarray(x, dtype=float), np.asarray(y, dtype=float), color=lk.color,
                      linestyle=lk.dash, linewidth=lk.width, marker=lk.marker, markersize=3,
                      label=label if label is not None else f"{lk.label}{note}")
    return line


def draw_references(ax, final: pl.DataFrame, statistic: str = "median", inline: bool = False
                    ) -> dict[str, float]:
    """OLS / GD levels of these final rows (their `statistic` over prompts, median over
    members; GD at its largest iteration count) and every trivial predictor's, each in its
    own Look with its value in the legend (inline: on the line); {predictor: level}. On tasks
    ridge solves (analysis.verdicts.RIDGE_SOLVES) its legend says so: a reference there, not
    a bar."""
    refs = reference_levels(final, statistic=statistic)
    out = {}
    for predictor in REFERENCES:
        if predictor in refs:
            value, iters = refs[predictor]
            baseline_line(ax, predictor, value, f" ({iters} it.)" if iters is not None else "",
                          inline=inline)
            out[predictor] = value
    out.update(trivial_lines(ax, trivial_levels(final, statistic), ridge_solves=ridge_solves(
        final), inline=inline))
    return out


def ridge_solves(rows: pl.DataFrame) -> bool:
    """Do these rows come from a task that ridge solves (least squares and its features)?"""
    if "task.name" not in rows.columns:
        return False
    names = set(rows["task.name"].drop_nulls().unique().to_list())
    return bool(names) and names <= set(RIDGE_SOLVES)


def trivial_lines(ax: Axes, levels, ridge_solves: bool = False, inline: bool = False
                  ) -> dict[str, float]:
    """Each trivial predictor's level (a frame of predictor, value: see
    analysis.verdicts.trivial_levels) as a thin grey line; {predictor: level}. No rows (an
    old store): nothing drawn. ridge_solves: ridge's legend says "solves the task"."""
    out = {}
    for predictor, value in levels.select("predictor", "value").iter_rows():
        note = " (solves the task: not a bar)" if predictor == "ridge" and ridge_solves else ""
        if value is not None and baseline_line(ax, predictor, float(value), note,
                                               inline=inline) is not None:
            out[predictor] = float(value)
    return out


# ------------------------------------------------------------------ text on panels

TITLES = {
    # Liu et al. 2024 (least squares to high precision)
    "least_squares": "Liu et al. Fig 2: least squares, query MSE vs depth",
    "least_squares_depth_width": "Scale-up: least squares, query MSE vs depth x width x D",
    "ls_mixer_depth": "Liu et al. Figs 2, 10: least squares vs depth, Transformer vs BaseConv",
    "primitives_depth": "Liu et al. Figs 3, 8: READ / AFFINE / MULTIPLY vs depth, ± LayerNorm",
    "construction": "Liu et al. Fig 5: hand-built BaseConv GD vs GD",
    "features_depth": "Liu et al. Fig 6: error of w* vs depth, construction features k",
    "explicit_gradient": "Liu et al. Fig 7: explicit gradient and iterative inference",
    "multiply_heads": "Liu et al. Fig 4 (middle): MULTIPLY vs attention heads",
    "multiply_width": "Liu et al. Fig 4 (left): MULTIPLY vs attention width",
    "multiply_mlp": "Liu et al. Fig 4 (right): MULTIPLY vs MLP width",
    "multiply_steps": "Liu et al. Fig 9: MULTIPLY vs training steps",
    "icl_prefix": "Liu et al. Fig 1: MSE vs in-context examples, model vs OLS",
    "least_squares_heads": "Least squares vs attention heads (Liu et al. Fig 4 setting)",
    "least_squares_width": "Least squares vs width (Liu et al. Fig 4 setting)",
    "least_squares_steps": "Least squares vs training steps (Liu et al. Fig 9 setting)",
    "fixed_n_points": "Least squares vs prompt length N",
    # Mousavi-Hosseini et al. (sparse token retrieval)
    "str_1": "Mousavi-Hosseini et al. Fig 1a: samples to reach a test MSE on 1STR",
    "str_simple": "Mousavi-Hosseini et al. Fig 1b: samples to reach a test MSE on simple-1STR",
    "str_heads": "Mousavi-Hosseini et al. Prop. 3: qSTR (q = 2) with H attention heads",
    "str_attention": "Mousavi-Hosseini et al. Fig 2: learned |W_QK|",
    # Wu et al. 2024 (transformers as deep optimizers)
    "teacher_shift": "Wu et al. Figs 1-2: R² vs in-context examples under teacher shift",
    "transformer_depth": "Wu et al. Fig 3: R² vs transformer depth",
    "scaleup": "Scale-up of Wu et al.: 1 - R² vs depth x width",
    # AlgoFormer
    "examples": "AlgoFormer Fig 2: error vs in-context examples",
    "loops": "AlgoFormer Fig 3: error vs inference loops",
    "layers_heads": "AlgoFormer Fig 4: error vs layers and heads",
    "vs_newton": "AlgoFormer Fig 5: AlgoFormer vs GD and Newton–Schulz",
    # Ahn et al. 2023 (preconditioned GD)
    "fig1_sparse": "Ahn et al. Figs 1-2: sparse LSA learns preconditioned GD",
    "fig3_sparse_b": "Ahn et al. Figs 3-4: LSA with B",
    "lsa_layers": "Ahn et al.: trained LSA loss vs layers L, next to f_L*",
    "lsa_context": "Ahn et al.: trained LSA loss vs context length n, next to f_L*",
}


def study_title(rows, suffix: str = "") -> str:
    """A human title for the rows' study (`TITLES`, else "sweep/study"), e.g. "Liu et al.
    Figs 2, 10: least squares vs depth, Transformer vs BaseConv (float32)"."""
    studies = sorted(str(v) for v in rows["study"].drop_nulls().unique().to_list()) \
        if "study" in rows.columns else []
    if len(studies) == 1 and studies[0] in TITLES:
        title = TITLES[studies[0]]
    else:
        sweeps = sorted(str(v) for v in rows["sweep"].drop_nulls().unique().to_list()) \
            if "sweep" in rows.columns else []
        title = f"{'/'.join(sweeps) or '?'}/{'/'.join(studies) or '?'}"
    return f"{title} ({suffix})" if suffix else title


def panel_note(ax: Axes, lines, loc: str = "lower left", fontsize: float = 6.5):
    """Small grey text in a corner of the panel (lines joined by newlines); None if empty."""
    lines = [t for t in lines if t]
    if not lines:
        return None
    x, ha = (0.02, "left") if "left" in loc else (0.98, "right")
    y, va = (0.02, "bottom") if "lower" in loc else (0.98, "top")
    return ax.text(x, y, "\n".join(lines), transform=ax.transAxes, ha=ha, va=va,
                   fontsize=fontsize, color="0.3", zorder=9,
                   bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "alpha": 0.7,
                         "edgecolor": "none"})


def regime_note(ax: Axes, lines, loc: str = "below", width: int = 64):
    """The learned-regime verdict of a panel ("not testable at this scale: ..."), boxed in
    dark red so a reader cannot miss it: under the panel's x label ("below", where it hides no
    data) or in a corner ("upper left", ...), lines wrapped at `width` characters; None when
    there is nothing to say."""
    lines = [textwrap.fill(t, width, subsequent_indent="  ") for t in lines if t]
    if not lines:
        return None
    box = {"boxstyle": "round,pad=0.25", "facecolor": "white", "alpha": 0.85,
           "edgecolor": "#8b0000", "linewidth": 0.6}
    if loc == "below":
        return ax.annotate("\n".join(lines), xy=(0.0, 0.0), xycoords="axes fraction",
                           xytext=(0, -38), textcoords="offset points", ha="left", va="top",
                           fontsize=6.5, color="#8b0000", bbox=box, annotation_clip=False)
    x, ha = (0.02, "left") if "left" in loc else (0.98, "right")
    y, va = (0.98, "top") if "upper" in loc else (0.02, "bottom")
    return ax.text(x, y, "\n".join(lines), transform=ax.transAxes, ha=ha, va=va, fontsize=6.5,
                   color="#8b0000", zorder=10, bbox=box)


NOT_LEARNED_LABEL = "ring: not in the learned regime"


def hollow(ax: Axes, x, y, color) -> None:
    """A ring around each point outside the learned regime (the point itself stays visible),
    and one legend entry saying what a ring means."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0:
        return
    labels = {h.get_label() for h in ax.get_lines()}
    ax.plot(x, y, linestyle="none", marker="o", markersize=9, markerfacecolor="none",
            markeredgecolor=color, markeredgewidth=1.1, zorder=4)
    if NOT_LEARNED_LABEL not in labels:
        ax.plot([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="none",
                markeredgecolor="0.3", label=NOT_LEARNED_LABEL)


# ------------------------------------------------------------------- shared layout


def grid_ticks(ax: Axes, values) -> None:
    """Ticks at a small grid's own values (depths, widths) on a log x axis."""
    values = sorted({float(v) for v in values if v is not None and v > 0})
    if values and ax.get_xscale() == "log" and len(values) <= 12 and max(values) <= 4096:
        ax.set_xticks(values)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())


def palette(labels: list[str]) -> dict[str, object]:
    """One colour-blind-safe colour per label (the model colour when there is one label)."""
    if len(labels) == 1:
        return {labels[0]: COLORS["model"]}
    colors = sns.color_palette("colorblind", max(len(labels), 1))
    return dict(zip(labels, colors[:len(labels)], strict=True))


def _handles(axes) -> dict[str, object]:
    seen: dict[str, object] = {}
    for a in axes:
        for handle, label in zip(*a.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    return seen


def legend_title(axes, title: str | None = None) -> dict:
    """Legend keyword arguments for a title: `title`, else the seed caption of `axes`
    (`seed_caption`); {} when there is neither."""
    text = title if title is not None else seed_caption(list(axes))
    return {"title": text, "title_fontsize": 6.5, "alignment": "left"} if text else {}


def legend_right(axes, ax, title: str | None = None, **kwargs) -> None:
    """One legend right of `ax` with every labelled artist of `axes` (duplicates once),
    titled with `title` or the axes' seed caption."""
    seen = _handles(axes)
    if seen:
        ax.legend(list(seen.values()), list(seen), loc="center left", bbox_to_anchor=(1.01, 0.5),
                  **legend_title(axes, title), **kwargs)


def figure_legend(fig: Figure, axes, fontsize: float = 7, title: str | None = None) -> None:
    """One legend for a grid of small panels, right of the figure (no panel hides it),
    titled with `title` or the panels' seed caption."""
    axes = list(axes)
    seen = _handles(axes)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="center left",
                   bbox_to_anchor=(1.0, 0.5), fontsize=fontsize, **legend_title(axes, title))
