"""Batched least-squares fits of every law form on every prefix of many series: what the
back-test forecasts (analysis.backtests.interval) are built from.

    fits = prefix_fits(lx, ly, present, xi, n_x, forms)   # fits[form]: PrefixFit arrays

A series is a set of seed-level points on one grid of distinct x values u_0 < ... < u_{K-1}
(lx (N,) their logs, xi (N,) the index of each point's x); many series on the same grid are
stacked (ly (S, N), present (S, N) False where a series has no point). The prefix of length m
holds the points at u_0..u_{m-1}. For each form, series and prefix with enough distinct x
(the form's `min_x`) and points (more than its parameters + 1), the fit is the least-squares
fit of log y in log x (the forms of analysis.fitting.forms, solved by analysis.fitting.solve's batched
damped Gauss-Newton from the form's own starting grid; the best `KEEP_STARTS` starts by their
initial cost are polished). Least squares, not analysis.fitting.fit's Huber loss: the forecast's AICc
weights and its delta-method covariance are both Gaussian-likelihood quantities, and must be
of the same fit. A fit is kept only when resolved (`_resolved`: the rules of
analysis.fitting.result.fit_status, which the sealed forecasts and the figures use, from their
one source in analysis.fitting.forms). All fits of a form are solved in one batch: seconds for
hundreds of series.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fitting.forms import FORMS, at_bound, break_inside, break_window
from analysis.fitting.solve import batch_solve

KEEP_STARTS = 4  # starts per problem polished (the best by initial cost)
MAX_ITER = 150

Array = np.ndarray


@dataclass
class PrefixFit:
    """One form fitted to every (series, prefix): arrays indexed [s, m] (m = prefix length;
    entries with m < the form's min_x, or too few points, have ok False)."""

    form: str
    theta: Array  # (S, K, P)
    cov: Array  # (S, K, P, P) delta-method covariance sigma^2 (J'J)^+
    rss: Array  # (S, K)
    n: Array  # (S, K) points fitted
    ok: Array  # (S, K) bool: fitted and resolved (see `_resolved`)

    @property
    def k(self) -> int:
        return self.theta.shape[-1]

    def aicc(self) -> Array:
        """Gaussian AICc of the log residuals, inf where not fitted."""
        n, k = self.n.astype(float), float(self.k)
        with np.errstate(all="ignore"):
            value = n * np.log(np.maximum(self.rss, 1e-300) / n) + 2 * k \
                + 2 * k * (k + 1) / (n - k - 1)
        return np.where(self.ok, value, np.inf)

    def predict(self, lx_target: Array) -> tuple[Array, Array]:
        """(mean log y (S, K, T), delta-method variance (S, K, T)) at log x targets (T,)."""
        shape = FORMS[self.form]
        S, K, P = self.theta.shape
        log_y, jac = shape.log_model(self.theta.reshape(S * K, P), np.asarray(lx_target))
        log_y = log_y.reshape(S, K, -1)
        jac = jac.reshape(S, K, -1, P)
        var = np.einsum("sktp,skpq,sktq->skt", jac, self.cov, jac)
        return log_y, np.maximum(var, 0.0)


def _solve_group(shape, lx: Array, ly: Array, present: Array, xi: Array, m: int, series: Array
                 ) -> tuple[Array, Array, Array]:
    """Fit prefix m of the given series in one batch; (theta (G, P), rss (G,), n (G,)), NaN
    theta and inf rss where no start converged. The box is the form's box over the union of
    the group's points (the same x; y bounds at the widest)."""
    P = len(shape.params)
    masks = present[series] & (xi < m)[None, :]
    union = masks.any(axis=0)
    lo, hi = shape.box(lx[union], ly[series][masks])
    starts, owner = [], []
    for g, s in enumerate(series):
        sx, sy = lx[masks[g]], ly[s, masks[g]]
        cand = np.clip(np.array(shape.starts(sx, sy), dtype=float), lo, hi)
        with np.errstate(all="ignore"):
            r = shape.log_model(cand, sx)[0] - sy
            cost = np.where(np.all(np.isfinite(r), axis=1), np.sum(r * r, axis=1), np.inf)
        starts.extend(cand[np.argsort(cost)[:KEEP_STARTS]])
        owner.extend([g] * min(KEEP_STARTS, len(cand)))
    owner = np.array(owner)
    w = masks[owner].astype(float)
    ly_b = np.where(w > 0, ly[series][owner], 0.0)
    th, cost, _ = batch_solve(shape, np.array(starts), lx, ly_b, (lo, hi), weights=w,
                              delta=None, max_iter=MAX_ITER)
    theta = np.full((series.size, P), np.nan)
    best = np.full(series.size, np.inf)
    for i in range(owner.size):
        if np.isfinite(cost[i]) and cost[i] < best[owner[i]]:
            best[owner[i]], theta[owner[i]] = cost[i], th[i]
    return theta, 2.0 * best, masks.sum(axis=1)


def _resolved(shape, theta: Array, u: Array) -> Array:
    """(S, K) whether each fit is resolved, by analysis.fitting.result.fit_status's rules on
    the point estimate (analysis.fitting.forms): no exponent at the fitter's box (`at_bound`),
    and a broken power law's break inside its prefix's `break_window` of the distinct log x u
    (not at the data edge). fit_status's other rules need bootstrap CIs or a claim's sign,
    which prefix fits do not have; their non-finite theta is ruled out by `_fit_form`."""
    S, K, _ = theta.shape
    out = np.ones((S, K), dtype=bool)
    for i, name in enumerate(shape.params):
        if name in shape.exponents:
            out &= ~at_bound(theta[..., i])
    if "d" in shape.params:
        ld = theta[..., shape.params.index("d")]
        for m in range(K):
            out[:, m] &= break_inside(ld[:, m], break_window(u, m))
    return out


def _fit_form(name: str, lx: Array, ly: Array, present: Array, xi: Array, n_x: int) -> PrefixFit:
    shape = FORMS[name]
    S = ly.shape[0]
    P = len(shape.params)
    theta = np.full((S, n_x + 1, P), np.nan)
    cov = np.full((S, n_x + 1, P, P), np.nan)
    rss = np.full((S, n_x + 1), np.inf)
    n = np.zeros((S, n_x + 1), dtype=int)
    for m in range(shape.min_x, n_x + 1):
        masks = present & (xi < m)[None, :]
        n_pts = masks.sum(axis=1)
        n_dx = np.array([np.unique(xi[row]).size for row in masks])
        series = np.flatnonzero((n_pts > P + 1) & (n_dx >= shape.min_x))
        if series.size:
            t, r, k = _solve_group(shape, lx, ly, present, xi, m, series)
            theta[series, m], rss[series, m], n[series, m] = t, r, k
    ok = np.isfinite(rss) & np.all(np.isfinite(theta), axis=-1)
    ok &= _resolved(shape, theta, np.log(np.unique(np.exp(lx))))
    sel = np.argwhere(ok)
    if sel.size:
        _, jac = shape.log_model(theta[sel[:, 0], sel[:, 1]], lx)
        mask = present[sel[:, 0]] & (xi[None, :] < sel[:, 1][:, None])
        jw = jac * mask[..., None]
        dof = np.maximum(n[sel[:, 0], sel[:, 1]] - P, 1)
        sigma2 = rss[sel[:, 0], sel[:, 1]] / dof
        gram = np.einsum("bnp,bnq->bpq", jw, jw)
        cov[sel[:, 0], sel[:, 1]] = np.linalg.pinv(gram, rcond=1e-10) * sigma2[:, None, None]
    return PrefixFit(name, theta, cov, rss, n, ok)


def prefix_fits(lx: Array, ly: Array, present: Array, xi: Array, n_x: int,
                forms) -> dict[str, PrefixFit]:
    """Every form fitted to every prefix (m = 2..n_x distinct x) of every series (see the
    module doc); indexed [s, m]."""
    ly = np.where(present, ly, 0.0)
    with np.errstate(all="ignore"):  # far starts overflow; their cost is inf and they lose
        return {name: _fit_form(name, lx, ly, present, xi, n_x) for name in forms}
