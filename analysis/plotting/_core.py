"""The shared look of every figure: style, palette, log axes and ticks, seed bands, fitted
curves, reference lines, save.

    style(); fig, ax = plt.subplots(); log_axes(ax)
    seed_band(ax, frame, "depth", "value", label="transformer")  # median, min–max over seeds
    ax.legend(title=seed_caption(ax))    # "line: median over seeds / band: min–max ... (n = 3)"
    draw_fit(ax, fit, (1, 128))          # the fit, its 95% band, dashed where extrapolated
    reference_line(ax, 1e-9, "GD"); power_reference(ax, 1, 1e-1, -1.0, "slope -1")
    save(fig, out_dir, "name")            # name.png and name.pdf (finish: save, then close)
    fig, axes = panel_grid(n_rows, n_cols, (2.6, 2.2))  # a grid of only the panels drawn

Every model in a figure that compares models is drawn with `seed_band` (or `seed_level` for a
level that does not vary along x): the line is the median over seeds, the band the min–max
over seeds (the project's spread of a cell, analysis.reading.spreads), and the legend title
(`seed_caption`; the legend helpers add it themselves) says so and gives n. A band over test
prompts (`band` with per-prompt q25/q75) means something else and is never drawn shaded next
to a seed band: such figures draw the prompt IQR as ticks (`prompt_iqr`) and say so.

Figures render off-screen (the Agg backend) and are saved as PNG and PDF side by side.
A grid of panels (`panel_grid`) holds only the panels it draws, sized by their number and never
smaller than the one-panel figure (`ONE_PANEL`); `save` wraps a title wider than its figure, so
the saved canvas (bbox "tight") does not grow sideways around narrow panels for a long title.
Legends of fitted curves read like "b = 0.35 [0.32, 0.37]" (`fit_label`); a fit that is not
resolved (`analysis.fitting.fit.fit_status`) reads "unresolved (at bound b=20)" and is drawn dotted.

One look everywhere: the colour-blind-safe `PALETTE` (one colour per label: `palette`). The
rest of the figure toolkit, by what it draws, in the sibling private modules of
analysis.plotting (the one public import): _baselines (every baseline predictor in its own
`Look`, its value in the legend), _notes (human titles, notes and the learned-regime verdict on
panels, rings around cells outside the learned regime), _legends (one legend per panel or
figure, titled with the seed caption).
"""

from __future__ import annotations

import math
import textwrap
from contextlib import contextmanager
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.fitting.fit import Fit
from analysis.fitting.forms import FORMS
from analysis.reading.spreads import seed_spreads

FORMATS = ("png", "pdf")
DPI = 200
ONE_PANEL = (5.0, 3.6)  # inches: a one-panel figure, and the smallest grid of panels
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


def style() -> None:
    """Seaborn 'ticks' theme, paper context, the colour-blind-safe palette as the default
    colour cycle, a light grid, the Agg backend (figures are files, never windows); call
    before building a figure."""
    matplotlib.use("Agg")
    sns.set_theme(context="paper", style="ticks", font_scale=1.1, palette="colorblind")
    plt.rcParams.update({
        "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.5,
        "legend.frameon": False, "legend.fontsize": 8,
        "figure.figsize": ONE_PANEL, "figure.dpi": 100, "savefig.bbox": "tight",
        "pdf.fonttype": 42,  # editable text in PDFs
    })


def band(ax: Axes, x, median, lo, hi, label: str, color: str | None = None):
    """A median line with markers over a shaded [lo, hi] band (e.g. the IQR); returns the line."""
    x, median = np.asarray(x, dtype=float), np.asarray(median, dtype=float)
    (line,) = ax.plot(x, median, marker="o", markersize=4, label=label, color=color)
    ax.fill_between(x, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float),
                    color=line.get_color(), alpha=0.2, linewidth=0)
    return line


SEED_SPREAD = "min–max over seeds"  # the project's spread of a cell (analysis.reading.spreads)


