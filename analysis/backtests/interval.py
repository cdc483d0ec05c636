"""Forecast intervals that are honest about extrapolation, two naive forecasters, and their
scores: what every back-test (analysis.backtests.backtest, analysis.backtests.synthetic) runs.

    grid = SeriesGrid(x, xi, y)                    # series on one grid of distinct x
    rows = backtest_grid(grid, level=0.8)          # one row per (series, held-out x, method)

Back-test protocol. A series with K >= 4 distinct x holds out its largest x: the forecast is
made from the prefix of the K-1 smaller ones. With K >= 6 it also holds out the two largest:
from the K-2 smaller ones, the two are forecast. The truth is what was measured there: the
median over that x's seeds; every forecast is of that median (n_new = its number of seeds).

Our interval ("ours"), in natural log y; every piece is computed from the held-in points only:
1. Law-form uncertainty: every form of analysis.fitting.forms the prefix supports is fitted by
   least squares in log space (analysis.backtests.fits) and weighted by its Akaike weight,
   w_f ~ exp(-AICc_f / 2). The forecast is the mixture of one normal per form.
2. Fit uncertainty: each form's delta-method variance of log y at the target, g' C g, with C
   = sigma^2 (J'J)^+ (sigma^2 the residual variance, J the Jacobian at the fitted points).
3. Seed variance: the median of n_new new seeds varies as (pi/2) s_w^2 / n_new, s_w^2 the
   pooled variance of log y across seeds within each held-in x.
4. Extrapolation error measured inside the held-in points (rolling origin): the same
   procedure (1-3) forecasts each held-in x_k (k >= 2) from x_0..x_{k-1}; the excess of its
   squared error over its own predicted variance, per unit of log x stepped, pooled with a
   prior (tau_0^2, `PRIOR_WEIGHT` pseudo-forecasts), gives tau^2; each form's variance is
   widened by tau^2 * (ln x_target - ln x_last)^2.
5. The prior tau_0^2 is learned from every series back-tested together (`backtest_grids`: a
   store's studies, or the synthetic set), again from held-in points only: the tau_0^2 at
   which the rolling-origin errors of all those series, each divided by its own predicted
   variance plus tau_0^2 * step^2, have the median of a chi-square with one degree of freedom
   (`CHI2_MEDIAN`; a median, so one series that is far off a law, e.g. an error falling to a
   float floor, does not set it for the rest). With fewer than `POOL_MIN` such errors it is
   `TAU0`. One pool per number held out, each from the prefixes that back-test uses, so no
   held-out value enters any forecast. Why: on 25 real back-tests the rolling errors were
   2.7 sigma at the median (synthetic laws: 0.7) and a fixed prior of 0.1 covered 52%.
The interval is the central `level` range of that mixture; the prediction its median.

Naive forecasters, each a normal in log y around its prediction, its variance only what seed
noise puts there (s_w^2 as above; the medians at the held-in x as measured):
* `last`: the median at the largest held-in x; variance (pi/2) s_w^2 (1/n_last + 1/n_new).
* `line`: the straight line in log-log through the medians at the two largest held-in x,
  extended to the target (t steps of their spacing in ln x); variance (pi/2) s_w^2
  ((1+t)^2/n_1 + t^2/n_2 + 1/n_new).

Scores, in log10 units of y: the error log10(measured / predicted), whether the interval holds
the measured value (hit), and the interval score (Winkler; Gneiting & Raftery 2007) at
alpha = 1 - level: (hi - lo) + (2/alpha) (lo - y)+ + (2/alpha) (y - hi)+, lower is better.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from analysis.backtests.fits import PrefixFit, prefix_fits
from analysis.fitting.fit import DEFAULT_FORMS

LEVEL = 0.8
RELIABILITY_LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # nominal levels of the reliability curve
TAU0 = 0.1  # prior extrapolation excess, in ln y per unit of ln x stepped, when none is pooled
PRIOR_WEIGHT = 1.0  # pseudo-forecasts the prior counts as
POOL_MIN = 5  # rolling-origin errors a pooled prior needs
CHI2_MEDIAN = 0.454936  # median of chi-square(1): scipy.stats.chi2.ppf(0.5, 1)
LOCAL_X = 3  # the local law: a power law through the last 3 held-in x
MEDIAN_VAR = math.pi / 2  # var(median of n) ~ (pi/2) var / n
METHODS = ("ours", "last", "line")
LN10 = math.log(10.0)

Array = np.ndarray

__all__ = ["LEVEL", "METHODS", "RELIABILITY_LEVELS", "reliability", "SeriesGrid", "backtest_grid",
           "backtest_grids", "interval_score", "mixture_quantiles", "pooled_tau2", "summarize"]


@dataclass
class SeriesGrid:
    """Series (S) of seed-level points on one grid of distinct x: x (K,) ascending, xi (N,)
    each point's index into x, y (S, N) with NaN (or <= 0) where a series has no point."""

    x: Array
    xi: Array
    y: Array

    def __post_init__(self):
        self.x = np.asarray(self.x, dtype=float)
        self.xi = np.asarray(self.xi, dtype=int)
        self.y = np.atleast_2d(np.asarray(self.y, dtype=float))
        self.present = np.isfinite(self.y) & (self.y > 0)
        self.ly = np.where(self.present, np.log(np.where(self.present, self.y, 1.0)), 0.0)
        self.lx = np.log(self.x)[self.xi]
        K, S = self.x.size, self.y.shape[0]
        self.count = np.zeros((S, K), dtype=int)
        self.median = np.full((S, K), np.nan)  # ln of the median over seeds
        self.mean = np.full((S, K), np.nan)  # mean ln y over seeds
        for j in range(K):
            at = self.xi == j
            for s in range(S):
                vals = self.y[s, at][self.present[s, at]]
                self.count[s, j] = vals.size
                if vals.size:
                    self.median[s, j] = math.log(float(np.median(vals)))
                    self.mean[s, j] = float(np.mean(np.log(vals)))

    @property
    def n_x(self) -> int:
        return self.x.size

    def within_var(self, s: int, m: int) -> float:
        """Pooled variance of ln y across seeds within each of the first m x values."""
        ss, dof = 0.0, 0
        for j in range(m):
            at = (self.xi == j) & self.present[s]
            if at.sum() > 1:
                r = self.ly[s, at] - self.mean[s, j]
                ss += float(np.sum(r * r))
                dof += int(at.sum()) - 1
        return ss / dof if dof else math.nan


