"""Adaptive design: where the next trials of a study most shrink the uncertainty of its law.

    goal = Goal("exponent", target=0.2)                     # b's 95% bootstrap CI width <= 0.2
    goal = Goal("forecast", target=0.3, at=64)              # log10 width of the 90% band at x=64
    x, y, seeds = member_points(rows, "model.depth")        # one measured value per member
    now = assess(x, y, goal, form="power")                  # Status: width, reached, fit
    choice = choose(x, y, seeds, lattice(1, 64, 12, integer=True), goal, n_trials=3)
    choice.trials                                           # [(x, seed), ...] to run next

The goal quantity. `exponent`: the width (97.5th - 2.5th percentile) of the fitted exponent
(`param`, default the form's first exponent, e.g. b of a x^-b) over analysis.fitting.fit's bootstrap
with every member its own group (members resampled across all x; analysis.fitting.sample_complexity's
`fit_gamma`, which the n* figures use, instead fits per-x medians and resamples seeds within
each x, and can give a different width for the same rows). `forecast`: log10(hi / lo) of the law's pointwise band at x = `at` over the same
bootstrap curves (`Fit.predict_band`, level 0.9 as analysis.forecasts.forecast seals; the band of the
law alone: seed noise at `at` is not shrunk by trials elsewhere). The study reaches its goal
when that width is <= `target`.

The goal's estimator (`Goal.estimator`), so that a design stops where the figure would say it
has its width: `members` (above; every member its own bootstrap group), `seeds` (the fit
resampled by seed label across all x, as the scaling figures' `fit_scaling(x, y, seed)`), or
`medians` (analysis.fitting.sample_complexity.fit_gamma, the n* figures' estimator: a power law
by weighted least squares through the per-x medians, seeds resampled within each x; an
exponent goal and the power form only). Both resample seeds, and a percentile bootstrap over
two seeds is no CI (a synthetic power law, 3 x with 2 seeds each, read 2.5x narrower than
8 x with 4 seeds each), so they count only what the figures' grids have, `MIN_SEEDS` (3):
`seeds` is inf with fewer seed labels, `medians` leaves out each x with fewer seeds (else one
seed at a new x would narrow the CI for free). The look-ahead below minimises the same
estimator's variance (for `medians`, the square of its CI width over 3.92).

The criterion (`choose`): a greedy look-ahead over candidates, one trial at a time. A trial
is one new seed at a candidate x (the smallest seed label not yet used at that x, as the
driver will run it; the same x may be chosen again: that is how many seeds it gets). For each
candidate, `fantasies` simulated outcomes are added: the current fit's prediction there times
exp(sigma z), sigma the fit's RMS log residual (its seed noise), z ~ N(0, 1); each fantasy
data set is refitted with analysis.fitting.fit.fit_scaling (the project's one fitter, `n_boot`
bootstrap refits) and the goal quantity's bootstrap variance (var of the exponent, or of
log10 y(at)) is measured. The candidate with the lowest mean variance after refit (or, with a
`cost` per x, the largest variance reduction per unit cost) is chosen; each fantasy world keeps
its own simulated value there, and the search repeats until the batch holds `n_trials`
trials. Common random numbers make it deterministic for a seed and keep candidates comparable:
every candidate of a step sees the same z and the same bootstrap resamples.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analysis.fitting.fit import Fit, fit_scaling
from analysis.fitting.forms import FORMS
from analysis.forecasts.points import exact, member_values
from icl_core.spec.adaptive import (  # noqa: F401  (the declarations, re-exported)
    ESTIMATORS,
    EXPONENT_LEVEL,
    FORECAST_LEVEL,
    Goal,
    Measure,
    lattice,
)

MIN_SEEDS = 3  # seeds the `seeds` and `medians` estimators need (per study; per x)

__all__ = ["ESTIMATORS", "Choice", "Goal", "Status", "assess", "choose", "goal_variance",
           "goal_width", "lattice", "member_points", "member_seconds"]






def member_points(rows: pl.DataFrame, axis: str, measure: Measure | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, seed) of every measured member (analysis.forecasts.points: each member's final
    query metric; censored members left out)."""
    used = exact(member_values(rows, axis, measure or Measure("mse")))
    return used["x"].to_numpy(), used["lo"].to_numpy(), used["seed"].to_numpy()


