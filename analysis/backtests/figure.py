"""The reliability figure of back-tested forecasts (analysis.backtests.backtest, the scoreboard): the
empirical coverage of each method's intervals against their nominal level, one line per
(source, method); the diagonal is perfect calibration, below it intervals too narrow.

    paths = reliability_figure({"synthetic": {"ours": {0.5: 0.52, ...}, ...}}, out_dir)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from analysis.plotting import PALETTE, finish, style

NAME = "backtest_reliability"
COLORS = {"ours": PALETTE[0], "last": PALETTE[3], "line": PALETTE[2]}
LABELS = {"ours": "ours (form mixture + local law, widened)", "last": "naive: last value",
          "line": "naive: log-log line through the last two"}
DASHES = ("-", "--", ":")


def reliability_figure(curves: dict, out_dir: str | Path, name: str = NAME,
                       counts: dict | None = None) -> list[Path]:
    """curves: {source: {method: {nominal: empirical}}} (or {method: {...}} for one source);
    counts: {source: n back-tests} for the legend. Writes <out_dir>/<name>.png|pdf."""
    if curves and all(isinstance(next(iter(v.values()), None), float) for v in curves.values()):
        curves = {"": curves}
    style()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, label="perfect calibration")
    for i, (source, methods) in enumerate(curves.items()):
        for method, points in methods.items():
            levels = sorted(points)
            n = f", n = {counts[source]}" if counts and source in counts else ""
            label = f"{source}: {LABELS.get(method, method)}{n}" if source else \
                LABELS.get(method, method)
            ax.plot(levels, [points[lev] for lev in levels], DASHES[i % len(DASHES)],
                    marker="o", ms=3.5, color=COLORS.get(method, "0.3"), label=label)
    ax.set_xlim(0.4, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("nominal level of the interval")
    ax.set_ylabel("empirical coverage of the measured value")
    ax.set_title("Back-tested forecasts: reliability", fontsize=10)
    ax.legend(loc="upper left", fontsize=6.5)
    return finish(fig, out_dir, name)
