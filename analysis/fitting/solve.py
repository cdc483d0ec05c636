"""The optimiser behind analysis.fitting.fit: Huber fits of a form in log space, batched over starts
and bootstrap resamples.

Objective. Fits minimise the summed Huber loss (delta = 1e-3) of log residuals
r = log y_model(x) - log y (natural log), exactly scipy's `least_squares(loss="huber",
f_scale=1e-3)` cost. With delta this small most residuals fall in the linear branch: the fit
is close to median regression.

Starts and optimiser. All of a form's starts (analysis.fitting.forms) are polished together by a
batched damped Gauss-Newton (Levenberg-Marquardt, `batch_solve`), first with a plain
least-squares loss, then with the Huber loss; the best one is polished by scipy's
`least_squares` and the lowest Huber cost wins (`point_fit`).

Bootstrap (`bootstrap`). B refits on groups (seeds) resampled with replacement, seeded,
warm-started at the point estimate and solved all at once (a resample is a vector of
per-point multiplicities, so its Huber cost is exactly the cost of the concatenated resample);
the few refits that do not converge in the batch are redone by scipy.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from analysis.fitting.forms import Form

HUBER_DELTA = 1e-3  # in natural-log units of y: residuals beyond 0.1% count linearly

Array = np.ndarray


def _elementwise_huber(r: Array, delta: float) -> Array:
    """0.5 r^2 inside delta, delta |r| - 0.5 delta^2 outside (scipy's scaled Huber)."""
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * a - 0.5 * delta * delta)


def huber_cost(r: Array, delta: float = HUBER_DELTA) -> float:
    """Summed Huber cost as scipy's least_squares reports it: 0.5 d^2 sum rho((r/d)^2)."""
    return float(np.sum(_elementwise_huber(np.asarray(r, dtype=float), delta)))


def _batch_cost(form: Form, th: Array, lx: Array, ly: Array, ww: Array,
                delta: float | None) -> Array:
    """sum_i w_i huber(r_i) per problem (delta None: 0.5 sum w r^2); inf where not finite."""
    with np.errstate(all="ignore"):
        r = form.log_model(th, lx)[0] - ly
        per = 0.5 * r * r if delta is None else _elementwise_huber(r, delta)
        c = np.sum(ww * per, axis=-1)
    return np.where(np.isfinite(c), c, np.inf)


def _lm_step(form: Form, th: Array, ww: Array, lx: Array, ly: Array, lam: Array,
             delta: float | None, curvature: str) -> tuple[Array, Array]:
    """One damped Gauss-Newton step per problem (see `batch_solve`) and whether its system
    was finite (a zero step where not)."""
    eye = np.eye(th.shape[1])
    with np.errstate(all="ignore"):
        log_y, jac = form.log_model(th, lx)
        r = log_y - ly
        if delta is None:
            psi = curve = np.ones_like(r)
        else:
            psi = np.minimum(1.0, delta / np.maximum(np.abs(r), 1e-300))
            curve = (np.abs(r) <= delta).astype(float) if curvature == "newton" else psi
        jt = np.swapaxes(jac, 1, 2)  # (b, P, N)
        grad = np.einsum("bpn,bn->bp", jt, ww * psi * r)
        scale = np.maximum(np.einsum("bpn,bpn,bn->bp", jt, jt, ww * psi), 1e-12)
        system = (jt * (ww * curve)[:, None, :]) @ jac
        system = system + lam[:, None, None] * (scale[:, :, None] * eye)
        ok = np.all(np.isfinite(system), axis=(1, 2)) & np.all(np.isfinite(grad), axis=1)
        step = np.zeros_like(th)
        if ok.any():
            try:
                step[ok] = -np.linalg.solve(system[ok], grad[ok][..., None])[..., 0]
            except np.linalg.LinAlgError:  # a singular system: the pseudo-inverse step
                step[ok] = -np.einsum("bpq,bq->bp", np.linalg.pinv(system[ok]), grad[ok])
    return step, ok


