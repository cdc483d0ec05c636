"""Figures of Ahn et al. 2023 (linear transformers learn preconditioned GD).

* lsa_convergence (Figs 1, 3): per layer i, Dist(Σ^½ A_i Σ^½, I) (blue, → 0 on the
  preconditioned set) and Dist(A_i, I) (red, stays ≈ Dist(Σ⁻¹, I)); Dist(B_i, I) for the
  form with B; the test loss over L-BFGS iterations against the closed-form f_L*. Mean ± std
  over seeds (a new Σ per seed). Heatmaps of the final Σ^½ A_i Σ^½ (and B_i): Figs 2, 4.
* lsa_scaling: the trained test loss against layers L, dimension d or context length n,
  next to f_L*:
  the median over seeds with the min–max over seeds as a band (analysis.plotting.seed_band).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from analysis.plotting import (
    COLORS,
    PALETTE,
    baseline_curve,
    baseline_line,
    hollow,
    log_axes,
    regime_note,
    ridge_solves,
    save,
    seed_band,
    seed_caption,
    study_title,
    style,
    trivial_lines,
)
from analysis.reading.frames import cell_regime
from analysis.reading.regime import final_rows, regime_notes, trivial_levels
from icl_core.storage.artifacts import load_artifact

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("model.form", "model.layers", "task.dim", "task.n_points", "task.spectrum", "task.w_law",)


def dist_to_identity(a):  # icl_core.algorithms.closed_forms imports torch: only when a figure needs it
    from icl_core.algorithms.closed_forms import dist_to_identity as dist

    return dist(a)


def lsa_optimal_loss(n, d, layers):
    from icl_core.algorithms.closed_forms import lsa_optimal_loss as optimal

    return optimal(n, d, layers)


def sigma_from_spectrum(spectrum, seed):
    from icl_core.algorithms.closed_forms import sigma_from_spectrum as sigma

    return sigma(spectrum, seed)


def _members(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per ok member with the config columns the figures need."""
    cols = ["config_hash", "seed", "task_seed", "task.spectrum", "task.dim", "task.n_points",
            "model.layers", "model.form", "task.w_law", "study", "sweep"]
    ok = rows.filter(pl.col("status") == "ok")
    return ok.group_by("config_hash").agg([pl.col(c).first() for c in cols[1:]]).sort("seed")


