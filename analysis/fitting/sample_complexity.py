"""Sample complexity: n*, the samples a model needs to reach a target test error, and how it
scales with a size N (depth, width, dimension...): n* ∝ N^γ.

    curves = error_curves(rows)                       # mse vs samples seen, per member
    table = n_star_table(curves, threshold=1e-2, by=["model.depth"])
    fit = fit_gamma(table, "model.depth")                  # γ̂ [95% CI], configs, decades
    compare_architectures(table, "task.dim", group="model.name")

Method (see shared/notes/scaling_law_fitting.md, section 3):

1. Per seed, the recorded error curve err(x) (x = samples seen = step x batch size, or any x
   column) is made monotone by its running minimum (the best error so far).
2. n* is found by interpolating log err against log x between the two recorded points that
   bracket the threshold. A curve that never reaches it (a plateau above it, or too short a
   run) is right-censored at its cap: n* = NaN, censored = True, and it is never fitted. A
   curve already below the threshold at its first point is left-censored (n* <= x_min):
   n* = x_min, left_censored = True, and it is not fitted either.
3. γ: weighted least squares of log n* on log N over configurations (one value of N each),
   where a configuration's point is the median of log n* over its seeds and its weight is
   1/Var(log n*) of that median (Var across seeds / #seeds); equal weights when any
   configuration has fewer than two usable seeds or no spread. A configuration whose median
   n* is censored (half or more of its seeds censored on one side) is left out and counted.
4. CI: hierarchical bootstrap, B >= 1000 (seeded): resample the seeds within each
   configuration with replacement, recompute every configuration's median, refit (weights
   held fixed); 2.5/97.5 percentiles. Also reported: the number of configurations, the decades
   of N spanned, the censored counts, and γ's range over leave-one-configuration-out fits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analysis.fitting.fit import fit_status

DEFAULT_BOOT = 1000
CENSORED_SHARE = 0.5  # a configuration's median n* is censored at this share of its seeds


@dataclass(frozen=True)
class NStar:
    """One curve's n*: NaN when right-censored (never reached by x_max)."""

    n_star: float
    censored: bool
    left_censored: bool
    x_max: float  # the cap: the largest x recorded
    n_points: int


def n_star(x, err, threshold: float) -> NStar:
    """Samples to reach err <= threshold on one curve (see the module doc). Non-finite errors
    (NaN) are dropped; +inf counts as "not reached"; errors <= 0 count as reached."""
    if not threshold > 0:
        raise ValueError(f"threshold must be positive, got {threshold}")
    x, err = np.asarray(x, dtype=float), np.asarray(err, dtype=float)
    keep = np.isfinite(x) & (x > 0) & ~np.isnan(err)
    x, err = x[keep], err[keep]
    if x.size == 0:
        return NStar(math.nan, True, False, math.nan, 0)
    order = np.argsort(x, kind="stable")
    x, err = x[order], err[order]
    ux, start = np.unique(x, return_index=True)  # repeated x: the median error there
    err = np.array([np.median(part) for part in np.split(err, start[1:])])
    envelope = np.minimum.accumulate(err)
    hit = np.flatnonzero(envelope <= threshold)
    if hit.size == 0:
        return NStar(math.nan, True, False, float(ux[-1]), int(ux.size))
    i = int(hit[0])
    if i == 0:
        return NStar(float(ux[0]), False, True, float(ux[-1]), int(ux.size))
    tiny = threshold * 1e-12
    e0, e1 = math.log(max(envelope[i - 1], tiny)), math.log(max(envelope[i], tiny))
    t = (math.log(threshold) - e0) / (e1 - e0)  # e0 > log threshold >= e1
    log_n = math.log(ux[i - 1]) + t * (math.log(ux[i]) - math.log(ux[i - 1]))
    return NStar(float(math.exp(log_n)), False, False, float(ux[-1]), int(ux.size))