def member_seconds(rows: pl.DataFrame, axis: str | None = None) -> pl.DataFrame:
    """One row per member (config_hash): its wall time in seconds (`wall_time_s`; 0 where the
    rows have none), its x on `axis` (null without one) and its seed: what device-hours are."""
    wall = pl.col("wall_time_s") if "wall_time_s" in rows.columns else pl.lit(0.0)
    at = pl.col(axis) if axis and axis in rows.columns else pl.lit(None)
    return rows.group_by("config_hash").agg(
        wall.first().cast(pl.Float64).fill_null(0.0).alias("seconds"),
        at.first().cast(pl.Float64).alias("x"), pl.col("seed").first().alias("seed"))


def _param(goal: Goal, form: str) -> str:
    return goal.param or FORMS[form].exponents[0]


def goal_samples(fit: Fit, goal: Goal) -> np.ndarray:
    """The goal quantity on every bootstrap refit: the exponent, or log10 y(at)."""
    if fit.boot_theta is None or len(fit.boot_theta) == 0:
        return np.empty(0)
    shape = FORMS[fit.form]
    if goal.kind == "exponent":
        return np.asarray(shape.to_params(fit.boot_theta)[_param(goal, fit.form)], dtype=float)
    log_y, _ = shape.log_model(fit.boot_theta, np.log(np.array([float(goal.at)])))
    return log_y[:, 0] / math.log(10.0)


def goal_variance(fit: Fit, goal: Goal) -> float:
    """Bootstrap variance of the goal quantity (inf without refits)."""
    samples = goal_samples(fit, goal)
    return float(np.var(samples)) if samples.size > 1 else math.inf


def goal_width(fit: Fit, goal: Goal) -> float:
    """The goal's width: the exponent's 95% CI width, or log10(hi/lo) of the 90% band at `at`."""
    samples = goal_samples(fit, goal)
    if samples.size < 2:
        return math.inf
    level = EXPONENT_LEVEL if goal.kind == "exponent" else FORECAST_LEVEL
    tail = 50.0 * (1.0 - level)
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return float(hi - lo)


def _fit(x, y, form: str, n_boot: int, seed: int, groups=None) -> Fit | None:
    """fit_scaling, every member its own bootstrap group (or `groups`), without the held-out
    check; None when the points cannot support the form. The points are put in (x, y) order
    first: a member's group is its rank there, so the draws do not follow the rows' order."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    order = np.lexsort((y, x))
    groups = np.arange(x.size) if groups is None else np.asarray(groups)[order]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fit_scaling(x[order], y[order], groups, form=form, n_boot=n_boot, seed=seed,
                               holdout=0)
        except (ValueError, RuntimeError):
            return None


def _medians_width(x, y, seeds, seed: int) -> float:
    """fit_gamma's 95% CI width of the exponent over the x with >= MIN_SEEDS seeds (inf when
    fewer than 2 such x), with fit_gamma's own resample count (cheap; the figure's width)."""
    from analysis.fitting.sample_complexity import DEFAULT_BOOT, fit_gamma

    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(y) & (y > 0)
    values, counts = np.unique(x[keep], return_counts=True)
    keep &= np.isin(x, values[counts >= MIN_SEEDS])
    if np.unique(x[keep]).size < 2:
        return math.inf
    table = pl.DataFrame({"x": x[keep], "n_star": y[keep], "censored": False,
                          "seed": np.asarray(seeds)[keep].astype(np.int64)})
    fit = fit_gamma(table, "x", n_boot=DEFAULT_BOOT, rng_seed=seed)
    return float(fit.ci[1] - fit.ci[0]) if all(map(math.isfinite, fit.ci)) else math.inf


def estimate(x, y, seeds, goal: Goal, form: str, n_boot: int, seed: int
             ) -> tuple[Fit | None, float, float]:
    """(fit, width, variance) of the goal by its estimator (module doc); the fit is None for
    `medians` and where the points cannot be fitted (width and variance inf)."""
    if goal.estimator == "medians":
        if form != "power":
            raise ValueError(f"goal estimator 'medians' (fit_gamma) fits a power law, not {form!r}")
        width = _medians_width(x, y, seeds, seed)
        return None, width, (width / 3.92) ** 2 if math.isfinite(width) else math.inf
    if goal.estimator == "seeds" and np.unique(np.asarray(seeds)).size < MIN_SEEDS:
        return None, math.inf, math.inf
    fit = _fit(x, y, form, n_boot, seed, None if goal.estimator == "members" else seeds)
    if fit is None:
        return None, math.inf, math.inf
    return fit, goal_width(fit, goal), goal_variance(fit, goal)


@dataclass
class Status:
    """Where a study stands: its fit (None if it cannot be fitted yet), the goal's width."""

    fit: Fit | None
    width: float
    target: float
    n_points: int

    @property
    def reached(self) -> bool:
        return self.width <= self.target


