"""Fig 3 of Wu et al. 2024 (transformers as deep optimizers, App. G), beside
analysis.figures.deep_shift: R² vs transformer depth, one curve per k in {0.3, 0.6, 0.9} x the
training length (analysis.figures.deep_shift.fig3_ks), one panel per attention type, on one test
mixture. `depth_data` shapes the rows into a `DepthData`; `deep_depth_figure` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import polars as pl

from analysis.figures.deep_shift import (
    COLUMNS as DEEP_COLUMNS,
)
from analysis.figures.deep_shift import (
    MIXER_LABEL,
    STATISTIC,
    _mix,
    _text,
    fig3_ks,
    r2_members,
    r2_table,
)
from analysis.plotting import (
    PALETTE,
    hollow,
    legend_right,
    look,
    regime_note,
    save,
    seed_band,
    study_title,
    style,
)
from analysis.reading.frames import cell_regime
from analysis.reading.regime import TRIVIAL, final_rows, regime_notes
from analysis.reading.spreads import spread_keys

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = (*DEEP_COLUMNS, "model.depth", "model.mixer", "task.n_points")  # and figures_deep's


@dataclass(frozen=True)
class DepthData:
    """What `deep_depth_figure` draws, shaped from the rows (no drawing): the rows of the one
    test mixture, the model's R² table and seed-level members, the k values, the attention
    types, the regime table per (mixer, k, depth) and the trivial predictors' mean R² per k."""

    rows: pl.DataFrame  # the rows of the chosen test mixture
    table: pl.DataFrame  # the model's R² cells
    members: pl.DataFrame  # the model's seed-level R²
    ks: list[int]
    mixers: list[str]
    regime: pl.DataFrame
    trivial: pl.DataFrame  # predictor, position, r2


def depth_data(rows: pl.DataFrame) -> DepthData:
    """The data of `deep_depth_figure`: ValueError without final r2 rows of ok members."""
    dists = rows.filter(pl.col("metric") == "r2")["test_dist"].drop_nulls().unique().to_list()
    if not dists:
        raise ValueError("deep_depth: no final r2 rows of ok members")
    dist = sorted(dists, key=_mix)[0]  # the paper's Fig 3: one test mixture, the lowest ω₂
    rows = rows.filter(pl.col("test_dist") == dist)
    full = r2_table(rows)
    table = full.filter(pl.col("predictor") == "model")
    if table.height == 0:
        raise ValueError("deep_depth: no final r2 rows of ok members")
    members = r2_members(rows).filter(pl.col("predictor") == "model")
    n_train = int(table["task.n_points"].max())
    ks = fig3_ks(n_train)
    mixers = sorted(table["model.mixer"].unique().to_list())
    final = final_rows(rows, "r2", test_dist=None, position="all").filter(
        pl.col("position").is_in(ks))
    regime = cell_regime(final, ["model.mixer", "position", "model.depth"], statistic=STATISTIC,
                         metric="r2")
    trivial = full.filter(pl.col("predictor").is_in(list(TRIVIAL)) & pl.col("position").is_in(ks))
    trivial = trivial.group_by("predictor", "position").agg(pl.col("r2").sort().mean())
    return DepthData(rows, table, members, ks, mixers, regime, trivial)


def _draw_depth_panel(ax, data: DepthData, mixer: str, summary: dict, notes: list) -> None:
    """One attention type's panel: R² vs depth per k, rings, the best trivial level per k;
    each cell's seed spread joins `summary` and a line per k joins `notes`."""
    regime = data.regime
    colors = dict(zip(data.ks, PALETTE, strict=False))
    src = data.members.filter(pl.col("model.mixer") == mixer)
    for k in data.ks:
        _, curve = seed_band(ax, src.filter(pl.col("position") == k), "model.depth", "r2",
                             label=f"k = {k}", color=colors[k])
        depth = curve["model.depth"].to_numpy()
        out = regime.filter((pl.col("model.mixer") == mixer) & (pl.col("position") == k)
                            & pl.col("learned").not_())
        hollow(ax, out["model.depth"], out["model"], colors[k])
        best = data.trivial.filter(pl.col("position") == k).sort("r2", descending=True)
        if best.height:
            predictor, value = best.row(0)[0], float(best["r2"][0])
            ax.axhline(value, color=colors[k], lw=0.8, ls=look(predictor).dash,
                       label=f"best trivial at k = {k}: {look(predictor).label} = "
                             f"{value:.2f}")
        for j, d in enumerate(depth):
            summary.update(spread_keys(f"r2_{mixer}_L{d}_k{k}", curve.row(j, named=True)))
        notes.append(f"{mixer} k={k}: " + ", ".join(
            f"L{d} {_text(curve.row(j, named=True))}" for j, d in enumerate(depth)))
    part = regime.filter(pl.col("model.mixer") == mixer).with_columns(
        pl.format("k = {}", "position").alias("k"))
    regime_note(ax, regime_notes(part, group="k", x="model.depth"))
    ax.set_xticks(sorted(data.table["model.depth"].unique().to_list()))
    ax.set_title(MIXER_LABEL.get(mixer, mixer))
    ax.set_xlabel("transformer depth (blocks)")


def deep_depth_figure(rows: pl.DataFrame, out_dir, name: str = "deep_depth",
                      **_context) -> dict:
    """Fig 3: R² vs transformer depth at k = 0.3, 0.6, 0.9 x the training length, one panel
    per attention type, on one test mixture (the lowest ω₂ among the rows); the best trivial predictor's R² at each k as a thin line of the k's
    colour; (depth, k) cells short of the learned-regime margin get a ring."""
    data = depth_data(rows)
    rows, mixers = data.rows, data.mixers
    style()
    fig, axes = plt.subplots(1, len(mixers), squeeze=False, sharey=True,
                             figsize=(3.6 * len(mixers) + 2.4, 3.4), layout="constrained")
    summary: dict = {"fit": None, "excluded": 0, "ks": data.ks, "regime": data.regime}
    notes = []
    for ax, mixer in zip(axes[0], mixers, strict=True):
        _draw_depth_panel(ax, data, mixer, summary, notes)
    axes[0, 0].set_ylabel(f"R² ({STATISTIC})")
    legend_right(axes[0], axes[0, -1])
    fig.suptitle(study_title(rows), fontsize=9)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, table=data.table,
                   note="; ".join(notes) + " (median [min, max] over seeds)")
    return summary


DEPTH_FIGURES = {"deep_depth": deep_depth_figure}
