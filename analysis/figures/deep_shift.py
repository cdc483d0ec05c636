"""Figures of Wu et al. 2024 (transformers as deep optimizers, App. G), from R² rows.

* deep_shift (Figs 1, 2): per attention type (one PNG each), a grid of panels teacher depth N
  (rows) x test mixture ω₂ (columns): R² (pooled over test prompts) vs k in-context examples,
  the transformer next to a fresh N-layer network trained on the first k examples (best
  epoch) and least squares; a vertical line at the training length. A summary PNG: R² at
  the training length vs ω₂.
* deep_depth (Fig 3): R² vs transformer depth, one curve per k in {0.3, 0.6, 0.9} x the
  training length (15, 30, 45 at the paper's 50), one panel per attention type: in
  analysis.figures.deep_depth (its k values: `fig3_ks` here).
* deep_scaling (the scale-up): in analysis.figures.deep_scaling.

Every value is the median over seeds (a seed's value: the mean over its members with the same
config, in practice one); statistic "pooled" unless noted. The transformers (and the trained
N-layer net, the comparison of Figs 1-2) are drawn with their min–max over seeds as a band
(error bars on point markers; analysis.plotting.seed_band; the legend title says so and
gives n); the summary keys ending in "_lo" / "_hi" hold the seed min / max. The
trivial predictors (zero, prompt mean, ridge; analysis.reading.regime.TRIVIAL) are drawn where their
rows exist, and a panel whose transformer does not clear the best of them by the R² margin
(analysis.reading.regime.LEARNED_R2_GAP) at the training length says "not testable at this scale".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.plotting import (
    COLORS,
    PALETTE,
    baseline_curve,
    figure_legend,
    look,
    panel_grid,
    regime_note,
    save,
    seed_band,
    seed_caption,
    study_title,
    style,
)
from analysis.reading.frames import cell_regime
from analysis.reading.regime import TRIVIAL, final_rows
from analysis.reading.spreads import seed_spreads, spread_keys

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.depth", "model.mixer", "model.width", "task.depth", "task.n_points",)

MIXER_LABEL = {"relu_attention": "ReLU attention", "attention": "softmax attention"}
MIXER_COLORS = {"relu_attention": PALETTE[0], "attention": PALETTE[3]}
NET, OLS = "teacher_net_float32", "ols_float64"
LABELS = {"model": "transformer (ICL)", NET: look(NET).label, OLS: "least squares"}
STATISTIC = "pooled"  # R² pooled over the test prompts


KEYS = ["predictor", "model.mixer", "task.depth", "model.depth", "model.width",
        "task.n_points", "test_dist", "prompt_len", "position"]


def r2_members(rows: pl.DataFrame, statistic: str = "pooled") -> pl.DataFrame:
    """Final R² of ok members (best epoch for the baseline): (KEYS..., seed, r2), one row per
    seed and cell (the mean over members sharing both), and mix (ω₂ of test_dist)."""
    r2 = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "r2")
                     & (pl.col("statistic") == statistic) & pl.col("infer_iter").is_null())
    r2 = r2.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    # the values sorted before the mean: the same sum whatever order the group arrives in
    return r2.group_by(*KEYS, "seed").agg(pl.col("value").sort().mean().alias("r2")).with_columns(
        pl.col("test_dist").str.strip_prefix("w").cast(pl.Float64, strict=False).alias("mix"))


def r2_table(rows: pl.DataFrame, statistic: str = "pooled") -> pl.DataFrame:
    """Final R² per cell (KEYS: predictor, mixer, teacher depth, model size, test point, k):
    r2 = the median over seeds, with n_seeds and the seeds' min / max (seed_spreads)."""
    members = r2_members(rows, statistic)
    table = seed_spreads(members, KEYS, value="r2").drop("values")
    return table.with_columns(pl.col("median").alias("r2"))


def _mix(test_dist: str) -> float:
    return float(test_dist.removeprefix("w"))


def _curve(table: pl.DataFrame, **where) -> tuple[np.ndarray, np.ndarray]:
    for key, value in where.items():
        table = table.filter(pl.col(key) == value)
    table = table.sort("position")
    return table["position"].to_numpy(), table["r2"].to_numpy()


