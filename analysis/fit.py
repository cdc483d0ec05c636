"""The project's one scaling-law fitter: robust log-space fits with a bootstrap over seeds.

A *form* is a named model y(x; params) in `FORMS`:

    power         y = a * x**(-b)                                          a > 0
    saturating    y = c + a * x**(-b)                                      a > 0, c >= 0
    broken_power  y = a * x**(-b1) * (1 + (x/d)**(1/f))**(-(b2 - b1) * f)  a, d > 0, f = 0.1

`broken_power` is the smooth broken power law (BNSL, Caballero et al. 2022) with one break and
no floor: slope -b1 below the break x = d, slope -b2 above it. The sharpness f is fixed at
`BREAK_F` = 0.1 (the bend spans about +-0.13 decades around d): fitting f as well is badly
conditioned with a handful of x values, and a fixed f keeps the form at 4 parameters.

Objective. Fits minimise the summed Huber loss (delta = 1e-3) of log residuals
r = log y_model(x) - log y (natural log), exactly scipy's `least_squares(loss="huber",
f_scale=1e-3)` cost; a, c and d are fitted as logs so they stay positive. With delta this
small most residuals fall in the linear branch: the fit is close to median regression.

Starts and optimiser. Every form has a grid of starting points (exponents x floors for
`saturating`, exponents for `power`, break positions for `broken_power` with the exponents
solved linearly at each break). All starts are polished together by a batched damped
Gauss-Newton (Levenberg-Marquardt, `batch_solve`), first with a plain least-squares loss, then
with the Huber loss; the best one is polished by scipy's `least_squares` and the lowest Huber
cost wins. `Fit.converged` reports scipy's flag.

Uncertainty. The point estimate uses every seed-level point. The 95% CI comes from B (default
1000) bootstrap refits on groups (seeds) resampled with replacement, seeded, warm-started at the
point estimate and solved all at once (a resample is a vector of per-point multiplicities, so
its Huber cost is exactly the cost of the concatenated resample); the few refits that do not
converge in the batch are redone by scipy. CIs are 2.5/97.5 percentiles.

Model choice. `compare_forms` fits several forms to the same points and ranks them by AIC. The
fit is a Huber fit, but the AIC uses a Gaussian likelihood of the log residuals:

    AIC = n * log(RSS / n) + 2k,   RSS = sum(r**2) over the n fitted points, k = #params.

Extrapolation. Each fit is also refitted without its largest x (or the `holdout` largest
distinct x values) and the log error of that fit at the held-out points is reported
(`holdout_log_error` = mean of log y_pred - log y there, `holdout_rmsle` its RMS).

Excluded points. Non-finite or non-positive x or y cannot enter a log-space fit; points with
y <= `floor` (when given) are kept out of the exponent fit. Each is listed in `Fit.excluded`
with its reason, and counted in the tidy row.

A floor far below every y (c < 1% of the fit at all x) is not resolved by the data: the fit
clips it at ~2e-9 min(y), says so in `Fit.notes`, and its CI for c is then not meaningful.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

HUBER_DELTA = 1e-3  # in natural-log units of y: residuals beyond 0.1% count linearly
B_STARTS = (0.25, 0.5, 1.0, 2.0, 4.0)
C_DECADES = (-3.0, -2.0, -1.0, 0.0)  # starting floors c = min(y) * 10**k
BREAK_STARTS = 9  # break positions tried (evenly in log x between the 2nd and 2nd-last x)
BREAK_F = 0.1  # fixed sharpness of the broken power law (in units of ln x)
B_MAX = 20.0  # |b| <= B_MAX
C_LOG_FLOOR = 20.0  # c >= min(y) * e**-20 (~2e-9 min y): "no floor" within the data
RESOLVED_SHARE = 0.01  # a floor is resolved if c is >= 1% of the fitted y at some data x
DEFAULT_FORMS = ("power", "saturating", "broken_power")

Array = np.ndarray


@dataclass(frozen=True)
class Form:
    """A model in log space over internal coordinates theta (logs of positive params).

    log_model(theta (..., P), lx (N,)) -> (log y (..., N), jacobian (..., N, P)), broadcasting
    over leading axes of theta; to_params maps theta (P,) or (B, P) to {name: value(s)};
    starts(lx, ly) gives starting thetas; box(lx, ly) -> (lower (P,), upper (P,)) is the range
    solutions are clipped to; notes(theta, lx) flags what the data do not resolve.
    `exponents` are the parameters legends show; a fit needs `min_x` distinct x values.
    """

    name: str
    params: tuple[str, ...]
    log_model: Callable[[Array, Array], tuple[Array, Array]]
    to_params: Callable[[Array], dict]
    from_params: Callable[[dict[str, float]], Array]
    starts: Callable[[Array, Array], list[Array]]
    box: Callable[[Array, Array], tuple[Array, Array]]
    notes: Callable[[Array, Array], list[str]] = lambda theta, lx: []
    exponents: tuple[str, ...] = ("b",)
    min_x: int = 2
    formula: str = ""


FORMS: dict[str, Form] = {}


def register(form: Form) -> Form:
    FORMS[form.name] = form
    return form


def _col(theta: Array, i: int) -> Array:
    """Parameter i of theta (..., P) as (..., 1), to broadcast against lx (N,)."""
    return np.asarray(theta)[..., i, None]


def _start_log_a(lx: Array, ly: Array, b: float, c: float) -> float:
    """log a so that a x^-b roughly matches y - c (where y > c)."""
    excess = np.maximum(np.exp(ly) - c, 1e-3 * np.exp(ly))
    return float(np.median(np.log(excess) + b * lx))


# ------------------------------------------------------------------------------ saturating


def _saturating_log_model(theta: Array, lx: Array) -> tuple[Array, Array]:
    la, b, lc = _col(theta, 0), _col(theta, 1), _col(theta, 2)
    power = la - b * lx  # log(a x^-b)
    log_y = np.logaddexp(lc, power)
    w_a, w_c = np.exp(power - log_y), np.exp(lc - log_y)  # shares of y; sum to 1
    return log_y, np.stack([w_a, -lx * w_a, w_c], axis=-1)


def _saturating_starts(lx: Array, ly: Array) -> list[Array]:
    out = []
    for b, k in itertools.product(B_STARTS, C_DECADES):
        lc = float(ly.min()) + k * math.log(10.0)
        c = math.exp(lc) if k < 0 else 0.5 * math.exp(lc)
        out.append(np.array([_start_log_a(lx, ly, b, c), b, math.log(c)]))
    return out


def _saturating_notes(theta: Array, lx: Array) -> list[str]:
    log_y, _ = _saturating_log_model(theta, lx)
    if np.exp(theta[2] - log_y).max() < RESOLVED_SHARE:
        return [f"floor unresolved: c < {RESOLVED_SHARE:.0%} of the fit at every x"]
    return []


SATURATING = register(Form(
    name="saturating",
    params=("a", "b", "c"),
    log_model=_saturating_log_model,
    to_params=lambda t: {"a": np.exp(t[..., 0]), "b": t[..., 1], "c": np.exp(t[..., 2])},
    from_params=lambda p: np.array([math.log(p["a"]), p["b"], math.log(max(p["c"], 1e-300))]),
    starts=_saturating_starts,
    box=lambda lx, ly: (np.array([-np.inf, -B_MAX, ly.min() - C_LOG_FLOOR]),
                        np.array([np.inf, B_MAX, ly.max() + 1.0])),
    notes=_saturating_notes,
    min_x=3,
    formula="c + a x^-b",
))

# ----------------------------------------------------------------------------------- power


def _power_log_model(theta: Array, lx: Array) -> tuple[Array, Array]:
    la, b = _col(theta, 0), _col(theta, 1)
    log_y = la - b * lx
    return log_y, np.stack([np.ones_like(log_y), np.broadcast_to(-lx, log_y.shape)], axis=-1)


POWER = register(Form(
    name="power",
    params=("a", "b"),
    log_model=_power_log_model,
    to_params=lambda t: {"a": np.exp(t[..., 0]), "b": t[..., 1]},
    from_params=lambda p: np.array([math.log(p["a"]), p["b"]]),
    starts=lambda lx, ly: [np.array([_start_log_a(lx, ly, b, 0.0), b]) for b in B_STARTS],
    box=lambda lx, ly: (np.array([-np.inf, -B_MAX]), np.array([np.inf, B_MAX])),
    min_x=2,
    formula="a x^-b",
))

# ---------------------------------------------------------------------------- broken power


def _broken_terms(lx: Array, ld) -> tuple[Array, Array]:
    """softplus((lx - ld)/f) and its sigmoid."""
    s = (lx - ld) / BREAK_F
    return np.logaddexp(0.0, s), expit(s)


def _broken_log_model(theta: Array, lx: Array) -> tuple[Array, Array]:
    la, b1, b2, ld = (_col(theta, i) for i in range(4))
    sp, sig = _broken_terms(lx, ld)
    log_y = la - b1 * lx - (b2 - b1) * BREAK_F * sp
    jac = np.stack([np.ones_like(log_y), -lx + BREAK_F * sp, np.broadcast_to(-BREAK_F * sp,
                   log_y.shape), (b2 - b1) * sig], axis=-1)
    return log_y, jac


def _distinct(lx: Array) -> Array:
    return np.unique(np.round(lx, 12))


def _broken_starts(lx: Array, ly: Array) -> list[Array]:
    """At each trial break ld the model is linear in (log a, b1, b2): solve it by least
    squares and start from there."""
    u = _distinct(lx)
    lo, hi = (u[1], u[-2]) if u.size >= 4 else (u[0], u[-1])
    out = []
    for ld in np.linspace(lo, hi, BREAK_STARTS):
        sp, _ = _broken_terms(lx, ld)
        design = np.column_stack([np.ones_like(lx), -(lx - BREAK_F * sp), -BREAK_F * sp])
        coef, *_ = np.linalg.lstsq(design, ly, rcond=None)
        out.append(np.array([coef[0], coef[1], coef[2], ld]))
    return out


def _broken_notes(theta: Array, lx: Array) -> list[str]:
    u = _distinct(lx)
    if u.size < 4 or not u[1] <= theta[3] <= u[-2]:
        return ["break at the edge of the data: fewer than 2 distinct x on one side"]
    return []


BROKEN_POWER = register(Form(
    name="broken_power",
    params=("a", "b1", "b2", "d"),
    log_model=_broken_log_model,
    to_params=lambda t: {"a": np.exp(t[..., 0]), "b1": t[..., 1], "b2": t[..., 2],
                         "d": np.exp(t[..., 3])},
    from_params=lambda p: np.array([math.log(p["a"]), p["b1"], p["b2"], math.log(p["d"])]),
    starts=_broken_starts,
    box=lambda lx, ly: (np.array([-np.inf, -B_MAX, -B_MAX, lx.min()]),
                        np.array([np.inf, B_MAX, B_MAX, lx.max()])),
    notes=_broken_notes,
    exponents=("b1", "b2"),
    min_x=5,
    formula=f"a x^-b1 (1 + (x/d)^(1/f))^(-(b2-b1) f), f={BREAK_F:g}",
))

# -------------------------------------------------------------------------------- the fit


@dataclass
class Fit:
    """A fitted form: point estimate on all points, 95% bootstrap CI over groups (seeds)."""

    form: str
    params: dict[str, float]
    ci: dict[str, tuple[float, float]]  # name -> (2.5%, 97.5%) over bootstrap refits
    rms_log_residual: float  # sqrt(mean(r^2)), r = log y_model - log y, natural log
    n_points: int  # points fitted (after exclusions)
    decades: float  # log10(max x / min x) of the fitted points
    n_groups: int = 0
    n_boot: int = 0  # bootstrap refits that succeeded
    cost: float = math.nan  # summed Huber cost of the point estimate
    notes: list[str] = field(default_factory=list)  # what the data do not resolve
    aic: float = math.nan  # n log(RSS/n) + 2k on log residuals (Gaussian likelihood)
    delta_aic: float = math.nan  # aic - the smallest aic among compared forms (compare_forms)
    converged: bool = True  # scipy's success flag for the polished point estimate
    excluded: list[tuple[float, float, str]] = field(default_factory=list)  # (x, y, reason)
    holdout: dict = field(default_factory=dict)  # x, n, log_error, rmsle (see module doc)
    corr: dict[str, float] = field(default_factory=dict)  # "p:q" -> bootstrap correlation
    boot_theta: Array | None = field(default=None, repr=False)  # (B, P) internal coordinates
    x_range: tuple[float, float] = (math.nan, math.nan)  # fitted x range
    # the sign the claim needs of the first exponent (+1: b > 0, y falls as x grows; None:
    # no claim); set by the figure that draws the fit, read by `fit_status`
    claim_sign: int | None = None

    @property
    def status(self) -> str:
        """'ok' or why the fit is unresolved (`fit_status` with the claim's sign)."""
        return fit_status(self)

    @property
    def n_params(self) -> int:
        return len(FORMS[self.form].params)

    def predict(self, x) -> Array:
        """y_model at x (any shape)."""
        form = FORMS[self.form]
        lx = np.log(np.asarray(x, dtype=float))
        log_y, _ = form.log_model(form.from_params(self.params), lx.ravel())
        return np.exp(log_y).reshape(lx.shape)

    def predict_band(self, x, level: float = 0.95) -> tuple[Array, Array]:
        """Pointwise (lo, hi) percentiles of the bootstrap curves at x (NaN without refits)."""
        x = np.asarray(x, dtype=float)
        if self.boot_theta is None or len(self.boot_theta) == 0:
            nan = np.full(x.shape, math.nan)
            return nan, nan
        form = FORMS[self.form]
        log_y, _ = form.log_model(self.boot_theta, np.log(x).ravel())
        tail = 50.0 * (1.0 - level)
        lo, hi = np.percentile(np.exp(log_y), [tail, 100.0 - tail], axis=0)
        return lo.reshape(x.shape), hi.reshape(x.shape)

    def excluded_summary(self) -> str:
        """'2 x non-positive y; 1 x y <= floor 1e-05' (empty when nothing was excluded)."""
        counts = Counter(reason for _, _, reason in self.excluded)
        return "; ".join(f"{n} x {reason}" for reason, n in counts.items())

    def to_row(self) -> dict:
        """One tidy row: form, each param with _lo/_hi, residual RMS, points, decades, AIC,
        held-out error, excluded points and why, notes."""
        row: dict = {"form": self.form, "formula": FORMS[self.form].formula}
        for name, value in self.params.items():
            lo, hi = self.ci.get(name, (math.nan, math.nan))
            row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
        row.update({
            "rms_log_residual": self.rms_log_residual, "n_points": self.n_points,
            "n_excluded": len(self.excluded), "excluded": self.excluded_summary(),
            "decades": self.decades, "x_min": self.x_range[0], "x_max": self.x_range[1],
            "n_groups": self.n_groups, "n_boot": self.n_boot, "aic": self.aic,
            "delta_aic": self.delta_aic, "converged": self.converged,
            "holdout_x": self.holdout.get("x", math.nan),
            "holdout_log_error": self.holdout.get("log_error", math.nan),
            "holdout_rmsle": self.holdout.get("rmsle", math.nan),
            "huber_delta": HUBER_DELTA,
            "claim_sign": self.claim_sign,
            "status": self.status,
            "fit_notes": "; ".join(self.notes),
        })
        row.update({f"corr({k})": v for k, v in self.corr.items()})
        return row

    def label(self) -> str:
        """Legend text, e.g. 'b = 1.30 [1.21, 1.39], c = 1.0e-07'."""
        parts = []
        for name in FORMS[self.form].exponents:
            lo, hi = self.ci.get(name, (math.nan, math.nan))
            parts.append(f"{name} = {self.params[name]:.2f} [{lo:.2f}, {hi:.2f}]")
        text = ", ".join(parts)
        if "c" in self.params:
            text += f", c = {self.params['c']:.1e}"
            if any(note.startswith("floor unresolved") for note in self.notes):
                text += " (unresolved)"
        if "d" in self.params:
            lo, hi = self.ci.get("d", (math.nan, math.nan))
            text += f", break d = {self.params['d']:.3g} [{lo:.3g}, {hi:.3g}]"
        return text


# ------------------------------------------------------------------------ is it resolved?

BOUND_NOTE = "reaches the parameter bounds"  # the bootstrap note of `fit_scaling`


def exponents(fit) -> list[tuple[str, float, float, float, float | None]]:
    """(name, value, lo, hi, bound) of the exponents a legend shows: a `Fit`'s form
    exponents (bound B_MAX), or a fit exposing `gamma` and `ci` (n* ∝ N^γ; no bound)."""
    if isinstance(fit, Fit):
        return [(name, fit.params[name], *fit.ci.get(name, (math.nan, math.nan)), B_MAX)
                for name in FORMS[fit.form].exponents]
    lo, hi = getattr(fit, "ci", (math.nan, math.nan))
    return [("γ", float(fit.gamma), float(lo), float(hi), None)]


def fit_status(fit, claim_sign: int | None = None) -> str:
    """'ok', or why a fit must be drawn and reported as unresolved, never as a law:

    * "at bound b=20": an exponent (point estimate or a CI end) sits at the fitter's box
      |b| = B_MAX, or over 2.5% of the bootstrap refits reach a bound ("CI at bound");
    * "wrong sign (b = -18.5; the claim needs b > 0)": the first exponent's sign is not the
      claim's (claim_sign +1: b > 0, y falls as x grows; -1: b < 0; None: no claim; default:
      `fit.claim_sign`);
    * "CI unresolved (nan)": no bootstrap CI (fewer than two seeds, or no refit);
    * "CI spans 0 [-0.2, 0.4]": the claim needs a sign and the first exponent's CI includes 0
      (no trend resolved; without a claim a flat law may be the finding);
    * "break at the data edge": a broken power law's break outside the inner x values.

    Works on a `Fit` and on `sample_complexity.GammaFit` (its γ)."""
    sign = claim_sign if claim_sign is not None else getattr(fit, "claim_sign", None)
    exps = exponents(fit)
    for name, value, lo, hi, bound in exps:
        if bound is not None:
            edge = bound * (1.0 - 1e-3)
            ends = [v for v in (value, lo, hi) if math.isfinite(v) and abs(v) >= edge]
            if ends:
                return f"at bound {name}={ends[0]:.3g}"
    notes = getattr(fit, "notes", [])
    for note in notes:  # "CI of b, c reaches the parameter bounds ...": exponents and breaks
        if BOUND_NOTE in note:
            names = note.removeprefix("CI of ").split(BOUND_NOTE)[0].strip().split(", ")
            hit = [n for n in names if n in {e[0] for e in exps} | {"d"}]
            if hit:
                return f"CI at bound ({', '.join(hit)}: > 2.5% of refits at the fitter's box)"
    name, value, lo, hi, _ = exps[0]
    if sign and math.isfinite(value) and value * sign <= 0:
        need = ">" if sign > 0 else "<"
        return f"wrong sign ({name} = {value:.3g}; the claim needs {name} {need} 0)"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "CI unresolved (nan)"
    if sign and lo <= 0.0 <= hi:
        return f"CI spans 0 [{lo:.2g}, {hi:.2g}]"
    if any(note.startswith("break at the edge") for note in notes):
        return "break at the data edge"
    return "ok"


# ------------------------------------------------------------------------------ optimiser


def _elementwise_huber(r: Array, delta: float) -> Array:
    """0.5 r^2 inside delta, delta |r| - 0.5 delta^2 outside (scipy's scaled Huber)."""
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * a - 0.5 * delta * delta)


