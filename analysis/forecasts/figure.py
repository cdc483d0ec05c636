"""Sealed forecasts against what was measured (analysis.forecasts.forecast), one log-log panel per
forecast: the medians the law was fitted to (grey), the sealed law (dashed), each forecast
point's 90% interval as an error bar around its prediction, coloured by its verdict, and the
measured median over seeds (black; a censored one as a triangle at its known bound, pointing
the way the truth lies).

    inputs, curves, points = forecast_frames(forecasts, scored_points)   # data shaping
    paths = draw_forecasts(inputs, curves, points, out_dir)              # drawing
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.fitting.forms import FORMS
from analysis.plotting import PALETTE, finish, log_axes, style

VERDICT_COLORS = {"covered": PALETTE[2], "miss": PALETTE[3], "censored, consistent": PALETTE[1],
                  "pending": "0.5"}
GRID = 60  # points of the sealed law drawn per panel


def _curve(doc: dict) -> pl.DataFrame:
    """The sealed law from the smallest fitted x to the largest forecast x."""
    form = FORMS[doc["fit"]["form"]]
    x_lo = doc["fit"]["x_range"][0]
    x_hi = max(p["x"] for p in doc["points"])
    grid = np.geomspace(x_lo, x_hi, GRID)
    log_y = form.log_model(form.from_params(doc["fit"]["params"]), np.log(grid))[0]
    metric = doc["measure"]["metric"]
    label = f"{metric} ({doc['measure']['statistic']})" if metric != "n_star" else \
        f"n* (threshold {doc['measure']['threshold']:g})"
    return pl.DataFrame({"forecast": doc["id"], "x": grid, "y": np.exp(log_y),
                         "x_label": doc["x"], "y_label": label})


def forecast_frames(forecasts: dict[str, dict], points: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(inputs: forecast, x, median; curves: forecast, x, y, x_label, y_label; points: the scored points of the
    verified forecasts, tampered ones left out) from the forecasts by id and the scored
    points (analysis.forecasts.score.POINT_SCHEMA)."""
    inputs = [{"forecast": fid, "x": float(p["x"]), "median": float(p["median"])}
              for fid, doc in forecasts.items() for p in doc["inputs"]["points"]]
    inputs_frame = pl.DataFrame(inputs, schema={"forecast": pl.String, "x": pl.Float64,
                                                "median": pl.Float64})
    curves = pl.concat([_curve(doc) for doc in forecasts.values()]) if forecasts else \
        pl.DataFrame(schema={"forecast": pl.String, "x": pl.Float64, "y": pl.Float64,
                             "x_label": pl.String, "y_label": pl.String})
    scored = points.filter(pl.col("forecast").is_in(list(forecasts)) & pl.col("x").is_not_null())
    return inputs_frame, curves, scored


def _measured(ax, row: dict) -> None:
    lo, hi = row["measured_lo"], row["measured_hi"]
    if lo is None:
        return
    if lo == hi:
        ax.plot(row["x"], lo, "o", color="black", ms=5, zorder=4)
    elif lo > 0:
        ax.plot(row["x"], lo, "^", color="black", ms=7, mfc="none", zorder=4)
    elif hi is not None and math.isfinite(hi):
        ax.plot(row["x"], hi, "v", color="black", ms=7, mfc="none", zorder=4)


def _panel(ax, fid: str, inputs: pl.DataFrame, curves: pl.DataFrame, points: pl.DataFrame
           ) -> None:
    inp = inputs.filter(pl.col("forecast") == fid)
    ax.plot(inp["x"], inp["median"], "o", color="0.55", ms=4, label="fitted (median)")
    cur = curves.filter(pl.col("forecast") == fid)
    ax.plot(cur["x"], cur["y"], "--", color="0.35", lw=1.0, label="sealed law")
    for row in points.filter(pl.col("forecast") == fid).iter_rows(named=True):
        color = VERDICT_COLORS.get(row["status"], "0.5")
        err = [[row["predicted"] - row["lo"]], [row["hi"] - row["predicted"]]]
        ax.errorbar([row["x"]], [row["predicted"]], yerr=err, fmt="s", color=color, capsize=4,
                    ms=5, label=row["status"])
        _measured(ax, row)
    ax.plot([], [], "o", color="black", ms=5, label="measured (median)")
    log_axes(ax)
    ax.set_title(fid, fontsize=9)
    if cur.height:
        ax.set_xlabel(cur["x_label"][0])
        ax.set_ylabel(cur["y_label"][0])
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7)


def draw_forecasts(inputs: pl.DataFrame, curves: pl.DataFrame, points: pl.DataFrame,
                   out_dir: str | Path, name: str = "forecasts") -> list[Path]:
    """One panel per forecast (see the module doc); writes <out_dir>/<name>.png|pdf."""
    style()
    ids = sorted(set(curves["forecast"].to_list()))
    cols = min(3, max(len(ids), 1))
    rows = max(1, math.ceil(len(ids) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, fid in zip(axes.flat, ids, strict=False):
        _panel(ax, fid, inputs, curves, points)
    for ax in list(axes.flat)[len(ids):]:
        ax.set_visible(False)
    fig.tight_layout()
    return finish(fig, out_dir, name)


def forecast_figure(forecasts: dict[str, dict], points: pl.DataFrame, out_dir: str | Path,
                    name: str = "forecasts") -> list[Path]:
    """Shape and draw: forecast intervals vs measured points (see the module doc)."""
    return draw_forecasts(*forecast_frames(forecasts, points), out_dir, name)
