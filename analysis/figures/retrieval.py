"""Sparse token retrieval figures (Mousavi-Hosseini et al.; sweeps/sample_complexity.py).

* ``str_sample_complexity`` (Fig 1): n*(N), the training prompts needed to reach a test-MSE
  threshold, vs sequence length N, one colour per architecture: faint lines per seed, the
  median bold, right-censored runs (never reached by the cap) as open triangles at the cap,
  and n* ∝ N^γ fitted per architecture (analysis.fitting.sample_complexity.fit_gamma: WLS on log
  medians, hierarchical seed bootstrap). One panel per threshold the runs can show (a
  threshold below the run's `eval.stop_below` cannot be reached: the run stopped first).
* ``str_heads`` (Prop. 3): test-MSE curves of one attention layer with H heads on qSTR
  (q = 2), the heuristic floor 1 - H/q for H < q, and the best MSE reached vs N.
* ``str_attention`` (Fig 2): the learned |W_QK| (query features x key features) at the end
  of training, from the "qk" artifact, block boundaries at d and d + d_e, with the diagonal
  contrast of the (query w_t, key w_j) block: mean |diag| / mean |off-block entries|.

The metric is the test MSE averaged over prompts and positions (statistic "mean"), which
Var(y) = 1 normalises, as in the paper. A threshold panel is "not testable at this scale" at
the N whose best trivial predictor (no retrieval, zero, ...) is not clearly worse than the
threshold (analysis.reading.regime.THRESHOLD_RATIO): reaching it there says nothing about learning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.colors import PowerNorm

from analysis.fitting.sample_complexity import compare_architectures, error_curves, n_star_table
from analysis.plotting import (
    PALETTE,
    baseline_curve,
    baseline_line,
    grid_ticks,
    log_axes,
    palette,
    regime_note,
    save,
    study_title,
    style,
)
from analysis.reading.frames import excluded_note, members
from analysis.reading.regime import TRIVIAL, final_rows, threshold_regime, trivial_levels
from icl_core.storage.artifacts import load_artifact

# The config columns this module's figures read besides analysis.reading.frames.SHARED_COLUMNS
# (analysis.figures.FIGURE_COLUMNS: regenerate reads no others from the store)
COLUMNS = ("eval.stop_below", "model.heads", "model.name", "task.code_dim", "task.dim",
           "task.n_points", "task.q", "task.simple",
           "train.batch_size")  # analysis.fitting.sample_complexity's

N_COL, ARCH = "task.n_points", "model.name"
NAMES = {"attention_mlp": "transformer (full W_QK)", "mha_mlp": "transformer (peer MHA)",
         "ffn": "FFN", "bigru": "bidirectional GRU"}
ARCH_COLORS = {"attention_mlp": PALETTE[0], "mha_mlp": PALETTE[4], "ffn": PALETTE[2],
               "bigru": PALETTE[3]}
# one marker per architecture: filled on its median line, open where its runs are censored
ARCH_MARKERS = {"attention_mlp": "o", "mha_mlp": "s", "ffn": "D", "bigru": "^"}
CENSORED_SPREAD = 0.06  # censored markers sit at N x (1 + 0.06)^(i - centre), one i per model
STATISTIC = "mean"  # the test MSE is the mean over prompts and positions


class NStarFit:
    """One architecture's n* ∝ N^γ at one threshold, as a fit-report row."""

    def __init__(self, row: dict, threshold: float):
        self.row, self.threshold = row, threshold

    def to_row(self) -> dict:
        r = self.row
        medians = {k: v for k, v in r.items() if k.startswith("n_star@")}
        return {
            "form": f"n* = k N^b: {r[ARCH]} @ MSE {self.threshold:g}", "threshold": self.threshold,
            "architecture": r[ARCH], "b": r.get("gamma"), "b_lo": r.get("gamma_lo"),
            "b_hi": r.get("gamma_hi"), "n_points": r.get("n_configs"), "decades": r.get("decades"),
            "n_censored": r.get("n_censored"), "fit_notes": r.get("note") or r.get("dropped"),
            "status": r.get("status") or ("no fit" if r.get("gamma") is None else "ok"),
            **medians,
        }


def _curves(rows: pl.DataFrame) -> pl.DataFrame:
    return error_curves(rows, statistic="mean")