def samples_seen(rows: pl.DataFrame, batch_col: str = "train.batch_size",
                 step_col: str = "step", out: str = "samples") -> pl.DataFrame:
    """Adds `out` = step x batch size (the training samples seen at that step)."""
    if batch_col not in rows.columns:
        raise ValueError(f"samples seen: rows lack the {batch_col!r} column")
    return rows.with_columns((pl.col(step_col) * pl.col(batch_col)).cast(pl.Float64).alias(out))


def error_curves(rows: pl.DataFrame, metric: str = "mse", statistic: str = "median",
                      predictor: str = "model", test_dist: str = "train",
                      statuses: Sequence[str] = ("ok",),
                      batch_col: str = "train.batch_size") -> pl.DataFrame:
    """The recorded test-error curve of every member: rows of `metric`/`statistic` of the
    model at each evaluated step (intermediate evaluations and the final one), at each
    member's last position (the query), with `samples` = step x batch size."""
    out = rows.filter(
        pl.col("status").is_in(list(statuses)) & (pl.col("metric") == metric)
        & (pl.col("statistic") == statistic) & (pl.col("predictor") == predictor)
        & (pl.col("test_dist") == test_dist)
    )
    position = pl.col("position").fill_null(-1)
    out = out.filter(position == position.max().over("config_hash"))
    if batch_col in out.columns:
        out = samples_seen(out, batch_col)
    return out.sort("config_hash", "step")


def n_star_table(curves: pl.DataFrame, threshold: float, by: Sequence[str],
                 x: str = "samples", y: str = "value", seed: str = "seed") -> pl.DataFrame:
    """n* of every curve, one curve per (by..., seed): columns by, seed, n_star, censored,
    left_censored, x_max, n_points, threshold."""
    keys = [*by, seed]
    missing = [c for c in [*keys, x, y] if c not in curves.columns]
    if missing:
        raise ValueError(f"n* table: curves lack columns {missing}")
    records = []
    for key, part in curves.group_by(keys, maintain_order=True):
        result = n_star(part[x].to_numpy(), part[y].to_numpy(), threshold)
        records.append({**dict(zip(keys, key, strict=True)), "n_star": result.n_star,
                        "censored": result.censored, "left_censored": result.left_censored,
                        "x_max": result.x_max, "n_points": result.n_points})
    schema = {k: curves.schema[k] for k in keys}
    schema.update({"n_star": pl.Float64, "censored": pl.Boolean, "left_censored": pl.Boolean,
                   "x_max": pl.Float64, "n_points": pl.Int64})
    table = pl.DataFrame(records, schema=schema, orient="row") if records else pl.DataFrame(
        schema=schema)
    return table.with_columns(pl.lit(float(threshold)).alias("threshold")).sort(keys)


@dataclass
class GammaFit:
    """γ of n* ∝ N^γ: WLS estimate, hierarchical-bootstrap 95% CI, and what went in."""

    gamma: float
    ci: tuple[float, float]
    log_k: float  # intercept: log n* = log_k + γ log N (natural log)
    n_configs: int  # configurations fitted
    decades: float  # log10(max N / min N) over them
    n_seeds: int  # usable (uncensored) seed-level n* values fitted
    n_censored: int  # right-censored curves (never reached the threshold)
    n_left_censored: int  # curves below the threshold at their first point
    dropped: list[tuple[float, str]] = field(default_factory=list)  # (N, why) configs left out
    weighting: str = "inverse-variance"  # or "equal"
    n_boot: int = 0
    loo_range: tuple[float, float] = (math.nan, math.nan)  # γ over leave-one-config-out fits
    per_config: pl.DataFrame | None = field(default=None, repr=False)
    claim_sign: int | None = None  # the sign a claim needs of γ (see analysis.fitting.fit.fit_status)

    @property
    def status(self) -> str:
        """'ok' or why γ is unresolved (analysis.fitting.fit.fit_status)."""
        return fit_status(self)

    def predict(self, n) -> np.ndarray:
        """n* at N (the fitted line)."""
        return np.exp(self.log_k + self.gamma * np.log(np.asarray(n, dtype=float)))

    def label(self) -> str:
        return f"γ = {self.gamma:.2f} [{self.ci[0]:.2f}, {self.ci[1]:.2f}]"

    def to_row(self) -> dict:
        return {
            "gamma": self.gamma, "gamma_lo": self.ci[0], "gamma_hi": self.ci[1],
            "k": math.exp(self.log_k), "n_configs": self.n_configs, "decades": self.decades,
            "n_seeds": self.n_seeds, "n_censored": self.n_censored,
            "n_left_censored": self.n_left_censored, "n_dropped_configs": len(self.dropped),
            "dropped": "; ".join(f"N={n:g}: {why}" for n, why in self.dropped),
            "weighting": self.weighting, "n_boot": self.n_boot,
            "gamma_loo_min": self.loo_range[0], "gamma_loo_max": self.loo_range[1],
            "status": self.status,
        }


