"""Figures of the AlgoFormer paper (pre + looped + post transformer), from mse rows.

* algo_examples (Fig 2): error vs # in-context examples, one panel per task, one curve per
  model (standard / looped / AlgoFormer; the looped models at their training T).
* algo_loops (Fig 3): error vs inference loop iterations t (loop_iter rows, far beyond T), one
  curve per (T, ΔT), a dotted line at each T.
* algo_layers_heads (Fig 4): error vs heads, one curve per layers L (AlgoFormer), standard
  transformers of 3L layers as horizontal lines.
* algo_newton (Fig 5): error at the last prompt position vs iteration, one panel per noise σ:
  AlgoFormer after t loops, GD and Newton–Schulz after t iterations (tuned step sizes,
  float64), least squares as a line.

"error" is the mean over test prompts (statistic "mean") of the squared error; Figs 3 and 4
average it over prompt positions (the Eq. 6 prefix average), Fig 2 shows every position and
Fig 5 the last one. Every model is drawn as the median over seeds with the min–max over seeds
as a band (analysis.plotting.seed_band; the legend title says so and gives n); the summary
holds the medians and, with "_lo" / "_hi", the seed min / max; baselines are means over
members. The trivial
predictors (zero, prompt mean, ridge; analysis.reading.regime.TRIVIAL) are drawn where their rows
exist; a model whose error at the last position is not <= 0.1 x the best of them is marked
"not testable at this scale" (analysis.reading.regime.LEARNED_ERROR_RATIO).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import MaxNLocator

from analysis.plotting import (
    PALETTE,
    baseline_curve,
    baseline_line,
    figure_legend,
    hollow,
    legend_right,
    log_axes,
    palette,
    regime_note,
    ridge_solves,
    save,
    seed_band,
    seed_level,
    study_title,
    style,
)
from analysis.reading.frames import cell_regime
from analysis.reading.regime import TRIVIAL, regime_notes
from analysis.reading.spreads import spread_keys

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.depth", "model.heads", "model.layers", "model.loops", "model.name", "model.window",
           "task.name", "task.noise_std",)

MODEL_LABEL = {"transformer": "standard transformer", "looped": "looped transformer",
               "algoformer": "AlgoFormer"}
MODEL_COLOR = {"transformer": PALETTE[5], "looped": PALETTE[1], "algoformer": PALETTE[0]}
TASK_LABEL = {"rep_regression": "regression with representation",
              "rep_ar": "AR(q) with representation", "cot_mlp": "CoT with MLPs",
              "linear_regression": "linear regression"}


def _col(rows: pl.DataFrame, name: str) -> pl.Expr:
    return pl.col(name) if name in rows.columns else pl.lit(None)


def mse_rows(rows: pl.DataFrame, loop_rows: bool = False) -> pl.DataFrame:
    """Final mean-over-prompts mse rows of ok members; loop_iter rows or the headline ones."""
    out = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "mse")
                      & (pl.col("statistic") == "mean"))
    out = out.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    loop = pl.col("loop_iter").is_not_null()
    return out.filter(loop if loop_rows else ~loop)


def _with(rows: pl.DataFrame, *names: str) -> pl.DataFrame:
    return rows.with_columns([pl.lit(None).alias(n) for n in names if n not in rows.columns])


def last_position(final: pl.DataFrame) -> pl.DataFrame:
    """Rows at each member's last prompt position."""
    pos = pl.col("position").fill_null(-1)
    return final.filter(pos == pos.max().over("config_hash"))