def reachable(rows: pl.DataFrame, thresholds) -> tuple[list[float], list[str]]:
    """Thresholds at or above every run's stop (a run stops at its first test below
    eval.stop_below, so lower thresholds are never seen), and notes on the others."""
    stop = rows["eval.stop_below"].drop_nulls().max() if "eval.stop_below" in rows.columns \
        else None
    keep = [t for t in thresholds if stop is None or t >= stop - 1e-12]
    notes = [f"threshold {t:g} is below the runs' stop ({stop:g}): not shown"
             for t in thresholds if t not in keep]
    return keep, notes


def n_star_markdown(tables: dict[float, pl.DataFrame]) -> str:
    """Median n* per (architecture, N) per threshold ('≥cap' where censored)."""
    lines = []
    for threshold, table in tables.items():
        lines.append(f"\n## test MSE <= {threshold:g}\n")
        n_values = sorted(table[N_COL].unique().to_list())
        lines.append("| architecture | " + " | ".join(f"N={n}" for n in n_values) + " |")
        lines.append("|---|" + "---|" * len(n_values))
        for (arch,), part in table.group_by([ARCH], maintain_order=True):
            cells = []
            for n in n_values:
                sub = part.filter(pl.col(N_COL) == n)
                ok = sub.filter(~pl.col("censored"))["n_star"]
                if sub.height == 0:
                    cells.append("")
                elif sub["censored"].sum() * 2 >= sub.height:
                    cells.append(f"≥{sub['x_max'].max():.3g} ({int(sub['censored'].sum())}/"
                                 f"{sub.height} censored)")
                else:
                    cells.append(f"{ok.median():.3g}")
            lines.append(f"| {arch} | " + " | ".join(cells) + " |")
    return "# n*: samples to reach the threshold (median over seeds)\n" + "\n".join(lines) + "\n"


def _trivial_by_n(rows: pl.DataFrame) -> dict[float, tuple[str, float]]:
    """{N: (best trivial predictor, its mean test MSE)} at each member's last step (empty
    when the rows hold no trivial predictor)."""
    levels = trivial_levels(final_rows(rows, "mse"), STATISTIC, by=[N_COL])
    best = levels.sort("value").group_by(N_COL, maintain_order=True).first()
    return {float(n): (p, float(v)) for n, p, v in best.select(N_COL, "predictor", "value")
            .iter_rows()}


def threshold_regimes(threshold: float, trivial: dict[float, tuple[str, float]]) -> dict:
    """{N: the threshold rule's Regime} (analysis.reading.regime.threshold_regime), sorted by N: the
    one place a threshold panel's testability is decided (notes and fits.md table)."""
    return {n: threshold_regime(threshold, v, p) for n, (p, v) in sorted(trivial.items())}


def threshold_notes(threshold: float, trivial: dict[float, tuple[str, float]]) -> list[str]:
    """'not testable at this scale' lines of a threshold panel: the N where the threshold is
    not below THRESHOLD_RATIO x the best trivial predictor's error."""
    bad = {n: r for n, r in threshold_regimes(threshold, trivial).items() if r.learned is False}
    if not bad:
        return []
    where = "every N" if len(bad) == len(trivial) else \
        "N = " + ", ".join(f"{n:g}" for n in sorted(bad))
    worst = bad[max(bad, key=lambda n: threshold / bad[n].trivial)]
    return [f"not testable at this scale at {where}:", worst.text()]


def _label(arch: str, fit_row: dict) -> str:
    label = NAMES[arch]
    if fit_row.get("gamma") is None:
        return label
    status = fit_row.get("status") or "ok"
    if status != "ok":
        return f"{label}\nγ unresolved ({status})"
    return f"{label}\nγ = {fit_row['gamma']:.2f} [{fit_row['gamma_lo']:.2f}, " \
           f"{fit_row['gamma_hi']:.2f}]"