def huber_cost(r: Array, delta: float = HUBER_DELTA) -> float:
    """Summed Huber cost as scipy's least_squares reports it: 0.5 d^2 sum rho((r/d)^2)."""
    return float(np.sum(_elementwise_huber(np.asarray(r, dtype=float), delta)))


def batch_solve(form: Form, theta0: Array, lx: Array, ly: Array, box,
                weights: Array | None = None, delta: float | None = HUBER_DELTA,
                max_iter: int = 300, ftol: float = 1e-9, curvature: str = "newton"
                ) -> tuple[Array, Array, Array]:
    """Minimise sum_i w_i huber(r_i) (delta None: 0.5 sum w r^2) for many problems at once.

    theta0 (B, P) starts, weights (B, N) per-point multiplicities (None: all ones). Damped
    Gauss-Newton (Levenberg-Marquardt) steps, clipped to the box; a step is kept only if the
    cost falls. curvature "newton": the Huber cost's own Gauss-Newton curvature (only residuals
    inside delta curve; fast near the optimum); "irls": the IRLS majoriser's (outliers weighted
    delta/|r|; slower but steadier). Either way the damping is scaled by the IRLS diagonal.
    Returns (theta (B, P), cost (B,), converged (B,)).
    """
    theta = np.array(theta0, dtype=float, copy=True)
    n_prob, n_par = theta.shape
    w = np.ones((n_prob, lx.size)) if weights is None else np.asarray(weights, dtype=float)
    lower, upper = box
    theta = np.clip(theta, lower, upper)

    def cost_of(th: Array, ww: Array) -> Array:
        with np.errstate(all="ignore"):
            r = form.log_model(th, lx)[0] - ly
            per = 0.5 * r * r if delta is None else _elementwise_huber(r, delta)
            c = np.sum(ww * per, axis=-1)
        return np.where(np.isfinite(c), c, np.inf)

    cost = cost_of(theta, w)
    lam = np.full(n_prob, 1.0 if curvature == "newton" and delta is not None else 1e-3)
    done = np.zeros(n_prob, dtype=bool)
    broken = np.zeros(n_prob, dtype=bool)
    eye = np.eye(n_par)
    for _ in range(max_iter):
        idx = np.flatnonzero(~done)
        if idx.size == 0:
            break
        th, ww = theta[idx], w[idx]
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
            system = system + lam[idx, None, None] * (scale[:, :, None] * eye)
            ok = np.all(np.isfinite(system), axis=(1, 2)) & np.all(np.isfinite(grad), axis=1)
            step = np.zeros_like(th)
            if ok.any():
                try:
                    step[ok] = -np.linalg.solve(system[ok], grad[ok][..., None])[..., 0]
                except np.linalg.LinAlgError:  # a singular system: the pseudo-inverse step
                    step[ok] = -np.einsum("bpq,bq->bp", np.linalg.pinv(system[ok]), grad[ok])
        new = np.clip(th + step, lower, upper)
        new_cost = cost_of(new, ww)
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


