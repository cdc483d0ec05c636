"""Baseline predictors on a panel, one look each: OLS / GD per precision, the tuned GD and
Newton–Schulz, the trained teacher-class net, and the trivial predictors thin and grey
(`LOOKS`); every level drawn across the panel with its value in the legend (`baseline_line`),
or along x (`baseline_curve`); `draw_references` draws a frame's OLS / GD and trivial levels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from matplotlib.axes import Axes

from analysis.plotting._core import PALETTE
from analysis.reading.frames import REFERENCES, reference_levels
from analysis.reading.regime import RIDGE_SOLVES, trivial_levels


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
    # trivial predictors (analysis.reading.regime.TRIVIAL): thin grey, one dash and marker each
    "zero": Look("zero predictor", "0.55", (0, (1, 2)), "x", 0.9, _marks(0.23)),
    "prompt_mean": Look("prompt mean", "0.30", (0, (6, 2, 1, 2)), "+", 0.9, _marks(0.28)),
    "ridge": Look("ridge", "0.15", (0, (3, 1, 1, 1, 1, 1)), "1", 0.9, _marks(0.33)),
    "no_retrieval": Look("no retrieval", "0.40", (0, (4, 1, 1, 1)), "|", 0.9, _marks(0.38)),
}
TRIVIAL_LOOKS = ("zero", "prompt_mean", "ridge", "no_retrieval")


def look(predictor: str) -> Look:
    """The Look of a baseline predictor (a neutral one for an unknown name)."""
    return LOOKS.get(predictor, Look(predictor, "0.5", "--", "o", 1.0))


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
    ridge solves (analysis.reading.regime.RIDGE_SOLVES) its legend says so: a reference there, not
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
    analysis.reading.regime.trivial_levels) as a thin grey line; {predictor: level}. No rows (an
    old store): nothing drawn. ridge_solves: ridge's legend says "solves the task"."""
    out = {}
    for predictor, value in levels.select("predictor", "value").iter_rows():
        note = " (solves the task: not a bar)" if predictor == "ridge" and ridge_solves else ""
        if value is not None and baseline_line(ax, predictor, float(value), note,
                                               inline=inline) is not None:
            out[predictor] = float(value)
    return out