def _at(table: pl.DataFrame, k: int, **where) -> float:
    x, y = _curve(table, **where)
    hit = y[x == k]
    return float(hit[0]) if hit.size else float("nan")


def _spread_at(table: pl.DataFrame, k: int, **where) -> dict:
    """{median, min, max, n_seeds} of an r2_table cell at k (NaN / 0 where there is none)."""
    for key, value in where.items():
        table = table.filter(pl.col(key) == value)
    hit = table.filter(pl.col("position") == k)
    if hit.height == 0:
        return {"median": math.nan, "min": math.nan, "max": math.nan, "n_seeds": 0}
    return {c: hit[c][0] for c in ("median", "min", "max", "n_seeds")}


def _text(cell: dict) -> str:
    """"0.912 [0.905, 0.920]" (median [min, max] over seeds), "0.912 (1 seed)" with one."""
    if cell["n_seeds"] <= 1:
        return f"{cell['median']:.3f} (1 seed)"
    return f"{cell['median']:.3f} [{cell['min']:.3f}, {cell['max']:.3f}]"


def _seed_curve(ax, members: pl.DataFrame, x: str, predictor: str, label: str | None = None,
                color=None, **kwargs):
    """One predictor's R² along x with its seed spread (seed_band): the transformer in the
    model colour (or `color`), a baseline in its Look."""
    if predictor == "model":
        style_kw = {"color": color or COLORS["model"], "marker": "o" if x == "mix" else None}
    else:
        lk = look(predictor)
        style_kw = {"color": color or lk.color, "linestyle": lk.dash, "marker": lk.marker,
                    "markersize": 3, "linewidth": lk.width}
    return seed_band(ax, members, x, "r2", label=label or LABELS.get(predictor),
                     **{**style_kw, **kwargs})


def shift_regime(rows: pl.DataFrame, k: int) -> pl.DataFrame:
    """The learned-regime table of the transformer's pooled R² at k in-context examples per
    (mixer, teacher depth, test mixture): R² >= the best trivial predictor's + 0.05."""
    final = final_rows(rows, "r2", test_dist=None, position="all").filter(
        pl.col("position") == k)
    return cell_regime(final, ["model.mixer", "task.depth", "test_dist"], statistic=STATISTIC,
                       metric="r2")


@dataclass(frozen=True)
class ShiftData:
    """What `deep_shift_figure` draws, shaped from the rows (no drawing)."""

    table: pl.DataFrame  # r2_table: R² per cell, median over seeds with min / max
    members: pl.DataFrame  # r2_members: R² per seed and cell
    model: pl.DataFrame  # the transformer's cells of `table`
    refs: pl.DataFrame  # the baselines' cells of `table` (trained net, least squares, trivial)
    mixers: list[str]
    depths: list[int]  # teacher depths N
    dists: list[str]  # test mixtures, by ω₂
    n_train: int  # the training length (k)
    regime: pl.DataFrame  # learned-regime table at k = n_train per mixer, N, mixture
    values: dict  # summary values: R² at k = n_train and at the largest k (_lo/_hi/_n_seeds)
    lines: list[str]  # the note: R² at n_train -> at the largest k, first mixture