def _sqrtm(sigma: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh(sigma)
    return vecs @ np.diag(np.sqrt(vals)) @ vecs.T


def _spectrum(value) -> list[float]:
    return json.loads(value) if isinstance(value, str) else list(value or [])


def dist_curves(storage: str, member: dict) -> dict[str, np.ndarray]:
    """steps (S,), dist_sigma (S, L), dist_a (S, L) [, dist_b (S, L)] of one member."""
    sweep, study, h = member["sweep"], member["study"], member["config_hash"]
    steps, A = load_artifact(storage, sweep, study, h, "A")  # (S, L, d, d)
    spectrum = _spectrum(member["task.spectrum"])
    d = A.shape[-1]
    sigma = sigma_from_spectrum(spectrum, member["task_seed"])[0] if spectrum else np.eye(d)
    root = _sqrtm(np.asarray(sigma, dtype=np.float64))
    out = {
        "steps": steps,
        "dist_sigma": np.array([[dist_to_identity(root @ a @ root) for a in s] for s in A]),
        "dist_a": np.array([[dist_to_identity(a) for a in s] for s in A]),
        "final_sigma_a": np.stack([root @ a @ root for a in A[-1]]),
    }
    if member["model.form"] == "sparse_b":
        _, B = load_artifact(storage, sweep, study, h, "B")
        out["dist_b"] = np.array([[dist_to_identity(b) for b in s] for s in B])
        out["final_b"] = B[-1]
    return out


def test_loss_curves(rows: pl.DataFrame, statistic: str = "mean") -> pl.DataFrame:
    """Test MSE (a statistic over fresh prompts) at every evaluated step, per member."""
    return rows.filter(
        (pl.col("status") == "ok") & (pl.col("metric") == "mse") & (pl.col("predictor") == "model")
        & (pl.col("statistic") == statistic) & (pl.col("test_dist") == "train")
    ).select("config_hash", "seed", "step", "value").sort("step")


def train_loss_curves(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean loss on the fixed training batch at every report, per member."""
    return rows.filter((pl.col("status") == "ok") & (pl.col("metric") == "train_loss")).select(
        "config_hash", "seed", "step", "value").sort("step")


def _last(frame: pl.DataFrame) -> float:
    """Mean over members of each member's last value."""
    return float(frame.filter(pl.col("step") == pl.col("step").max().over("config_hash"))[
        "value"].mean())


def _mean_std(curves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.stack(curves)
    return stacked.mean(0), stacked.std(0)


@dataclass(frozen=True)
class ConvergenceData:
    """What `lsa_convergence_figure` draws, shaped from the rows and the stored artifacts (no
    drawing): the ok members, the first member's config, every member's Dist curves, the loss
    curves, the final rows and their learned-regime table, f_L* where it is known."""

    members: pl.DataFrame
    first: dict
    curves: list[dict]  # per member: steps, dist_sigma, dist_a (and dist_b)
    with_b: bool
    train_loss: pl.DataFrame
    test_mean: pl.DataFrame
    test_median: pl.DataFrame
    final: pl.DataFrame
    regime: pl.DataFrame
    f_star: float | None


def convergence_data(rows: pl.DataFrame, storage: str = "results") -> ConvergenceData:
    """The data of `lsa_convergence_figure`: ValueError without ok members."""
    members = _members(rows)
    if members.height == 0:
        raise ValueError("lsa_convergence: no ok members")
    first = members.row(0, named=True)
    L, n, d = first["model.layers"], first["task.n_points"], first["task.dim"]
    curves = [dist_curves(storage, m) for m in members.iter_rows(named=True)]
    f_star = None
    if first["model.form"] == "sparse" and first["task.w_law"] == "inverse":
        f_star = lsa_optimal_loss(n, d, L)
    final = final_rows(rows, "mse")
    regime = cell_regime(final, [], statistic="mean", metric="mse")
    return ConvergenceData(members, first, curves, "dist_b" in curves[0], train_loss_curves(rows),
                           test_loss_curves(rows, "mean"), test_loss_curves(rows, "median"),
                           final, regime, f_star)


def _draw_dists(axes, data: ConvergenceData) -> None:
    """Dist(Σ^1/2 A_i Σ^1/2, I) and Dist(A_i, I) per layer, then Dist(B_j, I), mean ± std
    over members, on the first panels."""
    curves, L = data.curves, data.first["model.layers"]
    steps = curves[0]["steps"]
    for i in range(L):
        ax = axes[i]
        for key, color, label in (("dist_sigma", COLORS["model"], r"Dist($\Sigma^{1/2}A_i\Sigma^{1/2}$, I)"),
                                  ("dist_a", PALETTE[3], r"Dist($A_i$, I)")):
            mean, std = _mean_std([c[key][:, i] for c in curves])
            ax.plot(steps, mean, color=color, label=label)
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        ax.set_ylim(0, 1)
        ax.set_title(f"layer {i}")
        ax.set_xlabel("L-BFGS iteration")
    axes[0].legend(fontsize=7)
    for j in range(L - 1 if data.with_b else 0):
        ax = axes[L + j]
        mean, std = _mean_std([c["dist_b"][:, j] for c in curves])
        ax.plot(steps, mean, color=PALETTE[2])
        ax.fill_between(steps, mean - std, mean + std, color=PALETTE[2], alpha=0.2)
        ax.set_ylim(0, 1)
        ax.set_title(f"Dist(B_{j}, I)")
        ax.set_xlabel("L-BFGS iteration")


def _draw_loss(ax, data: ConvergenceData) -> None:
    """The last panel: train and test loss (means over seeds), f_L*, trivial levels."""
    curves_by_label = (
        ("train loss (fixed batch)", data.train_loss, "0.5", "-"),
        ("test loss: mean over prompts", data.test_mean, "k", "-"),
        ("test loss: median over prompts", data.test_median, "k", ":"),
    )
    for label, frame, color, line in curves_by_label:
        table = frame.group_by("step").agg(pl.col("value").mean().alias("mean")).sort("step")
        ax.plot(table["step"], table["mean"], color=color, ls=line, label=label)
    ax.set_yscale("log")
    if data.f_star is not None:
        L = data.first["model.layers"]
        ax.axhline(data.f_star, color=PALETTE[1], ls="--", label=f"$f_{L}^*$ = {data.f_star:.3g}")
    final = data.final
    trivial_lines(ax, trivial_levels(final, "mean"), ridge_solves=ridge_solves(final))
    regime_note(ax, regime_notes(data.regime))
    ax.set_title("ICL loss (mean over seeds)")
    ax.set_xlabel("L-BFGS iteration")
    ax.legend(fontsize=6)


def lsa_convergence_figure(rows: pl.DataFrame, out_dir, name: str = "lsa_convergence",
                           storage: str = "results", **_context) -> dict:
    data = convergence_data(rows, storage)
    curves, with_b, f_star = data.curves, data.with_b, data.f_star
    L = data.first["model.layers"]
    panels = L + (L - 1 if with_b else 0) + 1
    style()
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.2), layout="constrained")
    _draw_dists(axes, data)
    _draw_loss(axes[-1], data)
    fig.suptitle(study_title(rows), fontsize=10)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    paths += heatmaps(curves[0], out_dir, f"{name}_heatmaps")

    final_loss = _last(data.test_mean)
    return {
        "final_train_loss": _last(data.train_loss),
        "final_test_median": _last(data.test_median),
        "paths": paths, "fit": None,
        "excluded": rows["config_hash"].n_unique() - data.members.height,
        "final_test_loss": final_loss, "f_star": f_star,
        "loss_over_f_star": final_loss / f_star if f_star else None,
        "dist_sigma_final": float(np.mean([c["dist_sigma"][-1].mean() for c in curves])),
        "dist_a_final": float(np.mean([c["dist_a"][-1].mean() for c in curves])),
        "dist_b_final": float(np.mean([c["dist_b"][-1].mean() for c in curves])) if with_b else None,
        "note": f"final test loss {final_loss:.4g} (median over prompts "
                f"{_last(data.test_median):.3g}, train "
                f"{_last(data.train_loss):.3g})" + (f" vs f_L* {f_star:.4g}" if f_star else ""),
    }


def heatmaps(curve: dict, out_dir, name: str) -> list[Path]:
    """Final Σ^½ A_i Σ^½ (and B_i) of one seed, values annotated (Figs 2, 4)."""
    mats = [(f"Σ½A{i}Σ½", m) for i, m in enumerate(curve["final_sigma_a"])]
    mats += [(f"B{i}", m) for i, m in enumerate(curve.get("final_b", [])[:-1])]
    fig, axes = plt.subplots(1, len(mats), figsize=(2.6 * len(mats), 2.6))
    for ax, (title, m) in zip(np.atleast_1d(axes), mats, strict=True):
        ax.imshow(m, cmap="gray_r")
        for (r, c), v in np.ndenumerate(m):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=6, color="tab:red")
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    paths = save(fig, out_dir, name)
    plt.close(fig)
    return paths


