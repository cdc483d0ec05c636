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
Fig 5 the last one. Values are means over members (seeds) with the same config. The trivial
predictors (zero, prompt mean, ridge; analysis.verdicts.TRIVIAL) are drawn where their rows
exist; a model whose error at the last position is not <= 0.1 x the best of them is marked
"not testable at this scale" (analysis.verdicts.LEARNED_ERROR_RATIO).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.frames import cell_regime
from analysis.plotting import (
    PALETTE,
    baseline_curve,
    baseline_line,
    figure_legend,
    hollow,
    log_axes,
    palette,
    regime_note,
    ridge_solves,
    save,
    study_title,
    style,
)
from analysis.verdicts import TRIVIAL, regime_notes

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
    """Learned-regime table (analysis.verdicts) of the headline error at the last position,
    per `keys`, against the trivial predictors of the same members."""
    final = _with(last_position(mse_rows(rows)), *keys)
    return cell_regime(final, keys, statistic="mean", metric="mse")


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
    final = headline.filter(pl.col("predictor") == "model")
    if final.height == 0:
        raise ValueError("algo_examples: no final mse rows of ok members")
    curves = final.group_by("task.name", "model.name", "position").agg(
        pl.col("value").mean()).sort("position")
    trivial = headline.filter(pl.col("predictor").is_in(list(TRIVIAL))).group_by(
        "task.name", "predictor", "position").agg(pl.col("value").mean()).sort("position")
    regime = regime_at_last(rows, ["task.name", "model.name"])
    tasks = [t for t in TASK_LABEL if t in set(curves["task.name"].to_list())]
    style()
    fig, axes = plt.subplots(1, len(tasks), squeeze=False, figsize=(3.8 * len(tasks), 3.2))
    summary: dict = {"fit": None, "excluded": 0, "regime": regime}
    notes = []
    for ax, task in zip(axes[0], tasks, strict=True):
        log_axes(ax, x=False)
        src = curves.filter(pl.col("task.name") == task)
        for model in [m for m in MODEL_LABEL if m in set(src["model.name"].to_list())]:
            c = src.filter(pl.col("model.name") == model)
            x, y = c["position"].to_numpy(), c["value"].to_numpy()
            ax.plot(x, y, "-", color=MODEL_COLOR[model], label=MODEL_LABEL[model])
            summary[f"err_{task}_{model}_last"] = float(y[-1])
            summary[f"err_{task}_{model}_mean"] = float(np.mean(y))
            notes.append(f"{task} {model}: last {y[-1]:.3g}, mean {np.mean(y):.3g}")
        for predictor in TRIVIAL:
            t = trivial.filter((pl.col("task.name") == task) & (pl.col("predictor") == predictor))
            if t.height:
                baseline_curve(ax, predictor, t["position"], t["value"])
        part = regime.filter(pl.col("task.name") == task).with_columns(
            pl.col("model.name").replace(MODEL_LABEL).alias("model"))
        regime_note(ax, regime_notes(part, group="model"))
        ax.set_title(TASK_LABEL[task], fontsize=9)
        ax.set_xlabel("in-context examples")
    axes[0, 0].set_ylabel("squared error (mean over prompts)")
    fig.suptitle(study_title(rows), fontsize=10)
    fig.tight_layout()
    figure_legend(fig, axes.flat)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