def shift_data(rows: pl.DataFrame) -> ShiftData:
    """The data of `deep_shift_figure`: ValueError without final R² rows."""
    table = r2_table(rows)
    if table.height == 0:
        raise ValueError("deep_shift: no final r2 rows of ok members")
    members = r2_members(rows)
    model = table.filter(pl.col("predictor") == "model")
    refs = table.filter(pl.col("predictor").is_in([NET, OLS, *TRIVIAL]))
    depths = sorted(model["task.depth"].unique().to_list())
    dists = sorted(model["test_dist"].unique().to_list(), key=_mix)
    n_train = int(model["task.n_points"].max())
    mixers = sorted(model["model.mixer"].unique().to_list())
    values: dict = {}
    lines = []
    for depth in depths:
        for mixer in mixers:
            src = model.filter(pl.col("model.mixer") == mixer)
            for d in dists:
                k_max = int(src.filter(pl.col("test_dist") == d)["position"].max())
                at_train = _spread_at(src, n_train, **{"task.depth": depth}, test_dist=d)
                at_max = _spread_at(src, k_max, **{"task.depth": depth}, test_dist=d)
                values.update(spread_keys(f"r2_{mixer}_N{depth}_{d}_k{n_train}", at_train))
                values.update(spread_keys(f"r2_{mixer}_N{depth}_{d}_k{k_max}", at_max))
                if d == dists[0]:
                    lines.append(f"{mixer} N={depth} {d}: R²(k={n_train}) {_text(at_train)} -> "
                                 f"R²(k={k_max}) {_text(at_max)}")
        for d in dists:
            net = _spread_at(refs, n_train, predictor=NET, **{"task.depth": depth}, test_dist=d)
            values.update(spread_keys(f"r2_net_N{depth}_{d}_k{n_train}", net))
    return ShiftData(table=table, members=members, model=model, refs=refs, mixers=mixers,
                     depths=depths, dists=dists, n_train=n_train,
                     regime=shift_regime(rows, n_train), values=values, lines=lines)


def _draw_shift_grid(data: ShiftData, rows: pl.DataFrame, mixer: str, out_dir, name: str
                     ) -> list:
    """One attention type's grid: teacher depth N (rows) x test mixture (columns), R² vs k."""
    depths, dists, n_train, members = data.depths, data.dists, data.n_train, data.members
    fig, axes = panel_grid(len(depths), len(dists), (2.6, 2.2), sharex=True)
    for i, depth in enumerate(depths):
        for j, dist in enumerate(dists):
            ax, low = axes[i, j], 0.0
            sources = [("model", data.model.filter(pl.col("model.mixer") == mixer)),
                       *[(p, data.refs) for p in (NET, OLS, *TRIVIAL)]]
            for predictor, source in sources:
                x, y = _curve(source, predictor=predictor, **{"task.depth": depth},
                              test_dist=dist)
                if not x.size:
                    continue
                if predictor in (NET, "model"):  # the comparison: both with their spread
                    part = members.filter(
                        (pl.col("predictor") == predictor) & (pl.col("task.depth") == depth)
                        & (pl.col("test_dist") == dist))
                    if predictor == "model":
                        part = part.filter(pl.col("model.mixer") == mixer)
                    _seed_curve(ax, part, "position", predictor)
                else:
                    baseline_curve(ax, predictor, x, y, label=LABELS.get(predictor))
                low = min(low, float(np.nanmin(y[x >= 1])) if (x >= 1).any() else 0)
            ax.axvline(n_train, color="0.6", lw=0.8, ls="-.")
            ax.set_ylim(max(low, -1.0) - 0.05, 1.02)
            clipped = f" (clipped: min {low:.2g})" if low < -1.0 else ""
            cell = data.regime.filter((pl.col("model.mixer") == mixer)
                                      & (pl.col("task.depth") == depth)
                                      & (pl.col("test_dist") == dist))
            if cell.height and cell["learned"][0] is False:
                regime_note(ax, ["not testable at this scale",
                                 f"R² gap {cell['margin'][0]:+.2f} at k = {n_train}"],
                            loc="lower left")
            ax.set_title(f"ω₂ = {_mix(dist):g}{clipped}" if i == 0 else clipped.strip(),
                         fontsize=8)
            if j == 0:
                ax.set_ylabel(f"N = {depth}\nR² ({STATISTIC})")
            if i == len(depths) - 1:
                ax.set_xlabel("in-context examples k")
    fig.suptitle(f"{study_title(rows)}\n{MIXER_LABEL.get(mixer, mixer)}: R² vs k "
                 f"(trained on {n_train} pairs)", fontsize=9)
    figure_legend(fig, axes.flat, title=seed_caption(list(axes.flat)).replace(
        "median over seeds", "median over seeds (transformer, trained net)"))
    paths = save(fig, out_dir, name)
    plt.close(fig)
    return paths