def mixture_quantiles(mu: Array, sd: Array, w: Array, ps) -> Array:
    """Quantiles `ps` of the normal mixture sum_f w_f N(mu_f, sd_f^2)."""
    mu, sd, w = (np.asarray(a, dtype=float) for a in (mu, sd, w))
    w = w / w.sum()
    sd = np.maximum(sd, 1e-9)
    if mu.size == 1:
        return mu[0] + sd[0] * ndtri(np.asarray(ps, dtype=float))
    grid = np.linspace((mu - 8 * sd).min(), (mu + 8 * sd).max(), 4001)
    cdf = ndtr((grid[:, None] - mu[None, :]) / sd[None, :]) @ w
    return np.interp(ps, cdf, grid)


def interval_score(lo, hi, y, level: float):
    """Winkler interval score at alpha = 1 - level (any units; lower is better)."""
    alpha = 1.0 - level
    lo, hi, y = (np.asarray(a, dtype=float) for a in (lo, hi, y))
    return (hi - lo) + (2 / alpha) * np.maximum(lo - y, 0) + (2 / alpha) * np.maximum(y - hi, 0)


class _Ours:
    """The mixture forecast of one grid's series (see the module doc), cached per prefix."""

    def __init__(self, grid: SeriesGrid, forms):
        self.grid = grid
        self.prior: dict[int, float] = {}  # tau_0^2 per number held out (default TAU0^2)
        self.fits: dict[str, PrefixFit] = prefix_fits(grid.lx, grid.ly, grid.present, grid.xi,
                                                      grid.n_x, forms)
        lu = np.log(grid.x)
        with np.errstate(all="ignore"):  # unfitted (NaN) entries stay NaN, never used
            self.pred = {name: fit.predict(lu) for name, fit in self.fits.items()}  # (S,K+1,K)
        self.aicc = {name: fit.aicc() for name, fit in self.fits.items()}
        self._rolling: dict[tuple[int, int], list] = {}  # (series, prefix) -> rolling()

    def _global(self, s: int, m: int, j: int, n_new: int) -> tuple[Array, Array, Array]:
        """(mu, var, weight) per fitted form (AICc weights) for x_j from prefix m, with the
        seed variance of the median of n_new seeds, without the extrapolation widening."""
        names = [n for n in self.fits if self.fits[n].ok[s, m]]
        if not names:
            return np.empty(0), np.empty(0), np.empty(0)
        aicc = np.array([self.aicc[n][s, m] for n in names])
        w = np.exp(-0.5 * (aicc - aicc.min()))
        mu = np.array([self.pred[n][0][s, m, j] for n in names])
        var = np.array([self.pred[n][1][s, m, j] for n in names])
        return mu, var + self._seed_var(s, m, n_new), w / w.sum()

    def _seed_var(self, s: int, m: int, n_new: int) -> float:
        s_w2 = self.grid.within_var(s, m)
        return MEDIAN_VAR * (s_w2 if math.isfinite(s_w2) else 0.0) / max(n_new, 1)

    def _local(self, s: int, m: int, j: int, n_new: int) -> tuple[float, float]:
        """(mu, var): the power law fitted by least squares to the seeds at the last
        `LOCAL_X` held-in x only (the law's current slope), with its fit and seed variance."""
        g = self.grid
        at = (g.xi >= m - LOCAL_X) & (g.xi < m) & g.present[s]
        lx, ly = g.lx[at], g.ly[s, at]
        mean_x = lx.mean()
        sxx = float(np.sum((lx - mean_x) ** 2))
        slope = float(np.sum((lx - mean_x) * (ly - ly.mean()))) / sxx
        resid = ly - ly.mean() - slope * (lx - mean_x)
        s2 = float(np.sum(resid ** 2)) / max(lx.size - 2, 1)
        target = math.log(g.x[j])
        mu = ly.mean() + slope * (target - mean_x)
        return mu, s2 * (1 / lx.size + (target - mean_x) ** 2 / sxx) + \
            self._seed_var(s, m, n_new)

    def _local_share(self, s: int, m: int) -> float:
        """The local law's share of the forecast: its prequential weight against the global
        forms over the rolling-origin forecasts inside the first m x (prior 1/2 each)."""
        g = self.grid
        log_g = log_l = 0.0
        for k in range(LOCAL_X, m):
            if g.count[s, k] == 0:
                continue
            mu, var, w = self._global(s, k, k, g.count[s, k])
            if not mu.size:
                continue
            truth = g.median[s, k]
            dens = np.sum(w * np.exp(-0.5 * (truth - mu) ** 2 / var) / np.sqrt(var))
            log_g += math.log(max(float(dens), 1e-300))
            mu_l, var_l = self._local(s, k, k, g.count[s, k])
            log_l += -0.5 * (truth - mu_l) ** 2 / var_l - 0.5 * math.log(var_l)
        return 1.0 / (1.0 + math.exp(min(max(log_g - log_l, -700.0), 700.0)))

    def components(self, s: int, m: int, j: int, n_new: int) -> tuple[Array, Array, Array]:
        """(mu, var, weight): the global forms and the local law, mixed (see the module doc),
        without the extrapolation widening."""
        mu, var, w = self._global(s, m, j, n_new)
        if m < LOCAL_X:
            if not mu.size:
                raise ValueError(f"no form could be fitted to {m} x values")
            return mu, var, w
        share = self._local_share(s, m) if mu.size else 1.0
        mu_l, var_l = self._local(s, m, j, n_new)
        return (np.append(mu, mu_l), np.append(var, var_l),
                np.append(w * (1 - share), share))

    def rolling(self, s: int, m: int) -> list[tuple[float, float, float]]:
        """(squared error, predicted variance, step in ln x) of each rolling-origin forecast
        of x_k from x_0..x_{k-1} inside the first m x values (2 <= k < m); computed once per
        (series, prefix): the pooled prior and every forecast from that prefix read it."""
        if (s, m) in self._rolling:
            return self._rolling[s, m]
        g, lu = self.grid, np.log(self.grid.x)
        out = []
        for k in range(2, m):
            if g.count[s, k] == 0 or not any(f.ok[s, k] for f in self.fits.values()):
                continue
            mu, var, w = self.components(s, k, k, g.count[s, k])
            center = float(mixture_quantiles(mu, np.sqrt(var), w, 0.5))
            spread = float(np.sum(w * (var + mu ** 2)) - np.sum(w * mu) ** 2)
            out.append(((g.median[s, k] - center) ** 2, spread, lu[k] - lu[k - 1]))
        self._rolling[s, m] = out
        return out

    def tau2(self, s: int, m: int) -> tuple[float, int]:
        """Extrapolation excess per unit ln x squared from rolling-origin forecasts inside the
        first m x values, pooled with the prior; and how many forecasts it rests on."""
        errors = self.rolling(s, m)
        prior = self.prior.get(self.grid.n_x - m, TAU0 ** 2)
        total = PRIOR_WEIGHT * prior + sum(max(0.0, e2 - spread) / step ** 2
                                           for e2, spread, step in errors)
        return total / (PRIOR_WEIGHT + len(errors)), len(errors)

    def forecast(self, s: int, m: int, j: int, level: float) -> dict:
        g = self.grid
        n_new = int(g.count[s, j]) or int(np.median(g.count[s, :m]))
        mu, var, w = self.components(s, m, j, n_new)
        tau2, n_roll = self.tau2(s, m)
        reach = math.log(g.x[j] / g.x[m - 1])
        var = var + tau2 * reach ** 2
        tail = (1 - level) / 2
        lo, mid, hi = mixture_quantiles(mu, np.sqrt(var), w, [tail, 0.5, 1 - tail])
        ps = [p for lev in RELIABILITY_LEVELS for p in ((1 - lev) / 2, (1 + lev) / 2)]
        bands = mixture_quantiles(mu, np.sqrt(var), w, ps).reshape(-1, 2)
        names = [n for n in self.fits if self.fits[n].ok[s, m]]
        names += ["local"] if len(names) < len(w) else []
        return {"predicted": mid, "lo": lo, "hi": hi, "rolling": n_roll, "bands": bands,
                "tau": math.sqrt(tau2),
                "tau0": math.sqrt(self.prior.get(g.n_x - m, TAU0 ** 2)),
                "weights": dict(zip(names, w.round(3).tolist(), strict=True))}


