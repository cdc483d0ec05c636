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
Fig 5 the last one. Values are means over members (seeds) with the same config.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.plotting import log_axes, save, style

MODEL_LABEL = {"transformer": "standard transformer", "looped": "looped transformer",
               "algoformer": "AlgoFormer"}
MODEL_COLOR = {"transformer": "tab:gray", "looped": "tab:orange", "algoformer": "tab:blue"}
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


def algo_examples_figure(rows: pl.DataFrame, out_dir, name: str = "algo_examples",
                         **_context) -> dict:
    final = _with(mse_rows(rows).filter(pl.col("predictor") == "model"), "model.name")
    if final.height == 0:
        raise ValueError("algo_examples: no final mse rows of ok members")
    curves = final.group_by("task.name", "model.name", "position").agg(
        pl.col("value").mean()).sort("position")
    tasks = [t for t in TASK_LABEL if t in set(curves["task.name"].to_list())]
    style()
    fig, axes = plt.subplots(1, len(tasks), squeeze=False, figsize=(3.8 * len(tasks), 3.2))
    summary: dict = {"fit": None, "excluded": 0}
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
        ax.set_title(TASK_LABEL[task])
        ax.set_xlabel("in-context examples")
    axes[0, 0].set_ylabel("squared error (mean over prompts)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
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
    for i, (T, dT) in enumerate(keys.iter_rows()):
        c = curves.filter((pl.col("model.loops") == T) & (pl.col("model.window") == dT))
        x, y = c["loop_iter"].to_numpy(), c["value"].to_numpy()
        color = plt.cm.viridis(i / max(1, keys.height - 1))
        ax.plot(x, y, "-", color=color, label=f"T = {T}, ΔT = {dT}")
        ax.axvline(T, color=color, ls=":", lw=0.8)
        at_T, best, last = float(y[x == T][0]), int(x[np.argmin(y)]), float(y[-1])
        summary.update({f"err_T{T}_dT{dT}_at_T": at_T, f"err_T{T}_dT{dT}_min": float(y.min()),
                        f"err_T{T}_dT{dT}_argmin": best, f"err_T{T}_dT{dT}_last": last})
        notes.append(f"(T={T}, ΔT={dT}): at T {at_T:.3g}, min {y.min():.3g} at t={best}, "
                     f"at t={int(x[-1])} {last:.3g}")
    ax.set_xlabel("inference loop iterations t")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title("AlgoFormer: error vs inference loops (dotted: training T)")
    ax.legend(fontsize=7)
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
    summary: dict = {"fit": None, "excluded": 0}
    notes = []
    for i, L in enumerate(sorted(algo["model.layers"].unique().to_list())):
        c = algo.filter(pl.col("model.layers") == L).sort("model.heads")
        h, y = c["model.heads"].to_numpy(), c["value"].to_numpy()
        color = f"C{i}"
        ax.plot(h, y, "o-", color=color, label=f"AlgoFormer L = {L}")
        summary.update({f"err_L{L}_h{hh}": float(v) for hh, v in zip(h, y, strict=True)})
        notes.append(f"L={L}: " + ", ".join(f"h{hh} {v:.3g}" for hh, v in zip(h, y, strict=True)))
        std = table.filter((pl.col("model.name") == "transformer")
                           & (pl.col("model.depth") == 3 * L))
        if std.height:
            v = float(std["value"][0])
            ax.axhline(v, color=color, ls="--", lw=1, label=f"standard, {3 * L} layers")
            summary[f"err_standard_{3 * L}"] = v
            notes.append(f"standard {3 * L} layers {v:.3g}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("heads h")
    ax.set_ylabel("squared error (mean over prompts, positions)")
    ax.set_title("AlgoFormer: error vs layers and heads")
    ax.legend(fontsize=7)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, note="; ".join(notes))
    return summary


BASELINE_STYLE = {"gd_tuned_float64": ("GD (tuned η)", "--", "tab:green"),
                  "newton_float64": ("Newton–Schulz (tuned α)", "-.", "tab:red")}


def newton_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """(noise, predictor, iteration, error at the last position), means over members."""
    ok = _with(rows, "task.noise_std", "model.loops", "model.window")
    last = pl.col("position") == pl.col("position").max().over("config_hash")
    model = mse_rows(ok, loop_rows=True).filter((pl.col("predictor") == "model") & last)
    model = model.with_columns(
        pl.format("AlgoFormer (T = {}, ΔT = {})", "model.loops", "model.window").alias("label"),
        pl.col("loop_iter").alias("iteration"))
    head = mse_rows(ok).filter(last)
    base = head.filter(pl.col("predictor").is_in(list(BASELINE_STYLE)) | (
        pl.col("predictor") == "ols_float64")).with_columns(
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
    summary: dict = {"fit": None, "excluded": 0}
    notes = []
    for ax, sigma in zip(axes[0], noises, strict=True):
        log_axes(ax, x=False)
        src = curves.filter(pl.col("task.noise_std") == sigma)
        for label in sorted(src["label"].unique().to_list()):
            c = src.filter(pl.col("label") == label)
            if label == "ols_float64":
                v = float(c["value"][0])
                ax.axhline(v, color="0.4", ls=":", label="least squares")
                summary[f"err_s{sigma}_ols"] = v
                continue
            c = c.filter(pl.col("iteration") >= 1)
            x, y = c["iteration"].to_numpy(), c["value"].to_numpy()
            text, ls, color = BASELINE_STYLE.get(label, (label, "-", "tab:blue"))
            ax.plot(x, y, ls=ls, color=color, label=text)
            key = {"gd_tuned_float64": "gd", "newton_float64": "newton"}.get(label, "model")
            for t in (1, 3, 10, int(x.max())):
                if (x == t).any():
                    summary[f"err_s{sigma}_{key}_t{t}"] = float(y[x == t][0])
            summary[f"err_s{sigma}_{key}_min"] = float(y.min())
            notes.append(f"σ={sigma} {key}: t=1 {y[0]:.3g}, min {y.min():.3g}, "
                         f"t={int(x.max())} {y[-1]:.3g}")
        ax.set_title(f"noise σ = {sigma:g}")
        ax.set_xlabel("iterations / loops t")
    axes[0, 0].set_ylabel("squared error at the last position")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
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