def assess(x, y, goal: Goal, form: str = "power", n_boot: int = 400, seed: int = 0,
           seeds=None) -> Status:
    """Fit the measured points and measure the goal's width by its estimator (inf when they
    cannot be fitted); `seeds` (each point's seed label) for the `seeds` and `medians`
    estimators."""
    if seeds is None and goal.estimator != "members":
        raise ValueError(f"assess: the {goal.estimator!r} estimator needs each point's seed")
    fit, width, _ = estimate(np.asarray(x, float), np.asarray(y, float), seeds, goal, form,
                             n_boot, seed)
    return Status(fit, width, goal.target, int(np.size(x)))


@dataclass
class Choice:
    """The next trials ((x, seed) each, in the order chosen) and what the look-ahead expects:
    the goal's bootstrap variance now and after each chosen trial (mean over fantasies)."""

    trials: list[tuple[float, int]]
    variance_now: float
    variance_after: list[float] = field(default_factory=list)


def next_seed(x: np.ndarray, seeds: np.ndarray, xv: float) -> int:
    """The smallest seed label not yet used at x = xv."""
    used = {int(g) for xi, g in zip(x, seeds, strict=True) if np.isclose(xi, xv)}
    return next(s for s in range(len(used) + 1) if s not in used)


@dataclass
class _Worlds:
    """The fantasy data sets of a look-ahead: the measured points plus each world's simulated
    values at the trials chosen so far (x and seed labels are shared; y differs by world)."""

    x: np.ndarray
    seeds: np.ndarray
    ys: list[np.ndarray]

    def add(self, xv: float, label: int, values: np.ndarray) -> None:
        self.x, self.seeds = np.append(self.x, xv), np.append(self.seeds, label)
        self.ys = [np.append(y, v) for y, v in zip(self.ys, values, strict=True)]


def _variance_after(worlds: _Worlds, xv: float, label: int, values: np.ndarray, goal: Goal,
                    form: str, n_boot: int, seed: int) -> float:
    """Mean over worlds of the goal's bootstrap variance after adding a point at xv."""
    x, seeds = np.append(worlds.x, xv), np.append(worlds.seeds, label)
    return float(np.mean([estimate(x, np.append(y, value), seeds, goal, form, n_boot, seed)[2]
                          for y, value in zip(worlds.ys, values, strict=True)]))


def _variance_now(worlds: _Worlds, goal: Goal, form: str, n_boot: int, seed: int) -> float:
    return float(np.mean([estimate(worlds.x, y, worlds.seeds, goal, form, n_boot, seed)[2]
                          for y in worlds.ys]))


