"""Figures of Wu et al. 2024 (transformers as deep optimizers, App. G), from R² rows.

* deep_shift (Figs 1, 2): per attention type (one PNG each), a grid of panels teacher depth N
  (rows) x test mixture ω₂ (columns): R² (pooled over test prompts) vs k in-context examples,
  the transformer next to a fresh N-layer network trained on the first k examples (best
  epoch) and least squares; a vertical line at the training length. A summary PNG: R² at
  the training length vs ω₂.
* deep_depth (Fig 3): R² vs transformer depth, one curve per k in {0.3, 0.6, 0.9} x the
  training length (15, 30, 45 at the paper's 50), one panel per attention type.
* deep_scaling: 1 - R² at the training length vs depth, one curve per width, with a
  saturating fit c + a L^-b per width; and 1 - R² vs k per model with a fit of the best.

Every value is a mean over members (seeds) of a row; statistic "pooled" unless noted.
"""

from __future__ import annotations

import warnings

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.ticker import NullFormatter, ScalarFormatter

from analysis.fit import B_MAX, fit_scaling
from analysis.plotting import COLORS, draw_fit, log_axes, save, style

MIXER_LABEL = {"relu_attention": "ReLU attention", "attention": "softmax attention"}
NET, OLS = "teacher_net_float32", "ols_float64"
STYLE = {"model": ("transformer (ICL)", "-", COLORS["model"]),
         NET: ("trained N-layer net (best epoch)", "--", "tab:orange"),
         OLS: ("least squares", ":", "0.4")}


def r2_table(rows: pl.DataFrame, statistic: str = "pooled") -> pl.DataFrame:
    """Final R² rows of ok members (best epoch for the baseline), averaged over members with
    the same mixer, teacher depth, model size, test point, predictor and k."""
    keys = ["predictor", "model.mixer", "task.depth", "model.depth", "model.width",
            "task.n_points", "test_dist", "prompt_len", "position"]
    r2 = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "r2")
                     & (pl.col("statistic") == statistic) & pl.col("infer_iter").is_null())
    r2 = r2.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    return r2.group_by(keys).agg(pl.col("value").mean().alias("r2"),
                                 pl.col("seed").n_unique().alias("n_seeds")).sort(keys)


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


def deep_shift_figure(rows: pl.DataFrame, out_dir, name: str = "deep_shift",
                      **_context) -> dict:
    table = r2_table(rows)
    if table.height == 0:
        raise ValueError("deep_shift: no final r2 rows of ok members")
    model = table.filter(pl.col("predictor") == "model")
    refs = table.filter(pl.col("predictor").is_in([NET, OLS]))
    depths = sorted(model["task.depth"].unique().to_list())
    dists = sorted(model["test_dist"].unique().to_list(), key=_mix)
    n_train = int(model["task.n_points"].max())
    paths, summary = [], {"fit": None, "excluded": 0, "n_train": n_train}
    lines = []
    style()
    for mixer in sorted(model["model.mixer"].unique().to_list()):
        fig, axes = plt.subplots(len(depths), len(dists), squeeze=False, sharex=True,
                                 figsize=(2.6 * len(dists), 2.2 * len(depths)))
        for i, depth in enumerate(depths):
            for j, dist in enumerate(dists):
                ax, low = axes[i, j], 0.0
                for predictor, source in (("model", model.filter(pl.col("model.mixer") == mixer)),
                                          (NET, refs), (OLS, refs)):
                    x, y = _curve(source, predictor=predictor, **{"task.depth": depth},
                                  test_dist=dist)
                    if x.size:
                        label, ls, color = STYLE[predictor]
                        ax.plot(x, y, ls=ls, color=color, label=label,
                                marker="o" if predictor != "model" else None, markersize=2)
                        low = min(low, float(np.nanmin(y[x >= 1])) if (x >= 1).any() else 0)
                ax.axvline(n_train, color="0.6", lw=0.8, ls="-.")
                ax.set_ylim(max(low, -1.0) - 0.05, 1.02)
                if low < -1.0:
                    ax.text(0.98, 0.02, f"clipped: min {low:.2g}", transform=ax.transAxes,
                            ha="right", fontsize=6, color="0.3")
                if i == 0:
                    ax.set_title(f"ω₂ = {_mix(dist):g}")
                if j == 0:
                    ax.set_ylabel(f"N = {depth}\nR²")
                if i == len(depths) - 1:
                    ax.set_xlabel("in-context examples k")
        axes[0, 0].legend(fontsize=6, loc="lower right")
        fig.suptitle(f"{MIXER_LABEL.get(mixer, mixer)}: R² vs k (trained on {n_train} pairs)",
                     y=1.0)
        fig.tight_layout()
        paths += save(fig, out_dir, f"{name}_{mixer}")
        plt.close(fig)
    # summary: R² at the training length vs ω₂, and the change past the training length
    fig, axes = plt.subplots(1, len(depths), squeeze=False, sharey=True,
                             figsize=(3.2 * len(depths), 3.0))
    colors = {"relu_attention": "tab:blue", "attention": "tab:red"}
    for i, depth in enumerate(depths):
        ax = axes[0, i]
        mixes = [_mix(d) for d in dists]
        for mixer in sorted(model["model.mixer"].unique().to_list()):
            src = model.filter(pl.col("model.mixer") == mixer)
            vals = [_at(src, n_train, **{"task.depth": depth}, test_dist=d) for d in dists]
            ax.plot(mixes, vals, "o-", color=colors.get(mixer), label=MIXER_LABEL.get(mixer))
            for d in dists:
                k_max = int(src.filter(pl.col("test_dist") == d)["position"].max())
                at_train = _at(src, n_train, **{"task.depth": depth}, test_dist=d)
                at_max = _at(src, k_max, **{"task.depth": depth}, test_dist=d)
                summary[f"r2_{mixer}_N{depth}_{d}_k{n_train}"] = at_train
                summary[f"r2_{mixer}_N{depth}_{d}_k{k_max}"] = at_max
                if d == dists[0]:
                    lines.append(f"{mixer} N={depth}: R²(k={n_train}) {at_train:.3f} -> "
                                 f"R²(k={k_max}) {at_max:.3f}")
        net = [_at(refs, n_train, predictor=NET, **{"task.depth": depth}, test_dist=d)
               for d in dists]
        for d, v in zip(dists, net, strict=True):
            summary[f"r2_net_N{depth}_{d}_k{n_train}"] = v
        ax.plot(mixes, net, "s--", color="tab:orange", label="trained N-layer net")
        ax.set_title(f"teacher depth N = {depth}")
        ax.set_xlabel("test mixture ω₂")
    axes[0, 0].set_ylabel(f"R² at k = {n_train}")
    axes[0, 0].legend(fontsize=7)
    paths += save(fig, out_dir, f"{name}_summary")
    plt.close(fig)
    paths += baseline_epochs_figure(rows, out_dir, f"{name}_baseline_epochs")
    summary.update(paths=paths, table=table, note="; ".join(lines))
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
    fig, axes = plt.subplots(1, len(depths), squeeze=False, sharey=True,
                             figsize=(3.2 * len(depths), 3.0))
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