def batch_solve(form: Form, theta0: Array, lx: Array, ly: Array, box,
                weights: Array | None = None, delta: float | None = HUBER_DELTA,
                max_iter: int = 300, ftol: float = 1e-9, curvature: str = "newton"
                ) -> tuple[Array, Array, Array]:
    """Minimise sum_i w_i huber(r_i) (delta None: 0.5 sum w r^2) for many problems at once.

    theta0 (B, P) starts, weights (B, N) per-point multiplicities (None: all ones), ly (N,)
    shared or (B, N) one row per problem (lx is always shared). Damped
    Gauss-Newton (Levenberg-Marquardt) steps, clipped to the box; a step is kept only if the
    cost falls. curvature "newton": the Huber cost's own Gauss-Newton curvature (only residuals
    inside delta curve; fast near the optimum); "irls": the IRLS majoriser's (outliers weighted
    delta/|r|; slower but steadier). Either way the damping is scaled by the IRLS diagonal.
    Returns (theta (B, P), cost (B,), converged (B,)).
    """
    theta = np.array(theta0, dtype=float, copy=True)
    n_prob = theta.shape[0]
    w = np.ones((n_prob, lx.size)) if weights is None else np.asarray(weights, dtype=float)
    lower, upper = box
    theta = np.clip(theta, lower, upper)
    cost = _batch_cost(form, theta, lx, ly, w, delta)
    lam = np.full(n_prob, 1.0 if curvature == "newton" and delta is not None else 1e-3)
    done = np.zeros(n_prob, dtype=bool)
    broken = np.zeros(n_prob, dtype=bool)
    for _ in range(max_iter):
        idx = np.flatnonzero(~done)
        if idx.size == 0:
            break
        th, ww = theta[idx], w[idx]
        ly_i = ly[idx] if ly.ndim == 2 else ly
        step, ok = _lm_step(form, th, ww, lx, ly_i, lam[idx], delta, curvature)
        new = np.clip(th + step, lower, upper)
        new_cost = _batch_cost(form, new, lx, ly_i, ww, delta)
        old = cost[idx]
        accept = ok & (new_cost <= old)
        gain = np.where(accept, old - new_cost, 0.0)
        moved = np.max(np.abs(new - th), axis=1)
        theta[idx[accept]] = new[accept]
        cost[idx[accept]] = new_cost[accept]
        lam[idx] = np.where(accept, np.maximum(lam[idx] * 0.2, 1e-9), lam[idx] * 10.0)
        small = (gain <= ftol * np.maximum(old, 1e-300)) | (moved <= 1e-9 * (1.0 + np.max(
            np.abs(th), axis=1)))
        broken[idx[~ok]] = True
        finished = (accept & small) | (lam[idx] > 1e12) | ~ok
        done[idx[finished]] = True
    converged = done & ~broken & np.isfinite(cost) & (lam <= 1e12)
    return theta, cost, converged


def robust_solve(form: Form, theta0: Array, lx: Array, ly: Array, box,
                 weights: Array | None = None) -> tuple[Array, Array, Array]:
    """Huber fits of many problems: damped Newton, then the IRLS variant for those that did
    not converge (see `batch_solve`)."""
    theta, cost, converged = batch_solve(form, theta0, lx, ly, box, weights)
    if not converged.all():
        rest = np.flatnonzero(~converged)
        sub_w = None if weights is None else np.asarray(weights)[rest]
        t2, c2, ok2 = batch_solve(form, theta[rest], lx, ly, box, sub_w, curvature="irls")
        better = c2 <= cost[rest]
        theta[rest[better]], cost[rest[better]] = t2[better], c2[better]
        converged[rest] = ok2
    return theta, cost, converged


def scipy_solve(form: Form, theta0: Array, lx: Array, ly: Array, box) -> tuple[Array, float,
                                                                                   bool]:
    """scipy's Huber least squares from theta0, clipped to the box: (theta, cost, success)."""
    def fun(theta):
        return form.log_model(theta, lx)[0] - ly

    def jac(theta):
        return form.log_model(theta, lx)[1]

    with np.errstate(all="ignore"):
        res = least_squares(fun, theta0, jac=jac, loss="huber", f_scale=HUBER_DELTA,
                            max_nfev=2000)
    theta = np.clip(res.x, *box)
    r = fun(theta)
    cost = huber_cost(r) if np.all(np.isfinite(r)) else math.inf
    return theta, cost, bool(res.success)


def point_fit(form: Form, lx: Array, ly: Array) -> tuple[Array, float, bool]:
    """Best of the form's grid of starts: batched L2 then Huber polish, then scipy polish."""
    box = form.box(lx, ly)
    starts = np.array(form.starts(lx, ly), dtype=float)
    theta, _, _ = batch_solve(form, starts, lx, ly, box, delta=None, max_iter=100)
    theta, cost, _ = robust_solve(form, theta, lx, ly, box)
    if not np.isfinite(cost).any():
        raise RuntimeError(f"{form.name} fit: no start converged")
    best = theta[int(np.argmin(cost))]
    best_cost = float(np.min(cost))
    polished, polished_cost, success = scipy_solve(form, best, lx, ly, box)
    if polished_cost <= best_cost:
        return polished, polished_cost, success
    return best, best_cost, success


def bootstrap(form: Form, theta: Array, lx: Array, ly: Array, groups: Array, n_boot: int,
               seed: int) -> Array:
    """(B', P) refits on groups resampled with replacement, warm-started at theta."""
    labels, index = np.unique(groups, return_inverse=True)
    rng = np.random.default_rng(seed)
    picks = rng.integers(labels.size, size=(n_boot, labels.size))
    counts = np.zeros((n_boot, labels.size))
    np.add.at(counts, (np.repeat(np.arange(n_boot), labels.size), picks.ravel()), 1.0)
    weights = counts[:, index]  # (B, N) multiplicity of each point in each resample
    box = form.box(lx, ly)
    thetas, costs, converged = robust_solve(form, np.tile(theta, (n_boot, 1)), lx, ly, box,
                                            weights=weights)
    keep = converged.copy()
    for i in np.flatnonzero(~converged):  # rare: scipy on the concatenated resample; the better
        pick = np.repeat(np.arange(lx.size), weights[i].astype(int))
        t, cost, _ = scipy_solve(form, thetas[i], lx[pick], ly[pick], box)
        if np.isfinite(cost) and cost <= costs[i]:
            thetas[i] = t
        keep[i] = bool(np.isfinite(min(cost, costs[i])))
    return thetas[keep]