def _scipy_solve(form: Form, theta0: Array, lx: Array, ly: Array, box) -> tuple[Array, float,
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


def _point_fit(form: Form, lx: Array, ly: Array) -> tuple[Array, float, bool]:
    """Best of the form's grid of starts: batched L2 then Huber polish, then scipy polish."""
    box = form.box(lx, ly)
    starts = np.array(form.starts(lx, ly), dtype=float)
    theta, _, _ = batch_solve(form, starts, lx, ly, box, delta=None, max_iter=100)
    theta, cost, _ = robust_solve(form, theta, lx, ly, box)
    if not np.isfinite(cost).any():
        raise RuntimeError(f"{form.name} fit: no start converged")
    best = theta[int(np.argmin(cost))]
    best_cost = float(np.min(cost))
    polished, polished_cost, success = _scipy_solve(form, best, lx, ly, box)
    if polished_cost <= best_cost:
        return polished, polished_cost, success
    return best, best_cost, success


def _bootstrap(form: Form, theta: Array, lx: Array, ly: Array, groups: Array, n_boot: int,
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
        t, cost, _ = _scipy_solve(form, thetas[i], lx[pick], ly[pick], box)
        if np.isfinite(cost) and cost <= costs[i]:
            thetas[i] = t
        keep[i] = bool(np.isfinite(min(cost, costs[i])))
    return thetas[keep]


# ----------------------------------------------------------------------------- public API


def _exclusions(x: Array, y: Array, floor: float | None) -> tuple[Array, list[str | None]]:
    """(mask of points kept, reason per point or None)."""
    reasons: list[str | None] = []
    for xi, yi in zip(x, y, strict=True):
        if not np.isfinite(xi) or xi <= 0:
            reasons.append("non-positive or non-finite x")
        elif not np.isfinite(yi):
            reasons.append("non-finite y")
        elif yi <= 0:
            reasons.append("non-positive y")
        elif floor is not None and yi <= floor:
            reasons.append(f"y <= floor {floor:g}")
        else:
            reasons.append(None)
    return np.array([r is None for r in reasons], dtype=bool), reasons


def _validate(x, y, groups, form: str) -> tuple[Form, Array, Array, Array]:
    if form not in FORMS:
        raise ValueError(f"form: unknown {form!r}; valid choices: {', '.join(FORMS)}")
    x, y, groups = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(groups)
    if not (x.shape == y.shape == groups.shape and x.ndim == 1):
        raise ValueError(f"x, y, groups must be 1-d of one length, got {x.shape}, {y.shape}, "
                         f"{groups.shape}")
    return FORMS[form], x, y, groups


def _enough(shape: Form, lx: Array, what: str) -> str | None:
    """Why `shape` cannot be fitted to these points, or None."""
    n_x = _distinct(lx).size
    if n_x < shape.min_x:
        return f"{shape.name} fit{what} needs >= {shape.min_x} distinct x, got {n_x}"
    if lx.size <= len(shape.params):
        return f"{shape.name} fit{what} needs more than {len(shape.params)} points, got {lx.size}"
    return None


def aic(residuals: Array, k: int) -> float:
    """Gaussian-likelihood AIC of log residuals: n log(RSS/n) + 2k."""
    r = np.asarray(residuals, dtype=float)
    rss = max(float(np.sum(r * r)), 1e-300)
    return float(r.size * math.log(rss / r.size) + 2 * k)


def holdout_error(shape: Form, x: Array, y: Array, n_holdout: int = 1) -> dict:
    """Fit on all but the n_holdout largest distinct x, predict those: log-space error there
    ({x: smallest held-out x, n: held-out points, log_error: mean log(y_pred/y), rmsle})."""
    u = np.unique(x)
    if n_holdout < 1 or u.size <= n_holdout:
        return {}
    cut = float(u[-n_holdout])
    train = x < cut
    lx, ly = np.log(x), np.log(y)
    if _enough(shape, lx[train], "") is not None:
        return {"x": cut, "n": int((~train).sum()), "log_error": math.nan, "rmsle": math.nan,
                "note": f"held-out check: too few points below x = {cut:g} to fit"}
    theta, _, _ = _point_fit(shape, lx[train], ly[train])
    err = shape.log_model(theta, lx[~train])[0] - ly[~train]
    return {"x": cut, "n": int(err.size), "log_error": float(np.mean(err)),
            "rmsle": float(np.sqrt(np.mean(err * err)))}


def fit_scaling(x, y, groups, form: str = "saturating", n_boot: int = 1000, seed: int = 0,
                floor: float | None = None, holdout: int = 1) -> Fit:
    """Fit `form` to points (x (N,), y (N,)) from groups (N,) (seeds); bootstrap over groups.

    Points with non-finite or non-positive x or y, and with y <= floor when a floor is given,
    are excluded and listed with their reason in `Fit.excluded`. `holdout` largest distinct x
    values are held out for the extrapolation check (0: none). With fewer than two groups the
    CI is NaN. Raises ValueError when too few points remain for the form.
    """
    shape, x, y, groups = _validate(x, y, groups, form)
    keep, reasons = _exclusions(x, y, floor)
    excluded = [(float(xi), float(yi), r) for xi, yi, r in zip(x, y, reasons, strict=True)
                if r is not None]
    x, y, groups = x[keep], y[keep], groups[keep]
    lx, ly = np.log(x), np.log(y)
    why = _enough(shape, lx, f" ({len(excluded)} points excluded)" if excluded else "")
    if why:
        raise ValueError(why)
    theta, cost, converged = _point_fit(shape, lx, ly)
    residual = shape.log_model(theta, lx)[0] - ly

    labels = np.unique(groups)
    ci = {name: (math.nan, math.nan) for name in shape.params}
    corr: dict[str, float] = {}
    if labels.size < 2 and n_boot > 0:
        warnings.warn(f"{form} fit: {labels.size} group(s); no bootstrap CI", stacklevel=2)
        n_boot = 0
    boots = _bootstrap(shape, theta, lx, ly, groups, n_boot, seed) if n_boot > 0 else \
        np.empty((0, len(shape.params)))
    if len(boots):
        values = shape.to_params(boots)
        ci = {name: (float(np.percentile(values[name], 2.5)),
                     float(np.percentile(values[name], 97.5))) for name in shape.params}
        if len(boots) > 2:
            with np.errstate(all="ignore"):
                matrix = np.corrcoef(boots, rowvar=False)
            for i, j in itertools.combinations(range(len(shape.params)), 2):
                corr[f"{shape.params[i]}:{shape.params[j]}"] = float(matrix[i, j])
    notes = shape.notes(theta, lx)
    if len(boots):
        lower, upper = shape.box(lx, ly)
        at_bound = [name for i, name in enumerate(shape.params)
                    if np.mean(np.isclose(boots[:, i], lower[i]) | np.isclose(boots[:, i], upper[i]))
                    > 0.025]
        if at_bound:
            notes.append(f"CI of {', '.join(at_bound)} reaches the parameter bounds in > 2.5% "
                         f"of the refits: not resolved by the data")
    if not converged:
        notes.append("scipy did not report convergence for the point estimate")
    held = holdout_error(shape, x, y, holdout) if holdout else {}
    if held.get("note"):
        notes.append(held["note"])
    params = {k: float(v) for k, v in shape.to_params(theta).items()}
    return Fit(
        form=form, params=params, ci=ci,
        rms_log_residual=float(np.sqrt(np.mean(residual**2))),
        n_points=int(x.size), decades=float(np.log10(x.max() / x.min())),
        n_groups=int(labels.size), n_boot=len(boots), cost=cost, notes=notes,
        aic=aic(residual, len(shape.params)), converged=converged, excluded=excluded,
        holdout=held, corr=corr, boot_theta=boots, x_range=(float(x.min()), float(x.max())),
    )


def compare_forms(x, y, groups, forms: Sequence[str] = DEFAULT_FORMS, n_boot: int = 1000,
                  seed: int = 0, floor: float | None = None, holdout: int = 1) -> list[Fit]:
    """Fit each form to the same points; return the fits sorted by AIC (best first), each with
    `delta_aic` to the best. A form the points cannot support (too few distinct x) is left
    out with a warning; raises ValueError if no form can be fitted."""
    fits = []
    for name in forms:
        try:
            fits.append(fit_scaling(x, y, groups, form=name, n_boot=n_boot, seed=seed,
                                    floor=floor, holdout=holdout))
        except ValueError as exc:
            if str(exc).startswith("form:") or "1-d of one length" in str(exc):
                raise
            warnings.warn(f"compare_forms: {exc}", stacklevel=2)
    if not fits:
        raise ValueError(f"compare_forms: no form of {list(forms)} could be fitted")
    fits.sort(key=lambda f: f.aic)
    for fit in fits:
        fit.delta_aic = fit.aic - fits[0].aic
    return fits