def str_sample_complexity_figure(rows: pl.DataFrame, out_dir, name="str_sample_complexity",
                                 n_boot: int = 1000, storage=None,
                                 thresholds=(0.7, 0.5, 0.3), **_context) -> dict:
    ok, excluded = members(rows, name)
    shown, notes = reachable(rows, thresholds)
    if not shown:
        raise ValueError(f"{name}: no threshold in {thresholds} is reachable")
    curves = _curves(rows)
    trivial = _trivial_by_n(rows)
    style()
    fig, axes = plt.subplots(1, len(shown), figsize=(5.6 * len(shown), 3.8), squeeze=False,
                             sharey=True, layout="constrained")
    archs = [a for a in NAMES if a in set(curves[ARCH])]
    centre = (len(archs) - 1) / 2
    fits, tables = [], {}
    for ax, threshold in zip(axes[0], shown, strict=True):
        table = n_star_table(curves, threshold, by=[ARCH, N_COL])
        tables[threshold] = table
        compared = compare_architectures(table, N_COL, group=ARCH, n_boot=n_boot)
        for i, arch in enumerate(archs):
            part = table.filter(pl.col(ARCH) == arch).sort(N_COL)
            color, marker = ARCH_COLORS[arch], ARCH_MARKERS[arch]
            for (_seed,), run in part.group_by(["seed"], maintain_order=True):
                reached = run.filter(~pl.col("censored"))
                ax.plot(reached[N_COL], reached["n_star"], color=color, alpha=0.25, lw=0.8)
            cens = part.filter(pl.col("censored"))
            shift = (1 + CENSORED_SPREAD) ** (i - centre)
            ax.scatter(cens[N_COL] * shift, cens["x_max"], marker=marker, facecolors="none",
                       edgecolors=color, s=26, linewidths=1.0, zorder=3)
            med = part.group_by(N_COL).agg(
                pl.col("n_star").filter(~pl.col("censored")).median().alias("m"),
                (pl.col("censored").sum() * 2 < pl.len()).alias("ok")).sort(N_COL)
            med = med.filter(pl.col("ok"))
            fit_row = compared.filter(pl.col(ARCH) == arch).to_dicts()[0]
            ax.plot(med[N_COL], med["m"], color=color, lw=2.2, marker=marker, ms=4,
                    label=_label(arch, fit_row))
            fits.append(NStarFit(fit_row, threshold))
        ax.scatter([], [], marker="o", facecolors="none", edgecolors="0.3", s=26,
                   label="open marker: not reached by the cap\n(censored; offset per model)")
        ax.set_title(f"samples to mean test MSE ≤ {threshold:g}", fontsize=9)
        regime_note(ax, threshold_notes(threshold, trivial))
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_xlabel("sequence length N")
        log_axes(ax)
        grid_ticks(ax, table[N_COL].to_list())
    axes[0][0].set_ylabel("samples n* (median over seeds; faint: seeds)")
    fig.suptitle(f"{study_title(rows)} (γ: n* ∝ N^γ, 95% CI)", fontsize=10)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    md = Path(out_dir) / "n_star.md"
    md.write_text(n_star_markdown(tables))
    gammas = "; ".join(gamma_words(f.row, shown[0]) for f in fits if f.threshold == shown[0])
    testable = {t: threshold_notes(t, trivial) for t in shown}
    return {"paths": [*paths, md], "fits": fits, "ok": ok, "excluded": excluded,
            "trivial": trivial, "not_testable": {t: v for t, v in testable.items() if v},
            "note": "; ".join([gammas, *notes, *excluded_note(excluded),
                               *[f"at mean test MSE ≤ {t:g}: {' '.join(v)}"
                                 for t, v in testable.items() if v]])}


def gamma_words(row: dict, threshold: float) -> str:
    """One model's fit in words, e.g. "attention_mlp: samples to reach mean test MSE <= 0.05
    grow as N^1.02 [0.91, 1.13]" or "...: n*(N) not fitted (n* reached at too few N within
    the samples trained)"."""
    arch, goal = row[ARCH], f"mean test MSE ≤ {threshold:g}"
    if row.get("gamma") is None:
        return f"{arch}: n*(N) not fitted at {goal} (n* reached at too few N within the " \
               "samples trained)"
    status = row.get("status") or "ok"
    spread = f" [{row['gamma_lo']:.2f}, {row['gamma_hi']:.2f}]" \
        if row.get("gamma_lo") is not None else ""
    verdict = "" if status == "ok" else f" (unresolved: {status})"
    return f"{arch}: samples to reach {goal} grow as N^{row['gamma']:.2f}{spread}{verdict}"


@dataclass(frozen=True)
class HeadsData:
    """What `str_heads_figure` draws, shaped from the rows (no drawing): the error curves, q,
    the N values and head counts, each run's best error, the trivial levels (overall and per
    N) and the threshold regime."""

    curves: pl.DataFrame  # model.heads, N, seed, samples, value
    q: int
    n_values: list
    heads: list
    best: pl.DataFrame  # model.heads, N, seed, best
    trivial: pl.DataFrame  # predictor, value (over every N)
    by_n: pl.DataFrame  # predictor, N, value
    trivial_n: dict[float, tuple[str, float]]
    ok: int
    excluded: int