def _wls_row(log_n: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows (intercept, slope) of the WLS solution operator: beta = op @ y."""
    design = np.column_stack([np.ones_like(log_n), log_n])
    xtw = design.T * w
    return np.linalg.solve(xtw @ design, xtw)  # (2, C)


def _config_n_stars(frame: pl.DataFrame, n_col: str, n_star_col: str):
    """Per configuration N (first-seen order): (fittable [(N, log n* of its usable seeds)],
    dropped [(N, why)], per-config rows)."""
    configs, dropped, per_config = [], [], []
    for (n_value,), part in frame.group_by([n_col], maintain_order=True):
        n_value = float(n_value)
        right, lcens = part["censored"].to_numpy(), part["_left"].to_numpy()
        values = part[n_star_col].to_numpy()
        usable = ~right & ~lcens & np.isfinite(values) & (values > 0)
        m = part.height
        median = float(np.median(values[usable])) if usable.any() else math.nan
        why = None
        if not n_value > 0:
            why = "non-positive N"
        elif right.sum() >= CENSORED_SHARE * m:
            why = f"median n* censored ({int(right.sum())}/{m} seeds never reach the threshold)"
        elif lcens.sum() >= CENSORED_SHARE * m:
            why = f"median n* left-censored ({int(lcens.sum())}/{m} seeds below it at once)"
        elif not usable.any():
            why = "no usable n*"
        per_config.append({n_col: n_value, "median_n_star": median if why is None else math.nan,
                           "n_seeds": m, "n_usable": int(usable.sum()),
                           "n_censored": int(right.sum()), "n_left_censored": int(lcens.sum()),
                           "used": why is None})
        if why:
            dropped.append((n_value, why))
        else:
            configs.append((n_value, np.log(values[usable])))
    return configs, dropped, per_config


def _boot_ci(configs: list, op: np.ndarray, n_boot: int, rng_seed: int) -> tuple[float, float]:
    """95% percentile CI of γ from resampling the seeds within each configuration."""
    rng = np.random.default_rng(rng_seed)
    boot = np.empty((n_boot, len(configs)))
    for j, (_, v) in enumerate(configs):  # resample seeds within each configuration
        boot[:, j] = np.median(v[rng.integers(v.size, size=(n_boot, v.size))], axis=1)
    gammas = boot @ op[1]
    return (float(np.percentile(gammas, 2.5)), float(np.percentile(gammas, 97.5))) if n_boot \
        else (math.nan, math.nan)


def _loo_range(log_n: np.ndarray, weights: np.ndarray, medians: np.ndarray) -> tuple:
    """(min, max) of γ with each configuration left out in turn (NaNs below 3)."""
    if len(medians) < 3:
        return (math.nan, math.nan)
    values = []
    for j in range(len(medians)):
        keep = np.arange(len(medians)) != j
        values.append(float((_wls_row(log_n[keep], weights[keep]) @ medians[keep])[1]))
    return (min(values), max(values))


def fit_gamma(table: pl.DataFrame, n_col: str, n_star_col: str = "n_star", seed: str = "seed",
              n_boot: int = DEFAULT_BOOT, rng_seed: int = 0) -> GammaFit:
    """γ̂ of n* ∝ N^γ from a `n_star_table` (one row per configuration N and seed): see the
    module doc. Raises ValueError with fewer than two fittable configurations."""
    for column in (n_col, n_star_col, "censored"):
        if column not in table.columns:
            raise ValueError(f"fit_gamma: table lacks column {column!r}")
    left = table["left_censored"] if "left_censored" in table.columns else pl.Series(
        [False] * table.height)
    # in N, seed and n* order (a total order, with or without seed labels): the bootstrap's
    # draws follow each configuration's seeds' order
    keys = [c for c in (n_col, seed, n_star_col, "censored") if c in table.columns]
    frame = table.with_columns(left.alias("_left")).sort([*keys, "_left"], nulls_last=True)
    configs, dropped, per_config = _config_n_stars(frame, n_col, n_star_col)
    per_config_frame = pl.DataFrame(per_config).sort(n_col) if per_config else None
    n_censored = int(frame["censored"].sum())
    n_left = int(frame["_left"].sum())
    if len({n for n, _ in configs}) < 2:
        raise ValueError(f"fit_gamma: {len(configs)} fittable configuration(s) of {n_col}, "
                         f"need >= 2 ({n_censored} censored curves; dropped: {dropped})")
    configs.sort(key=lambda c: c[0])
    log_n = np.log([n for n, _ in configs])
    medians = np.array([np.median(v) for _, v in configs])
    variances = np.array([np.var(v, ddof=1) / v.size if v.size > 1 else math.nan
                          for _, v in configs])
    if np.all(np.isfinite(variances) & (variances > 0)):
        weights, weighting = 1.0 / variances, "inverse-variance"
    else:
        weights, weighting = np.ones_like(medians), "equal"
    op = _wls_row(log_n, weights)
    log_k, gamma = op @ medians
    return GammaFit(
        gamma=float(gamma), ci=_boot_ci(configs, op, n_boot, rng_seed), log_k=float(log_k),
        n_configs=len(configs), decades=float((log_n.max() - log_n.min()) / math.log(10.0)),
        n_seeds=int(sum(v.size for _, v in configs)), n_censored=n_censored,
        n_left_censored=n_left, dropped=dropped, weighting=weighting, n_boot=n_boot,
        loo_range=_loo_range(log_n, weights, medians), per_config=per_config_frame,
    )


def compare_architectures(table: pl.DataFrame, n_col: str, group: str,
                          n_star_col: str = "n_star", seed: str = "seed",
                          n_boot: int = DEFAULT_BOOT, rng_seed: int = 0) -> pl.DataFrame:
    """One row per value of `group` (e.g. "model.name"): γ̂ with its CI, configurations,
    decades, censored counts, and the median n* at each N (columns "n_star@<N>"; null where
    the median is censored), side by side. A group γ cannot be fitted for gets null γ and a
    note."""
    if group not in table.columns:
        raise ValueError(f"compare_architectures: table lacks column {group!r}")
    rows = []
    n_values = sorted({float(v) for v in table[n_col].drop_nulls().to_list()})
    for (label,), part in table.group_by([group], maintain_order=True):
        row: dict = {group: label}
        try:
            fit = fit_gamma(part, n_col, n_star_col, seed, n_boot, rng_seed)
            row.update(fit.to_row())
            row["note"] = ""
            medians = {r[n_col]: r["median_n_star"] for r in fit.per_config.iter_rows(named=True)}
        except ValueError as exc:
            row.update({"gamma": None, "gamma_lo": None, "gamma_hi": None,
                        "n_censored": int(part["censored"].sum()), "note": str(exc)})
            medians = {}
            for (n_value,), sub in part.group_by([n_col]):
                usable = ~pl.col("censored")
                if "left_censored" in sub.columns:
                    usable = usable & ~pl.col("left_censored")
                ok = sub.filter(usable)[n_star_col]
                censored = sub["censored"].sum() >= CENSORED_SHARE * sub.height
                medians[float(n_value)] = None if censored or ok.len() == 0 else ok.median()
        for n_value in n_values:
            value = medians.get(n_value)
            row[f"n_star@{n_value:g}"] = None if value is None or math.isnan(value) else value
        rows.append(row)
    return pl.DataFrame(rows, strict=False).sort(group)