def seed_band(ax: Axes, frame: pl.DataFrame, x: str, y: str = "value", label: str | None = None,
              color=None, seed: str = "seed", *, errorbars: bool = False, alpha: float = 0.2,
              **line_kw):
    """The seed spread of `y` along `x`, the one way every figure shows it: a line through
    each x's median over seeds and a shaded band from the seeds' min to their max (error bars
    instead with errorbars=True, for point markers, and at a lone x). A seed's value in a cell is the median
    of its rows there (analysis.reading.spreads.seed_spreads); NaN / null values are left out. With
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
    lone = len(xs) == 1  # a band over one x has no width: bars show it
    if not single:
        lo, hi = table["min"].to_numpy(), table["max"].to_numpy()
        if errorbars or lone:
            ax.errorbar(xs, mid, yerr=[mid - lo, hi - mid], fmt="none",
                        ecolor=line.get_color(), elinewidth=0.9, capsize=2.5, alpha=0.8,
                        zorder=line.get_zorder())
        else:
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=alpha, linewidth=0)
        if lone:  # the bars' zero-width extent collapses the x limits onto the point
            x0 = float(xs[0])
            ax.set_xlim(*((x0 / 3, x0 * 3) if ax.get_xscale() == "log" and x0 > 0
                          else (x0 - 1, x0 + 1)))
    errorbars = errorbars or lone
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


def panel_grid(n_rows: int, n_cols: int, panel: tuple[float, float], **subplots_kw
               ) -> tuple[Figure, np.ndarray]:
    """A figure of n_rows x n_cols panels, the ones a figure draws and no more: panel (width,
    height) inches each, the figure at least `ONE_PANEL` so that one panel stays readable with
    its notes, and the constrained layout (it makes room for titles, labels and a wrapped
    suptitle); subplots_kw go to plt.subplots. Returns (fig, axes[n_rows, n_cols])."""
    size = (max(n_cols * panel[0], ONE_PANEL[0]), max(n_rows * panel[1], ONE_PANEL[1]))
    subplots_kw.setdefault("layout", "constrained")
    return plt.subplots(n_rows, n_cols, squeeze=False, figsize=size, **subplots_kw)


@contextmanager
def _titles_wrapped(fig: Figure):
    """A title wider than the figure wrapped at the figure's width while it is saved (its text
    restored after), so that a long title does not widen the saved canvas (bbox "tight")
    around narrow panels: a panel's title always (its lines go up, above the panel), the
    suptitle under the constrained layout, which makes room for its lines (another layout was
    fixed before the title grew). matplotlib's own wrap does not do: with bbox "tight" it
    wraps the drawn title at another width than the one it measured."""
    texts = [ax.title for ax in fig.axes]
    if fig._suptitle is not None and isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        texts.append(fig._suptitle)  # matplotlib keeps the suptitle's Text here (no getter)
    originals = [(text, text.get_text()) for text in texts]
    for text, original in originals:
        over = text.get_window_extent().width / fig.bbox.width  # > 1: wider than the figure
        if original and over > 1:
            lines = original.split("\n")
            chars = max(int(max(map(len, lines)) / over * 0.95), 10)
            text.set_text("\n".join(textwrap.fill(line, chars) for line in lines))
    try:
        yield
    finally:
        for text, original in originals:
            text.set_text(original)


def save(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """Write <out_dir>/<name>.png and .pdf (creating out_dir), titles wider than the figure
    wrapped at its width (`_titles_wrapped`); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    with _titles_wrapped(fig):
        for fmt in FORMATS:
            path = out / f"{name}.{fmt}"
            fig.savefig(path, dpi=DPI)
            paths.append(path)
    return paths


def finish(fig: Figure, out_dir: str | Path, name: str) -> list[Path]:
    """`save` the figure, then close it; returns the paths."""
    paths = save(fig, out_dir, name)
    plt.close(fig)
    return paths


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