def heads_data(rows: pl.DataFrame, name: str = "str_heads") -> HeadsData:
    """The data of `str_heads_figure`."""
    ok, excluded = members(rows, name)
    curves = _curves(rows)
    q = int(rows["task.q"].drop_nulls()[0])
    final = final_rows(rows, "mse")
    n_values = sorted(curves[N_COL].unique().to_list())
    heads = sorted(curves["model.heads"].unique().to_list())
    best = curves.group_by("model.heads", N_COL, "seed").agg(pl.col("value").min().alias("best"))
    return HeadsData(curves, q, n_values, heads, best, trivial_levels(final, STATISTIC),
                     trivial_levels(final, STATISTIC, by=[N_COL]), _trivial_by_n(rows), ok,
                     excluded)


def _draw_heads_curves(ax, data: HeadsData, threshold: float) -> None:
    """Left panel: test MSE vs training samples per (H, N), 1 - H/q for H < q (no legend)."""
    curves, q = data.curves, data.q
    colors = palette([str(n) for n in data.n_values])
    for h in data.heads:
        for n in data.n_values:
            part = curves.filter((pl.col("model.heads") == h) & (pl.col(N_COL) == n))
            med = part.group_by("samples").agg(pl.col("value").median()).sort("samples")
            ax.plot(med["samples"], med["value"], color=colors[str(n)],
                    ls="-" if h >= q else ":", label=f"H={h}, N={n}")
        if h < q:
            ax.axhline(1 - h / q, color="grey", lw=0.8, ls="--")
            ax.text(curves["samples"].min(), 1 - h / q, f" 1 - H/q = {1 - h / q:g}",
                    fontsize=7, va="bottom")
    ax.axhline(threshold, color="black", lw=0.8, label=f"threshold {threshold:g} ({STATISTIC})")
    for predictor, value in data.trivial.select("predictor", "value").iter_rows():
        baseline_line(ax, predictor, value, " (median over N)")
    ax.set_xlabel("training samples")
    ax.set_ylabel(f"test MSE ({STATISTIC} over prompts; median over seeds)")
    log_axes(ax)


def _draw_heads_best(ax, data: HeadsData, threshold: float) -> None:
    """Right panel: each run's best test MSE vs N per H, trivial levels, the threshold rule."""
    for h in data.heads:
        part = data.best.filter(pl.col("model.heads") == h).group_by(N_COL).agg(
            pl.col("best").median()).sort(N_COL)
        ax.plot(part[N_COL], part["best"], marker="o", ls="-" if h >= data.q else ":",
                label=f"H = {h}")
    for predictor in TRIVIAL:
        part = data.by_n.filter(pl.col("predictor") == predictor).sort(N_COL)
        if part.height:
            baseline_curve(ax, predictor, part[N_COL], part["value"])
    ax.axhline(threshold, color="black", lw=0.8, label=f"threshold {threshold:g} ({STATISTIC})")
    # a threshold claim (H = q reaches t, H < q does not): testable where t <= 0.5x the best
    # trivial predictor's error (the runs stop at t, so their final error is not the test)
    regime_note(ax, threshold_notes(threshold, data.trivial_n))
    ax.set_xlabel("sequence length N")
    ax.set_ylabel(f"best test MSE ({STATISTIC}; median over seeds)")
    log_axes(ax)
    grid_ticks(ax, data.n_values)
    ax.legend(fontsize=6)


def str_heads_figure(rows: pl.DataFrame, out_dir, name="str_heads", n_boot: int = 1000,
                     storage=None, threshold: float = 0.3, **_context) -> dict:
    data = heads_data(rows, name)
    style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.0), layout="constrained")
    _draw_heads_curves(left, data, threshold)
    _draw_heads_best(right, data, threshold)
    regime = threshold_table(threshold, data.trivial_n)
    fig.suptitle(study_title(rows), fontsize=10)
    left.legend(fontsize=6, ncol=2)
    paths = save(fig, out_dir, name)
    plt.close(fig)
    table = n_star_table(data.curves, threshold, by=["model.heads", N_COL])
    reached = table.group_by("model.heads").agg((~pl.col("censored")).sum().alias("reached"),
                                                pl.len().alias("runs")).sort("model.heads")
    levels = data.best.group_by("model.heads").agg(pl.col("best").median()).sort("model.heads")
    summary = {f"best_mse_H{h}": v for h, v in levels.iter_rows()}
    summary.update({f"reached_H{h}": f"{r}/{n}" for h, r, n in reached.iter_rows()})
    note = "; ".join(f"H={h}: best MSE median {v:.3g}, reached {threshold:g} in "
                     f"{summary[f'reached_H{h}']} runs" for h, v in levels.iter_rows())
    return {"paths": paths, "ok": data.ok, "excluded": data.excluded, **summary,
            "regime": regime, "note": "; ".join([note, *excluded_note(data.excluded)])}


