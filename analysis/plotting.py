"""The shared look of every figure: style, median+IQR bands, reference lines, log axes, save.

Figures render off-screen (the Agg backend) and are saved as PNG and PDF side by side.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

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


def reference_line(ax: Axes, y: float, label: str, style: str = "--", color: str | None = None):
    """A horizontal reference (a baseline's error); skipped (None) if y is not positive-finite
    on a log axis."""
    if not np.isfinite(y) or (ax.get_yscale() == "log" and y <= 0):
        return None
    return ax.axhline(y, linestyle=style, linewidth=1.0, label=label, color=color)


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