def _naive(grid: SeriesGrid, s: int, m: int, j: int, level: float) -> dict[str, dict]:
    lu = np.log(grid.x)
    n_new = max(int(grid.count[s, j]), 1)
    s_w2 = grid.within_var(s, m)
    s_w2 = s_w2 if math.isfinite(s_w2) else 0.0
    z = float(ndtri(1 - (1 - level) / 2))
    n1, n2 = max(grid.count[s, m - 1], 1), max(grid.count[s, m - 2], 1)
    last = grid.median[s, m - 1]
    sd_last = math.sqrt(MEDIAN_VAR * s_w2 * (1 / n1 + 1 / n_new))
    t = (lu[j] - lu[m - 1]) / (lu[m - 1] - lu[m - 2])
    line = last + t * (last - grid.median[s, m - 2])
    sd_line = math.sqrt(MEDIAN_VAR * s_w2 * ((1 + t) ** 2 / n1 + t ** 2 / n2 + 1 / n_new))
    zs = ndtri(0.5 + np.array(RELIABILITY_LEVELS) / 2)[:, None] * np.array([-1.0, 1.0])
    return {"last": {"predicted": last, "lo": last - z * sd_last, "hi": last + z * sd_last,
                     "bands": last + zs * sd_last},
            "line": {"predicted": line, "lo": line - z * sd_line, "hi": line + z * sd_line,
                     "bands": line + zs * sd_line}}