def threshold_table(threshold: float, trivial: dict[float, tuple[str, float]]) -> pl.DataFrame:
    """The threshold rule per N as a regime table (fits.md): threshold, best trivial predictor
    and its mean test MSE, learned (= testable: t <= THRESHOLD_RATIO x it), and the reason."""
    rows = [{N_COL: n, "threshold": threshold, "trivial_predictor": r.trivial_predictor,
             "trivial": r.trivial, "learned": r.learned,
             "regime": ("testable: " if r.learned else "not testable: ") + r.text()}
            for n, r in threshold_regimes(threshold, trivial).items()]
    return pl.DataFrame(rows, schema={N_COL: pl.Float64, "threshold": pl.Float64,
                                      "trivial_predictor": pl.String, "trivial": pl.Float64,
                                      "learned": pl.Boolean, "regime": pl.String})


def str_attention_figure(rows: pl.DataFrame, out_dir, name="str_attention", n_boot: int = 1000,
                         storage=None, **_context) -> dict:
    """|W_QK| after training, one panel per (architecture, prompt kind); with several seeds
    the panel shows the seed whose diagonal contrast is the median, and its title gives the
    contrast's median [min–max] over seeds."""
    ok, excluded = members(rows, name)
    trained = (rows.filter(pl.col("status") == "ok")
               .group_by("config_hash").agg(pl.all().first()).sort(ARCH, "task.simple", "seed"))
    panels = trained.partition_by(ARCH, "task.simple", maintain_order=True)
    style()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 4.0),
                             squeeze=False, layout="constrained")
    summary: dict = {}
    from icl_core.tasks.qstr import code_dim, qk_contrast  # torch: only here

    for ax, group in zip(axes[0], panels, strict=True):
        runs = []
        for m in group.iter_rows(named=True):
            steps, values = load_artifact(storage, m["sweep"], m["study"], m["config_hash"], "qk")
            qk = values[-1][0]  # the last recorded step, head 0: (E, E)
            d, n = int(m["task.dim"]), int(m[N_COL])
            d_e = int(m.get("task.code_dim") or 0) or code_dim(n)
            runs.append((qk_contrast(qk, d, d_e), qk, int(steps[-1]), m, d, d_e, n))
        runs.sort(key=lambda r: r[0])
        contrast, qk, step, m, d, d_e, n = runs[(len(runs) - 1) // 2]  # the median seed
        values = [r[0] for r in runs]
        image = ax.imshow(np.abs(qk), cmap="viridis", norm=PowerNorm(gamma=2.0))
        for edge in (d, d + d_e):
            ax.axhline(edge - 0.5, color="white", lw=0.5)
            ax.axvline(edge - 0.5, color="white", lw=0.5)
        kind = "simple-1STR" if m["task.simple"] else "1STR"
        spread = (f"{contrast:.1f}" if len(runs) == 1 else
                  f"{contrast:.1f} [{min(values):.1f}–{max(values):.1f}] over {len(runs)} seeds")
        ax.set_title(f"{NAMES.get(m[ARCH], m[ARCH])}, {kind}\nN={n}, step {step} (seed "
                     f"{m['seed']}), diag contrast {spread}", fontsize=8)
        ax.set_xlabel("key features (x | w_j | w_t)")
        if ax is axes[0][0]:
            ax.set_ylabel("query features (x | w_i | w_t)")
        fig.colorbar(image, ax=ax, fraction=0.046)
        key = f"contrast_{m[ARCH]}_{kind}"
        summary.update({key: contrast, f"{key}_lo": min(values), f"{key}_hi": max(values),
                        f"{key}_n": len(runs)})
    paths = save(fig, out_dir, name)
    plt.close(fig)
    note = "; ".join(
        f"{k.removeprefix('contrast_')}: {v:.1f} [{summary[k + '_lo']:.1f}–"
        f"{summary[k + '_hi']:.1f}], {summary[k + '_n']} seed(s)"
        for k, v in summary.items() if not k.endswith(("_lo", "_hi", "_n")))
    return {"paths": paths, "ok": ok, "excluded": excluded, **summary,
            "note": "; ".join([f"diagonal contrast {note}", *excluded_note(excluded)])}


RETRIEVAL_FIGURES = {
    "str_sample_complexity": str_sample_complexity_figure,
    "str_heads": str_heads_figure,
    "str_attention": str_attention_figure,
}