def deep_depth_figure(rows: pl.DataFrame, out_dir, name: str = "deep_depth",
                      **_context) -> dict:
    table = r2_table(rows).filter(pl.col("predictor") == "model")
    if table.height == 0:
        raise ValueError("deep_depth: no final r2 rows of ok members")
    n_train = int(table["task.n_points"].max())
    ks = fig3_ks(n_train)
    mixers = sorted(table["model.mixer"].unique().to_list())
    style()
    fig, axes = plt.subplots(1, len(mixers), squeeze=False, sharey=True,
                             figsize=(3.6 * len(mixers), 3.2))
    summary: dict = {"fit": None, "excluded": 0, "ks": ks}
    notes = []
    for ax, mixer in zip(axes[0], mixers, strict=True):
        src = table.filter((pl.col("model.mixer") == mixer) & pl.col("position").is_in(ks))
        for k in ks:
            curve = src.filter(pl.col("position") == k).sort("model.depth")
            depth, r2 = curve["model.depth"].to_numpy(), curve["r2"].to_numpy()
            ax.plot(depth, r2, "o-", label=f"k = {k}")
            summary.update({f"r2_{mixer}_L{d}_k{k}": float(v)
                            for d, v in zip(depth, r2, strict=True)})
            notes.append(f"{mixer} k={k}: " + ", ".join(f"L{d} {v:.3f}" for d, v in
                                                        zip(depth, r2, strict=True)))
        ax.set_xticks(sorted(table["model.depth"].unique().to_list()))
        ax.set_title(MIXER_LABEL.get(mixer, mixer))
        ax.set_xlabel("transformer depth (blocks)")
    axes[0, 0].set_ylabel("R² (pooled)")
    axes[0, 0].legend(fontsize=7)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    summary.update(paths=paths, table=table, note="; ".join(notes))
    return summary