def _draw_shift_summary(data: ShiftData, rows: pl.DataFrame, out_dir, name: str) -> list:
    """R² at the training length vs ω₂, one panel per teacher depth."""
    depths, dists, n_train = data.depths, data.dists, data.n_train
    fig, axes = panel_grid(1, len(depths), (3.2, 3.0), sharey=True)
    for i, depth in enumerate(depths):
        ax = axes[0, i]
        mixes = [_mix(d) for d in dists]
        at_k = data.members.filter((pl.col("task.depth") == depth)
                                   & (pl.col("position") == n_train))
        for mixer in data.mixers:
            _seed_curve(ax, at_k.filter((pl.col("predictor") == "model")
                                        & (pl.col("model.mixer") == mixer)), "mix", "model",
                        label=MIXER_LABEL.get(mixer), color=MIXER_COLORS.get(mixer))
        _seed_curve(ax, at_k.filter(pl.col("predictor") == NET), "mix", NET,
                    label="trained N-layer net")
        for predictor in TRIVIAL:
            vals = [_at(data.refs, n_train, predictor=predictor, **{"task.depth": depth},
                        test_dist=d) for d in dists]
            if np.isfinite(vals).any():
                baseline_curve(ax, predictor, mixes, vals)
        ax.set_title(f"teacher depth N = {depth}")
        ax.set_xlabel("test mixture ω₂")
    axes[0, 0].set_ylabel(f"R² ({STATISTIC}) at k = {n_train}")
    fig.suptitle(f"{study_title(rows)}: R² at the training length", fontsize=9)
    figure_legend(fig, axes.flat)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    return paths


def deep_shift_figure(rows: pl.DataFrame, out_dir, name: str = "deep_shift",
                      **_context) -> dict:
    """Figs 1, 2: per attention type a grid of R² vs k (teacher depth x test mixture), the
    transformer and the trained N-layer net with their seed spread, least squares and the
    trivial predictors; a summary of R² at the training length vs ω₂; the trained net's R²
    over epochs."""
    data = shift_data(rows)
    summary = {"fit": None, "excluded": 0, "n_train": data.n_train, "regime": data.regime}
    style()
    paths = []
    for mixer in data.mixers:
        paths += _draw_shift_grid(data, rows, mixer, out_dir, f"{name}_{mixer}")
    paths += _draw_shift_summary(data, rows, out_dir, f"{name}_summary")
    summary.update(data.values)
    paths += baseline_epochs_figure(rows, out_dir, f"{name}_baseline_epochs")
    summary.update(paths=paths, table=data.table,
                   note="; ".join(data.lines) + " (median [min, max] over seeds)")
    return summary


def baseline_epochs_figure(rows: pl.DataFrame, out_dir, name: str) -> list:
    """The trained network's R² (pooled) vs epoch, one curve per k, one panel per teacher
    depth, on the first test point: where the best epoch (oracle early stopping) sits."""
    net = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "r2")
                      & (pl.col("predictor") == NET) & (pl.col("statistic") == "pooled")
                      & pl.col("infer_iter").is_not_null())
    if net.height == 0:
        return []
    dist = sorted(net["test_dist"].unique().to_list(), key=_mix)[0]
    net = net.filter(pl.col("test_dist") == dist)
    depths = sorted(net["task.depth"].unique().to_list())
    fig, axes = panel_grid(1, len(depths), (3.2, 3.0), sharey=True)
    for ax, depth in zip(axes[0], depths, strict=True):
        src = net.filter(pl.col("task.depth") == depth)
        for k in sorted(src["position"].unique().to_list()):
            curve = src.filter(pl.col("position") == k).group_by("infer_iter").agg(
                pl.col("value").mean()).sort("infer_iter")
            ax.plot(curve["infer_iter"], curve["value"], label=f"k = {k}", lw=0.9)
        ax.set_ylim(-1.05, 1.02)
        ax.set_title(f"N = {depth}, {dist}")
        ax.set_xlabel("epoch (full batch)")
    axes[0, 0].set_ylabel("R² of the trained net")
    axes[0, 0].legend(fontsize=5, ncol=2)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    return paths


def fig3_ks(n_train: int) -> list[int]:
    """k = 0.3, 0.6, 0.9 x the training length: 15, 30, 45 at the paper's 50."""
    return sorted({max(1, round(f * n_train)) for f in (0.3, 0.6, 0.9)})


DEEP_FIGURES = {
    "deep_shift": deep_shift_figure,
}