def cases(n_x: int) -> list[tuple[int, int]]:
    """(prefix length m, target index j) of the back-tests of a series with n_x distinct x."""
    out = [(n_x - 1, n_x - 1)] if n_x >= 4 else []
    if n_x >= 6:
        out += [(n_x - 2, n_x - 2), (n_x - 2, n_x - 1)]
    return out


def pooled_tau2(errors) -> float:
    """tau_0^2 from rolling-origin errors (squared error, predicted variance, step): the value
    at which the median of e^2 / (variance + tau_0^2 step^2) is CHI2_MEDIAN (0 where the
    errors are already that small); TAU0^2 with fewer than POOL_MIN errors."""
    if len(errors) < POOL_MIN:
        return TAU0 ** 2
    e2, spread, step = (np.asarray(a, dtype=float) for a in zip(*errors, strict=True))
    spread = np.maximum(spread, 1e-12)

    def excess(t2):
        return float(np.median(e2 / (spread + t2 * step ** 2))) - CHI2_MEDIAN

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 10.0
    return brentq(excess, 0.0, hi)


def backtest_grids(grids, level: float = LEVEL, forms=DEFAULT_FORMS) -> list[list[dict]]:
    """backtest_grid of each grid, their extrapolation prior pooled over all of them (item 5
    of the module doc); one list of rows per grid."""
    ours = [_Ours(g, forms) for g in grids]
    for held_out in (1, 2):
        errors = [e for o in ours if o.grid.n_x >= 4 + 2 * (held_out - 1)
                  for s in range(o.grid.y.shape[0])
                  for e in o.rolling(s, o.grid.n_x - held_out)]
        tau0_2 = pooled_tau2(errors)
        for o in ours:
            o.prior[held_out] = tau0_2
    return [_backtest(o, level) for o in ours]


