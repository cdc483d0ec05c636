"""The shared look of every figure: style, median+IQR bands, fitted curves, reference lines,
log axes, save.

    style(); fig, ax = plt.subplots(); log_axes(ax)
    seed_band(ax, frame, "depth", "value", label="transformer")   # median and IQR over seeds
    draw_fit(ax, fit, (1, 128))          # the fit, its 95% band, dashed where extrapolated
    reference_line(ax, 1e-9, "GD"); power_reference(ax, 1, 1e-1, -1.0, "slope -1")
    save(fig, out_dir, "name")            # name.png and name.pdf

Figures render off-screen (the Agg backend) and are saved as PNG and PDF side by side.
Legends of fitted curves read like "b = 0.35 [0.32, 0.37]" (`fit_label`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.fit import FORMS, Fit

FORMATS = ("png", "pdf")
DPI = 200
# One color per predictor label, the same in every figure.
COLORS = {
    "model": "#1f77b4",
    "fit": "#111111",
    "ols_float32": "#d62728",
    "ols_float64": "#ff9896",
    "gd_float32": "#2ca02c",
    "gd_float64": "#98df8a",
}


def style() -> None:
    """Seaborn 'ticks' theme, paper context, a light grid, the Agg backend (figures are files,
    never windows); call before building a figure."""
    matplotlib.use("Agg")
    sns.set_theme(context="paper", style="ticks", font_scale=1.1)
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


def seed_band(ax: Axes, frame: pl.DataFrame, x: str, y: str, label: str,
              color: str | None = None, seed: str = "seed"):
    """Median over seeds of y at each x, with the seeds' IQR (25-75%) as the band; returns
    (line, per-x table: x, median, q25, q75, n_seeds)."""
    table = (
        frame.group_by(x)
        .agg(pl.col(y).median().alias("median"), pl.col(y).quantile(0.25).alias("q25"),
             pl.col(y).quantile(0.75).alias("q75"), pl.col(seed).n_unique().alias("n_seeds"))
        .sort(x)
    )
    line = band(ax, table[x], table["median"], table["q25"], table["q75"], label, color)
    return line, table


LEGEND_NAMES = {"broken_power": "broken power law"}  # forms whose formula is too long


def fit_label(fit: Fit, prefix: str | None = None) -> str:
    """Legend text of a fit: its form and exponents with 95% CIs, e.g.
    "fit a x^-b: b = 0.35 [0.32, 0.37]"."""
    if prefix is None:
        prefix = f"fit {LEGEND_NAMES.get(fit.form) or FORMS[fit.form].formula}"
    return f"{prefix}: {fit.label()}" if prefix else fit.label()


def draw_fit(ax: Axes, fit: Fit, x_range: tuple[float, float], label: str | None = None,
             color: str | None = None, band_level: float | None = 0.95, n: int = 200):
    """The fitted curve over x_range (log-spaced), solid over the fitted x range and dashed
    where it extrapolates, with the bootstrap band of predicted curves; returns the solid
    line (its label is `fit_label(fit)` unless given)."""
    lo, hi = float(x_range[0]), float(x_range[1])
    grid = np.geomspace(lo, hi, n)
    color = color or COLORS["fit"]
    fx_lo, fx_hi = fit.x_range
    if not np.isfinite(fx_lo):
        fx_lo, fx_hi = lo, hi
    inside = (grid >= fx_lo * (1 - 1e-9)) & (grid <= fx_hi * (1 + 1e-9))
    text = label if label is not None else fit_label(fit)
    y = fit.predict(grid)
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