def lsa_scaling_figure(rows: pl.DataFrame, out_dir, name: str = "lsa_scaling",
                       **_context) -> dict:
    """Final test loss vs the study's axis (model.layers, task.dim or task.n_points), with
    f_L*."""
    members = _members(rows)
    axis = next((c for c in ("model.layers", "task.dim") if members[c].n_unique() > 1),
                "task.n_points")
    final = test_loss_curves(rows)
    final = final.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    final = final.join(members.select("config_hash", "task.dim", "task.n_points",
                                      "model.layers"), on="config_hash")
    others = [c for c in ("task.dim", "task.n_points", "model.layers") if c != axis]
    table = final.group_by(axis).agg(*[pl.col(c).first() for c in others]).sort(axis)
    table = table.with_columns(pl.struct("task.n_points", "task.dim", "model.layers").map_elements(
        lambda r: lsa_optimal_loss(r["task.n_points"], r["task.dim"], r["model.layers"]),
        return_dtype=pl.Float64).alias("f_star"))
    style()
    fig, ax = plt.subplots()
    _, spread = seed_band(ax, final, axis, "value", label="trained LSA", color=COLORS["model"])
    table = table.join(spread.select(axis, "median", pl.col("min").alias("lo"),
                                     pl.col("max").alias("hi"), "n_seeds"), on=axis, how="left")
    x = table[axis].to_numpy()
    ax.plot(x, table["f_star"], "s--", color=PALETTE[1], label="$f_L^*$ (closed form)")
    log_axes(ax, x=axis == "task.n_points", y=True)
    if axis != "task.n_points":
        ax.set_xticks(x)  # integers: layers, dimensions
    final = final_rows(rows, "mse")
    trivial = trivial_levels(final, "mean", by=[axis])
    for predictor in trivial["predictor"].unique().sort().to_list():
        part = trivial.filter(pl.col("predictor") == predictor).sort(axis)
        note = " (solves the task: not a bar)" if predictor == "ridge" and ridge_solves(
            final) else ""
        if part[axis].n_unique() == 1:
            baseline_line(ax, predictor, float(part["value"][0]), note)
        else:
            baseline_curve(ax, predictor, part[axis], part["value"], note)
    regime = cell_regime(final, [axis], statistic="mean", metric="mse")
    out = regime.filter(pl.col("learned").not_())
    hollow(ax, out[axis], out["model"], COLORS["model"])
    regime_note(ax, regime_notes(regime, x=axis))
    ax.set_xlabel({"model.layers": "layers L", "task.dim": "task dimension d"}.get(
        axis, "context length n"))
    ax.set_ylabel("ICL test loss (mean over prompts)")
    ax.set_title(study_title(rows), fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5),
              title=seed_caption(ax) or None, title_fontsize=6.5, alignment="left")
    paths = save(fig, out_dir, name)
    plt.close(fig)
    ratio = (table["median"] / table["f_star"]).to_list()
    return {"paths": paths, "fit": None, "excluded": 0, "table": table,
            "note": "trained / f_L*: " + ", ".join(f"{a}: {r:.3f}" for a, r in
                                                   zip(x.tolist(), ratio, strict=True))}