def loop_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """Error averaged over positions per (T, ΔT, loop_iter) of the looped models."""
    loops = _with(mse_rows(rows, loop_rows=True).filter(pl.col("predictor") == "model"),
                  "model.loops", "model.window", "model.layers", "model.heads")
    per_member = loops.group_by("config_hash", "model.loops", "model.window", "model.layers",
                                "model.heads", "loop_iter").agg(pl.col("value").mean())
    return per_member.group_by("model.loops", "model.window", "model.layers", "model.heads",
                               "loop_iter").agg(pl.col("value").mean()).sort("loop_iter")


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
        c = curves.filter((pl.col("model.loops") == T) & (pl.col("model.window") == dT))
        x, y = c["loop_iter"].to_numpy(), c["value"].to_numpy()
        color = colors[i]
        ax.plot(x, y, "-", color=color, label=f"T = {T}, ΔT = {dT}")
        ax.axvline(T, color=color, ls=":", lw=0.8)
        at_T, best, last = float(y[x == T][0]), int(x[np.argmin(y)]), float(y[-1])
        summary.update({f"err_T{T}_dT{dT}_at_T": at_T, f"err_T{T}_dT{dT}_min": float(y.min()),
                        f"err_T{T}_dT{dT}_argmin": best, f"err_T{T}_dT{dT}_last": last})
        notes.append(f"(T={T}, ΔT={dT}): at T {at_T:.3g}, min {y.min():.3g} at t={best}, "
                     f"at t={int(x[-1])} {last:.3g}")
    for predictor, value in trivial_mean(rows).select("predictor", "value").iter_rows():
        baseline_line(ax, predictor, value, " (mean over positions)")
    regime = regime_at_last(rows, ["model.loops", "model.window"]).with_columns(
        pl.format("T = {}, ΔT = {}", "model.loops", "model.window").alias("loop"))
    regime_note(ax, regime_notes(regime, group="loop"))
    summary["regime"] = regime
    ax.set_xlabel("inference loop iterations t")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title(f"{study_title(rows)}\n(dotted: training T)", fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


def position_mean(rows: pl.DataFrame) -> pl.DataFrame:
    """Headline error averaged over positions, per model config (mean over seeds)."""
    final = _with(mse_rows(rows).filter(pl.col("predictor") == "model"), "model.name",
                  "model.layers", "model.heads", "model.depth")
    keys = ["model.name", "model.layers", "model.heads", "model.depth"]
    member = final.group_by("config_hash", *keys).agg(pl.col("value").mean())
    return member.group_by(keys).agg(pl.col("value").mean())


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
        c = algo.filter(pl.col("model.layers") == L).sort("model.heads")
        h, y = c["model.heads"].to_numpy(), c["value"].to_numpy()
        color = colors[i]
        ax.plot(h, y, "o-", color=color, label=f"AlgoFormer L = {L}")
        out = c.join(regime.filter(pl.col("learned").not_()).select(
            "model.name", "model.layers", "model.heads"), on=["model.name", "model.layers",
                                                             "model.heads"], how="semi")
        hollow(ax, out["model.heads"], out["value"], color)
        summary.update({f"err_L{L}_h{hh}": float(v) for hh, v in zip(h, y, strict=True)})
        notes.append(f"L={L}: " + ", ".join(f"h{hh} {v:.3g}" for hh, v in zip(h, y, strict=True)))
        std = table.filter((pl.col("model.name") == "transformer")
                           & (pl.col("model.depth") == 3 * L))
        if std.height:
            v = float(std["value"][0])
            ax.axhline(v, color=color, ls="--", lw=1, label=f"standard, {3 * L} layers")
            summary[f"err_standard_{3 * L}"] = v
            notes.append(f"standard {3 * L} layers {v:.3g}")
    for predictor, value in trivial_mean(rows).select("predictor", "value").iter_rows():
        baseline_line(ax, predictor, value, " (mean over positions)")
    part = regime.with_columns(pl.format("{} L = {}", "model.name", "model.layers").alias("m"))
    regime_note(ax, regime_notes(part, group="m", x="model.heads"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("heads h")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title(study_title(rows), fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


BASELINES = ("gd_tuned_float64", "newton_float64")


def newton_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """(noise, predictor, iteration, error at the last position), means over members."""
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
    cols = ["task.noise_std", "label", "iteration", "value"]
    both = pl.concat([model.select(cols), base.select(cols)])
    return both.group_by("task.noise_std", "label", "iteration").agg(
        pl.col("value").mean()).sort("iteration")


def algo_newton_figure(rows: pl.DataFrame, out_dir, name: str = "algo_newton",
                       **_context) -> dict:
    curves = newton_curves(rows)
    if curves.height == 0:
        raise ValueError("algo_newton: no mse rows of ok members")
    noises = sorted(curves["task.noise_std"].unique().to_list())
    style()
    fig, axes = plt.subplots(1, len(noises), squeeze=False, sharey=True,
                             figsize=(3.8 * len(noises), 3.4))
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
            x, y = c["iteration"].to_numpy(), c["value"].to_numpy()
            if label in BASELINES:
                baseline_curve(ax, label, x, y)
            else:
                ax.plot(x, y, color=PALETTE[0], label=label)
            key = {"gd_tuned_float64": "gd", "newton_float64": "newton"}.get(label, "model")
            for t in (1, 3, 10, int(x.max())):
                if (x == t).any():
                    summary[f"err_s{sigma}_{key}_t{t}"] = float(y[x == t][0])
            summary[f"err_s{sigma}_{key}_min"] = float(y.min())
            notes.append(f"σ={sigma} {key}: t=1 {y[0]:.3g}, min {y.min():.3g}, "
                         f"t={int(x.max())} {y[-1]:.3g}")
        part = regime.filter(pl.col("task.noise_std") == sigma).with_columns(
            pl.format("AlgoFormer (T = {}, ΔT = {})", "model.loops", "model.window").alias("m"))
        regime_note(ax, regime_notes(part, group="m"))
        ax.set_title(f"noise σ = {sigma:g}")
        ax.set_xlabel("iterations / loops t")
    axes[0, 0].set_ylabel("squared error at the last position\n(mean over prompts)")
    fig.suptitle(study_title(rows), fontsize=10)
    fig.tight_layout()
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