def backtest_grid(grid: SeriesGrid, level: float = LEVEL, forms=DEFAULT_FORMS) -> list[dict]:
    """One row per (series, back-test, method): series, held_out, x, n_seeds, method,
    predicted, lo, hi, measured (all in y units), log10_error, hit, interval_score (log10),
    hits (whether the interval at each level of RELIABILITY_LEVELS holds the truth);
    ours adds its form weights and extrapolation widening (tau, rolling, tau0). The prior is
    pooled over this grid's series only (backtest_grids pools over many)."""
    return backtest_grids([grid], level, forms)[0]


def _backtest(ours: _Ours, level: float) -> list[dict]:
    grid = ours.grid
    if grid.n_x < 4:
        return []
    rows = []
    for s in range(grid.y.shape[0]):
        for m, j in cases(grid.n_x):
            if grid.count[s, j] == 0 or grid.count[s, m - 2] == 0 or grid.count[s, m - 1] == 0:
                continue
            truth = grid.median[s, j]
            methods = {"ours": ours.forecast(s, m, j, level), **_naive(grid, s, m, j, level)}
            for name, f in methods.items():
                lo, hi, pred = f["lo"] / LN10, f["hi"] / LN10, f["predicted"] / LN10
                y = truth / LN10
                rows.append({
                    "series": s, "held_out": grid.n_x - m, "x": float(grid.x[j]),
                    "x_last": float(grid.x[m - 1]), "n_seeds": int(grid.count[s, j]),
                    "method": name, "predicted": 10 ** pred, "lo": 10 ** lo, "hi": 10 ** hi,
                    "measured": 10 ** y, "log10_error": y - pred, "hit": bool(lo <= y <= hi),
                    "interval_score": float(interval_score(lo, hi, y, level)),
                    "hits": {lev: bool(b[0] <= truth <= b[1])
                             for lev, b in zip(RELIABILITY_LEVELS, f["bands"], strict=True)},
                    "tau": f.get("tau"), "rolling": f.get("rolling"), "tau0": f.get("tau0"),
                    "weights": ", ".join(f"{k} {v:.2f}" for k, v in f["weights"].items())
                    if "weights" in f else None})
    return rows


def reliability(rows) -> dict[str, dict[float, float]]:
    """Per method: the empirical coverage at each nominal level of RELIABILITY_LEVELS."""
    return {name: {lev: float(np.mean([r["hits"][lev] for r in rows if r["method"] == name]))
                   for lev in RELIABILITY_LEVELS}
            for name in METHODS if any(r["method"] == name for r in rows)}


def summarize(rows, level: float = LEVEL) -> dict[str, dict]:
    """Per method: n, coverage (share of hits), median |log10 error|, mean interval score,
    median interval width (log10)."""
    out = {}
    for name in METHODS:
        mine = [r for r in rows if r["method"] == name]
        if not mine:
            continue
        err = np.abs([r["log10_error"] for r in mine])
        out[name] = {"n": len(mine), "coverage": float(np.mean([r["hit"] for r in mine])),
                     "median_abs_log10_error": float(np.median(err)),
                     "interval_score": float(np.mean([r["interval_score"] for r in mine])),
                     "median_width": float(np.median([math.log10(r["hi"] / r["lo"])
                                                      for r in mine]))}
    return out