def _fit(x, y, groups, n_boot, seed=0):
    """A saturating fit c + a x^-b, or (None, why): too few points, or an exponent at its
    bound (|b| = B_MAX: a step or a flat curve, not a power law)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_scaling(x, y, groups, form="saturating", n_boot=n_boot, seed=seed)
    except (ValueError, RuntimeError) as exc:
        return None, f"no fit: {exc}"
    if abs(fit.params["b"]) >= 0.99 * B_MAX or abs(fit.params["b"]) < 0.01:
        return None, (f"no law: b = {fit.params['b']:.3g} (a step or a flat curve; 1-R² "
                      f"spans {np.min(y):.3g}..{np.max(y):.3g})")
    return fit, ""


def deep_scaling_figure(rows: pl.DataFrame, out_dir, name: str = "deep_scaling",
                        n_boot: int = 1000, **_context) -> dict:
    ok = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "r2")
                     & (pl.col("predictor") == "model") & (pl.col("statistic") == "pooled"))
    ok = ok.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    if ok.height == 0:
        raise ValueError("deep_scaling: no final r2 rows of ok members")
    n_train = int(ok["task.n_points"].max())
    ok = ok.with_columns((1 - pl.col("value")).alias("err"))
    style()
    fig, (ax_l, ax_k) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    log_axes(ax_l)
    log_axes(ax_k)
    fits, notes = [], []
    at_train = ok.filter(pl.col("position") == n_train)
    for width in sorted(at_train["model.width"].unique().to_list()):
        pts = at_train.filter(pl.col("model.width") == width).sort("model.depth")
        line, = ax_l.plot(*pts.group_by("model.depth").agg(pl.col("err").mean()).sort(
            "model.depth").to_numpy().T, "o", label=f"width {width}")
        fit, note = _fit(pts["model.depth"].to_numpy(), pts["err"].to_numpy(),
                         pts["seed"].to_numpy(), n_boot)
        if fit is not None:
            fits.append(fit)
            x = pts["model.depth"].to_numpy()
            draw_fit(ax_l, fit, (x.min(), x.max()), label=f"w{width}: {fit.label()}",
                     color=line.get_color())
            notes.append(f"width {width}: 1-R² = {fit.label()}")
        else:
            notes.append(f"width {width}: {note}")
    depths = sorted(at_train["model.depth"].unique().to_list())
    ax_l.set_xticks(depths)
    if at_train["err"].max() < 3 * at_train["err"].min():  # < half a decade: linear y reads
        ax_l.set_yscale("linear")
    ax_l.xaxis.set_major_formatter(ScalarFormatter())
    ax_l.xaxis.set_minor_formatter(NullFormatter())
    ax_l.text(0.02, 0.02, "\n".join(n for n in notes if "no " in n), transform=ax_l.transAxes,
              fontsize=6, color="0.3")
    ax_l.set_xlabel("transformer depth L")
    ax_l.set_ylabel(f"1 - R² at k = {n_train}")
    ax_l.legend(fontsize=6)
    # 1 - R² vs k for every model; a fit c + a k^-b of the best one (k >= 1)
    models = ok.group_by("model.depth", "model.width", "position").agg(pl.col("err").mean())
    best = at_train.group_by("model.depth", "model.width").agg(pl.col("err").mean()).sort(
        "err").row(0, named=True)
    for (depth, width), curve in sorted(models.group_by("model.depth", "model.width"),
                                        key=lambda kv: kv[0]):
        curve = curve.filter(pl.col("position") >= 1).sort("position")
        is_best = depth == best["model.depth"] and width == best["model.width"]
        ax_k.plot(curve["position"], curve["err"], lw=1.4 if is_best else 0.6,
                  alpha=1 if is_best else 0.4, color="k" if is_best else None,
                  label=f"best: L={depth}, w={width}" if is_best else None)
    curve = ok.filter((pl.col("model.depth") == best["model.depth"])
                      & (pl.col("model.width") == best["model.width"])
                      & (pl.col("position") >= 1) & (pl.col("position") <= n_train))
    fit_k, note_k = _fit(curve["position"].to_numpy(), curve["err"].to_numpy(),
                         curve["seed"].to_numpy(), n_boot)
    if fit_k is not None:
        fits.append(fit_k)
        draw_fit(ax_k, fit_k, (1, float(ok["position"].max())), label=f"fit k ≤ {n_train}: "
                 f"{fit_k.label()}", color="tab:red")
        notes.append(f"best model vs k: 1-R² = {fit_k.label()}")
    else:
        notes.append(f"best model vs k: {note_k}")
    ax_k.axvline(n_train, color="0.6", lw=0.8, ls="-.")
    ax_k.set_xlabel("in-context examples k")
    ax_k.set_ylabel("1 - R²")
    ax_k.legend(fontsize=6)
    fig.tight_layout()
    paths = save(fig, out_dir, name)
    plt.close(fig)
    # "fit" stays None: these fits are of different curves, not alternative forms of one
    return {"fit": None, "fits": fits, "excluded": 0, "paths": paths,
            "best_depth": best["model.depth"], "best_width": best["model.width"],
            "best_err": float(best["err"]), "note": "; ".join(notes)}


DEEP_FIGURES = {
    "deep_shift": deep_shift_figure,
    "deep_depth": deep_depth_figure,
    "deep_scaling": deep_scaling_figure,
}