def choose(x, y, seeds, candidates: Sequence[float], goal: Goal, n_trials: int,
           form: str = "power", fantasies: int = 4, n_boot: int = 100, seed: int = 0,
           cost: Callable[[float], float] | None = None,
           taken: Sequence[tuple[float, int]] = ()) -> Choice:
    """The next `n_trials` trials (x, seed) by the greedy look-ahead of the module doc.

    x, y, seeds: the measured points (one per member). `candidates`: the x values allowed (e.g.
    `lattice`). `cost`: a trial's relative cost at x (default 1): with it the variance
    reduction per unit cost is maximised. `taken`: (x, seed) of members that ran but are not
    among the points (censored, diverged, failed): their seeds are not chosen again. Raises ValueError when the points cannot be fitted
    with a bootstrap yet (too few distinct x or points for the form)."""
    x, y, seeds = (np.asarray(x, float), np.asarray(y, float),
                   np.asarray(seeds).astype(np.int64))
    cand = np.unique(np.asarray(candidates, dtype=float))
    if cand.size == 0 or n_trials < 1 or fantasies < 1:
        raise ValueError("choose: need candidates, n_trials >= 1 and fantasies >= 1")
    base = _fit(x, y, form, n_boot, seed)
    if base is None or base.n_boot < 2:
        raise ValueError(f"choose: the {len(x)} points cannot be fitted by {form} with a "
                         f"bootstrap yet (distinct x >= {FORMS[form].min_x})")
    sigma = max(base.rms_log_residual, 1e-6)
    mean = np.log(base.predict(cand))
    rng = np.random.default_rng(seed)
    worlds = _Worlds(x, seeds, [y] * fantasies)
    choice = Choice([], estimate(x, y, seeds, goal, form, n_boot, seed)[2])
    for step in range(n_trials):
        z = rng.standard_normal(fantasies)  # one draw per world, shared by every candidate
        boot_seed = seed + 1 + step
        now = _variance_now(worlds, goal, form, n_boot, boot_seed) if cost else 0.0
        scores = []
        taken_x = np.append(worlds.x, [t[0] for t in taken])
        taken_s = np.append(worlds.seeds, [t[1] for t in taken])
        for xv, mu in zip(cand, mean, strict=True):
            after = _variance_after(worlds, xv, next_seed(taken_x, taken_s, xv),
                                    np.exp(mu + sigma * z), goal, form, n_boot, boot_seed)
            gain = (now - after) / max(cost(xv), 1e-12) if cost else -after
            scores.append((after, gain if math.isfinite(gain) or gain > 0 else -math.inf))
        if cost and max(s[1] for s in scores) <= 0:  # no candidate helps: the least harm
            scores = [(after, -after) for after, _ in scores]
        best = int(np.argmax([s[1] for s in scores]))  # ties: the smaller x
        xv = float(cand[best])
        label = next_seed(taken_x, taken_s, xv)
        worlds.add(xv, label, np.exp(mean[best] + sigma * z))
        choice.trials.append((xv, label))
        choice.variance_after.append(scores[best][0])
    return choice


def measured_cost(x, seconds) -> Callable[[float], float] | None:
    """A trial's relative cost at x from the measured members' wall times: seconds = c x^k,
    fitted by least squares in log-log (k clipped to [0, 3]); None (every x costs the same)
    with fewer than 2 distinct x or no positive time."""
    x, seconds = np.asarray(x, float), np.asarray(seconds, float)
    keep = np.isfinite(x) & np.isfinite(seconds) & (x > 0) & (seconds > 0)
    x, seconds = x[keep], seconds[keep]
    if np.unique(x).size < 2:
        return None
    k, log_c = np.polyfit(np.log(x), np.log(seconds), 1)
    k = float(np.clip(k, 0.0, 3.0))
    log_c = float(np.mean(np.log(seconds) - k * np.log(x)))
    return lambda xv: math.exp(log_c + k * math.log(xv))


if __name__ == "__main__":  # the command moved to the face: `icl forecast design`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.forecasts.adaptive_design")