def regime_at_last(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Learned-regime table (analysis.reading.regime) of the headline error at the last position,
    per `keys`, against the trivial predictors of the same members."""
    final = _with(last_position(mse_rows(rows)), *keys)
    return cell_regime(final, keys, statistic="mean", metric="mse")


def spread_text(table: pl.DataFrame, i: int = -1) -> str:
    """"0.21 [0.19, 0.25]": the median over seeds at row i of a seed_band table and its
    min–max over seeds ("0.21 (1 seed)" with one)."""
    row = table.row(i, named=True)
    if row["n_seeds"] <= 1:
        return f"{row['median']:.3g} (1 seed)"
    return f"{row['median']:.3g} [{row['min']:.3g}, {row['max']:.3g}]"


def trivial_mean(rows: pl.DataFrame, by: list[str] = (), last: bool = False) -> pl.DataFrame:
    """(by..., predictor, value): each trivial predictor's error averaged over positions (or
    at the last position), mean over members; empty without trivial rows."""
    final = mse_rows(rows).filter(pl.col("predictor").is_in(list(TRIVIAL)))
    final = _with(last_position(final) if last else final, *by)
    member = final.group_by("config_hash", *by, "predictor").agg(pl.col("value").mean())
    return member.group_by(*by, "predictor").agg(pl.col("value").mean()).sort(
        [*by, "predictor"])


def algo_examples_figure(rows: pl.DataFrame, out_dir, name: str = "algo_examples",
                         **_context) -> dict:
    headline = _with(mse_rows(rows), "model.name")
    curves = headline.filter(pl.col("predictor") == "model")  # one row per member, position
    if curves.height == 0:
        raise ValueError("algo_examples: no final mse rows of ok members")
    trivial = headline.filter(pl.col("predictor").is_in(list(TRIVIAL))).group_by(
        "task.name", "predictor", "position").agg(pl.col("value").mean()).sort("position")
    regime = regime_at_last(rows, ["task.name", "model.name"])
    tasks = [t for t in TASK_LABEL if t in set(curves["task.name"].to_list())]
    style()
    # one panel: wide and tall enough that the title and the y label keep clear of each other
    fig, axes = plt.subplots(1, len(tasks), squeeze=False, layout="constrained",
                             figsize=(max(3.8 * len(tasks), 5.0), 3.6 if len(tasks) > 1 else 4.0))
    summary: dict = {"fit": None, "excluded": 0, "regime": regime}
    notes = []
    for ax, task in zip(axes[0], tasks, strict=True):
        log_axes(ax, x=False)
        src = curves.filter(pl.col("task.name") == task)
        for model in [m for m in MODEL_LABEL if m in set(src["model.name"].to_list())]:
            _, c = seed_band(ax, src.filter(pl.col("model.name") == model), "position",
                             label=MODEL_LABEL[model], color=MODEL_COLOR[model], marker=None)
            y = c["median"].to_numpy()
            summary.update(spread_keys(f"err_{task}_{model}_last", c))
            summary[f"err_{task}_{model}_mean"] = float(np.mean(y))
            notes.append(f"{task} {model}: last {spread_text(c)} (median [min, max] over "
                         f"seeds), mean over positions {np.mean(y):.3g}")
        for predictor in TRIVIAL:
            t = trivial.filter((pl.col("task.name") == task) & (pl.col("predictor") == predictor))
            if t.height:
                baseline_curve(ax, predictor, t["position"], t["value"])
        part = regime.filter(pl.col("task.name") == task).with_columns(
            pl.col("model.name").replace(MODEL_LABEL).alias("model"))
        regime_note(ax, regime_notes(part, group="model"))
        ax.set_title(TASK_LABEL[task], fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("in-context examples")
    axes[0, 0].set_ylabel("squared error\n(mean over prompts)")
    fig.suptitle(study_title(rows), fontsize=10)
    figure_legend(fig, axes.flat)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


def loop_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """Each member's error averaged over positions per loop_iter: (config_hash, seed, T, ΔT,
    layers, heads, loop_iter, value) of the looped models."""
    loops = _with(mse_rows(rows, loop_rows=True).filter(pl.col("predictor") == "model"),
                  "model.loops", "model.window", "model.layers", "model.heads")
    return loops.group_by("config_hash", "seed", "model.loops", "model.window", "model.layers",
                          "model.heads", "loop_iter").agg(pl.col("value").mean()).sort(
        "loop_iter")


def algo_loops_figure(rows: pl.DataFrame, out_dir, name: str = "algo_loops",
                      **_context) -> dict:
    curves = loop_curves(rows)
    if curves.height == 0:
        raise ValueError("algo_loops: no loop_iter mse rows of ok members")
    style()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    log_axes(ax, x=False)
    summary: dict = {"fit": None, "excluded": 0}
    notes = []
    keys = curves.select("model.loops", "model.window").unique().sort("model.loops",
                                                                     "model.window")
    colors = list(palette([str(k) for k in keys.iter_rows()]).values())
    for i, (T, dT) in enumerate(keys.iter_rows()):
        color = colors[i]
        _, c = seed_band(ax, curves.filter((pl.col("model.loops") == T)
                                           & (pl.col("model.window") == dT)), "loop_iter",
                         label=f"T = {T}, ΔT = {dT}", color=color, marker=None)
        x, y = c["loop_iter"].to_numpy(), c["median"].to_numpy()
        ax.axvline(T, color=color, ls=":", lw=0.8)
        at = int(np.flatnonzero(x == T)[0]) if (x == T).any() else 0
        i_best = int(np.argmin(y))
        summary.update({**spread_keys(f"err_T{T}_dT{dT}_at_T", c, at),
                        f"err_T{T}_dT{dT}_min": float(y.min()),
                        f"err_T{T}_dT{dT}_argmin": int(x[i_best]),
                        **spread_keys(f"err_T{T}_dT{dT}_last", c)})
        notes.append(f"(T={T}, ΔT={dT}): at T {spread_text(c, at)}, min {spread_text(c, i_best)} "
                     f"at t={int(x[i_best])}, at t={int(x[-1])} {spread_text(c)} "
                     f"(median [min, max] over seeds)")
    for predictor, value in trivial_mean(rows).select("predictor", "value").iter_rows():
        baseline_line(ax, predictor, value, " (mean over positions)")
    regime = regime_at_last(rows, ["model.loops", "model.window"]).with_columns(
        pl.format("T = {}, ΔT = {}", "model.loops", "model.window").alias("loop"))
    regime_note(ax, regime_notes(regime, group="loop"))
    summary["regime"] = regime
    ax.set_xlabel("inference loop iterations t")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title(f"{study_title(rows)}\n(dotted: training T)", fontsize=9)
    legend_right([ax], ax, fontsize=6)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


def position_mean(rows: pl.DataFrame) -> pl.DataFrame:
    """Headline error averaged over positions, per member: (config_hash, seed, name, layers,
    heads, depth, value)."""
    final = _with(mse_rows(rows).filter(pl.col("predictor") == "model"), "model.name",
                  "model.layers", "model.heads", "model.depth")
    keys = ["model.name", "model.layers", "model.heads", "model.depth"]
    return final.group_by("config_hash", "seed", *keys).agg(pl.col("value").mean())


def algo_layers_heads_figure(rows: pl.DataFrame, out_dir, name: str = "algo_layers_heads",
                             **_context) -> dict:
    table = position_mean(rows)
    algo = table.filter(pl.col("model.name") == "algoformer")
    if algo.height == 0:
        raise ValueError("algo_layers_heads: no AlgoFormer mse rows of ok members")
    style()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    log_axes(ax, x=False)
    regime = regime_at_last(rows, ["model.name", "model.layers", "model.heads", "model.depth"])
    summary: dict = {"fit": None, "excluded": 0, "regime": regime}
    notes = []
    layers = sorted(algo["model.layers"].unique().to_list())
    colors = list(palette([str(L) for L in layers]).values())
    for i, L in enumerate(layers):
        color = colors[i]
        _, c = seed_band(ax, algo.filter(pl.col("model.layers") == L), "model.heads",
                         label=f"AlgoFormer L = {L}", color=color)
        h = c["model.heads"].to_numpy()
        out = regime.filter(pl.col("learned").not_() & (pl.col("model.name") == "algoformer")
                            & (pl.col("model.layers") == L)).select("model.heads")
        out = c.join(out, on="model.heads", how="semi")
        hollow(ax, out["model.heads"], out["median"], color)
        for j, hh in enumerate(h):
            summary.update(spread_keys(f"err_L{L}_h{hh}", c, j))
        notes.append(f"L={L}: " + ", ".join(f"h{hh} {spread_text(c, j)}"
                                            for j, hh in enumerate(h)))
        std = table.filter((pl.col("model.name") == "transformer")
                           & (pl.col("model.depth") == 3 * L))
        if std.height:
            _, level = seed_level(ax, std, label=f"standard, {3 * L} layers", color=color)
            summary.update(spread_keys(f"err_standard_{3 * L}", level, 0))
            notes.append(f"standard {3 * L} layers {spread_text(level, 0)}")
    for predictor, value in trivial_mean(rows).select("predictor", "value").iter_rows():
        baseline_line(ax, predictor, value, " (mean over positions)")
    part = regime.with_columns(pl.format("{} L = {}", "model.name", "model.layers").alias("m"))
    regime_note(ax, regime_notes(part, group="m", x="model.heads"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("heads h")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title(study_title(rows), fontsize=9)
    legend_right([ax], ax, fontsize=6)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes) + " (median [min, max] over seeds)")
    return summary


BASELINES = ("gd_tuned_float64", "newton_float64")


def newton_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """(noise, label, iteration, error at the last position): the AlgoFormer curves per
    member (with seed; label "AlgoFormer (T, ΔT)"), the baselines (label: the predictor)
    as means over members (seed null)."""
    ok = _with(rows, "task.noise_std", "model.loops", "model.window")
    last = pl.col("position") == pl.col("position").max().over("config_hash")
    model = mse_rows(ok, loop_rows=True).filter((pl.col("predictor") == "model") & last)
    model = model.with_columns(
        pl.format("AlgoFormer (T = {}, ΔT = {})", "model.loops", "model.window").alias("label"),
        pl.col("loop_iter").alias("iteration"))
    head = mse_rows(ok).filter(last)
    base = head.filter(pl.col("predictor").is_in([*BASELINES, "ols_float64", *TRIVIAL])
                       ).with_columns(
        pl.col("predictor").alias("label"), pl.col("infer_iter").alias("iteration"))
    cols = ["task.noise_std", "label", "iteration"]
    model = model.group_by(*cols, "config_hash", "seed").agg(pl.col("value").mean())
    base = base.group_by(cols).agg(pl.col("value").mean(), pl.lit(None, pl.String).alias(
        "config_hash"), pl.lit(None, model.schema["seed"]).alias("seed"))
    order = [*cols, "config_hash", "seed", "value"]
    return pl.concat([model.select(order), base.select(order)]).sort("iteration")


def algo_newton_figure(rows: pl.DataFrame, out_dir, name: str = "algo_newton",
                       **_context) -> dict:
    curves = newton_curves(rows)
    if curves.height == 0:
        raise ValueError("algo_newton: no mse rows of ok members")
    noises = sorted(curves["task.noise_std"].unique().to_list())
    style()
    fig, axes = plt.subplots(1, len(noises), squeeze=False, sharey=True, layout="constrained",
                             figsize=(max(3.8 * len(noises), 5.0), 3.8))
    regime = regime_at_last(rows, ["task.noise_std", "model.loops", "model.window"])
    summary: dict = {"fit": None, "excluded": 0, "regime": regime}
    notes = []
    for ax, sigma in zip(axes[0], noises, strict=True):
        log_axes(ax, x=False)
        src = curves.filter(pl.col("task.noise_std") == sigma)
        for label in sorted(src["label"].unique().to_list()):
            c = src.filter(pl.col("label") == label)
            if label == "ols_float64" or label in TRIVIAL:
                v = float(c["value"][0])
                text = {"ols_float64": "least squares"}.get(label)
                if label == "ridge" and ridge_solves(rows):
                    text = "ridge (solves the task: not a bar)"
                baseline_line(ax, label, v, label=text)
                summary[f"err_s{sigma}_{'ols' if label == 'ols_float64' else label}"] = v
                continue
            c = c.filter(pl.col("iteration") >= 1)
            key = {"gd_tuned_float64": "gd", "newton_float64": "newton"}.get(label, "model")
            if label in BASELINES:
                x, y = c["iteration"].to_numpy(), c["value"].to_numpy()
                baseline_curve(ax, label, x, y)
                text = [f"{v:.3g}" for v in y]
                spread = None
            else:
                _, spread = seed_band(ax, c, "iteration", label=label, color=PALETTE[0],
                                      marker=None)
                x, y = spread["iteration"].to_numpy(), spread["median"].to_numpy()
                text = [spread_text(spread, j) for j in range(spread.height)]
            for t in (1, 3, 10, int(x.max())):
                if (x == t).any():
                    j = int(np.flatnonzero(x == t)[0])
                    summary[f"err_s{sigma}_{key}_t{t}"] = float(y[j])
                    if spread is not None:
                        summary.update(spread_keys(f"err_s{sigma}_{key}_t{t}", spread, j))
            summary[f"err_s{sigma}_{key}_min"] = float(y.min())
            notes.append(f"σ={sigma} {key}: t=1 {text[0]}, min {text[int(np.argmin(y))]}, "
                         f"t={int(x.max())} {text[-1]}")
        part = regime.filter(pl.col("task.noise_std") == sigma).with_columns(
            pl.format("AlgoFormer (T = {}, ΔT = {})", "model.loops", "model.window").alias("m"))
        regime_note(ax, regime_notes(part, group="m"))
        ax.set_title(f"noise σ = {sigma:g}")
        ax.set_xlabel("iterations / loops t")
    axes[0, 0].set_ylabel("squared error at the last position\n(mean over prompts)")
    fig.suptitle(study_title(rows), fontsize=10)
    figure_legend(fig, axes.flat)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


ALGOFORMER_FIGURES = {
    "algo_examples": algo_examples_figure,
    "algo_loops": algo_loops_figure,
    "algo_layers_heads": algo_layers_heads_figure,
    "algo_newton": algo_newton_figure,
}
