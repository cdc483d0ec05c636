"""The project's one scaling-law fitter: robust log-space fits with a bootstrap over seeds.

A *form* is a named model y(x; params) in `FORMS`:

    saturating   y = c + a * x**(-b)      a > 0, c >= 0
    power        y = a * x**(-b)          a > 0

Fits minimise a Huber loss (delta = 1e-3) of log residuals r = log y_model(x) - log y, with a
and c fitted as logs so they stay positive, from a grid of starting points (each first
polished by plain least squares, then by the Huber loss; the lowest Huber cost wins). The
point estimate uses every seed-level point; the 95% CI comes from refitting on seeds
resampled with replacement (warm-started at the point estimate), 2.5/97.5 percentiles.

A floor far below every y (c < 1% of the fit at all x) is not resolved by the data: the fit
clips it at ~2e-9 min(y), says so in `Fit.notes`, and its CI for c is then not meaningful.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

HUBER_DELTA = 1e-3  # in natural-log units of y: residuals beyond 0.1% count linearly
B_STARTS = (0.25, 0.5, 1.0, 2.0, 4.0)
C_DECADES = (-3.0, -2.0, -1.0, 0.0)  # starting floors c = min(y) * 10**k
B_MAX = 20.0  # |b| <= B_MAX
C_LOG_FLOOR = 20.0  # c >= min(y) * e**-20 (~2e-9 min y): "no floor" within the data
RESOLVED_SHARE = 0.01  # a floor is resolved if c is >= 1% of the fitted y at some data x

Array = np.ndarray


@dataclass(frozen=True)
class Form:
    """A model in log space over internal coordinates theta (logs of positive params).

    log_model(theta (P,), lx (N,)) -> (log y (N,), jacobian (N, P)); starts(lx, ly) gives
    starting thetas; box(lx, ly) -> (lower (P,), upper (P,)) is the range solutions are
    clipped to (solves are unbounded: 3x faster); notes(theta, lx) flags what the data do
    not resolve.
    """

    name: str
    params: tuple[str, ...]
    log_model: Callable[[Array, Array], tuple[Array, Array]]
    to_params: Callable[[Array], dict[str, float]]
    from_params: Callable[[dict[str, float]], Array]
    starts: Callable[[Array, Array], list[Array]]
    box: Callable[[Array, Array], tuple[Array, Array]]
    notes: Callable[[Array, Array], list[str]] = lambda theta, lx: []


FORMS: dict[str, Form] = {}


def register(form: Form) -> Form:
    FORMS[form.name] = form
    return form


def _start_log_a(lx: Array, ly: Array, b: float, c: float) -> float:
    """log a so that a x^-b roughly matches y - c (where y > c)."""
    excess = np.maximum(np.exp(ly) - c, 1e-3 * np.exp(ly))
    return float(np.median(np.log(excess) + b * lx))


# ------------------------------------------------------------------------------ saturating


def _saturating_log_model(theta: Array, lx: Array) -> tuple[Array, Array]:
    la, b, lc = theta
    power = la - b * lx  # log(a x^-b)
    log_y = np.logaddexp(lc, power)
    w_a, w_c = np.exp(power - log_y), np.exp(lc - log_y)  # shares of y; sum to 1
    return log_y, np.column_stack([w_a, -lx * w_a, w_c])


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
    to_params=lambda t: {"a": math.exp(t[0]), "b": float(t[1]), "c": math.exp(t[2])},
    from_params=lambda p: np.array([math.log(p["a"]), p["b"], math.log(max(p["c"], 1e-300))]),
    starts=_saturating_starts,
    box=lambda lx, ly: (np.array([-np.inf, -B_MAX, ly.min() - C_LOG_FLOOR]),
                        np.array([np.inf, B_MAX, ly.max() + 1.0])),
    notes=_saturating_notes,
))

# ----------------------------------------------------------------------------------- power


def _power_log_model(theta: Array, lx: Array) -> tuple[Array, Array]:
    la, b = theta
    return la - b * lx, np.column_stack([np.ones_like(lx), -lx])


POWER = register(Form(
    name="power",
    params=("a", "b"),
    log_model=_power_log_model,
    to_params=lambda t: {"a": math.exp(t[0]), "b": float(t[1])},
    from_params=lambda p: np.array([math.log(p["a"]), p["b"]]),
    starts=lambda lx, ly: [np.array([_start_log_a(lx, ly, b, 0.0), b]) for b in B_STARTS],
    box=lambda lx, ly: (np.array([-np.inf, -B_MAX]), np.array([np.inf, B_MAX])),
))

# ------------------------------------------------------------------------------ fitting


@dataclass
class Fit:
    """A fitted form: point estimate on all points, 95% bootstrap CI over groups (seeds)."""

    form: str
    params: dict[str, float]
    ci: dict[str, tuple[float, float]]  # name -> (2.5%, 97.5%) over bootstrap refits
    rms_log_residual: float  # sqrt(mean(r^2)), r = log y_model - log y, natural log
    n_points: int
    decades: float  # log10(max x / min x)
    n_groups: int = 0
    n_boot: int = 0  # bootstrap refits that succeeded
    cost: float = math.nan  # summed Huber cost of the point estimate
    notes: list[str] = field(default_factory=list)  # what the data do not resolve

    def predict(self, x) -> Array:
        """y_model at x (any shape)."""
        form = FORMS[self.form]
        lx = np.log(np.asarray(x, dtype=float))
        log_y, _ = form.log_model(form.from_params(self.params), lx.ravel())
        return np.exp(log_y).reshape(lx.shape)

    def to_row(self) -> dict:
        """One tidy row: form, each param with _lo/_hi, residual, points, decades, fit_notes."""
        row: dict = {"form": self.form}
        for name, value in self.params.items():
            lo, hi = self.ci.get(name, (math.nan, math.nan))
            row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})
        row.update({"rms_log_residual": self.rms_log_residual, "n_points": self.n_points,
                    "decades": self.decades, "n_groups": self.n_groups, "n_boot": self.n_boot,
                    "fit_notes": "; ".join(self.notes)})
        return row

    def label(self) -> str:
        """Legend text, e.g. 'b = 1.30 [1.21, 1.39], c = 1.0e-07'."""
        lo, hi = self.ci.get("b", (math.nan, math.nan))
        text = f"b = {self.params['b']:.2f} [{lo:.2f}, {hi:.2f}]"
        if "c" in self.params:
            text += f", c = {self.params['c']:.1e}"
            if any(note.startswith("floor unresolved") for note in self.notes):
                text += " (unresolved)"
        return text


def huber_cost(r: Array, delta: float = HUBER_DELTA) -> float:
    """Summed Huber cost as scipy's least_squares reports it: 0.5 d^2 sum rho((r/d)^2)."""
    z = (np.asarray(r) / delta) ** 2
    return float(0.5 * delta**2 * np.sum(np.where(z <= 1.0, z, 2.0 * np.sqrt(z) - 1.0)))


def _solve(form: Form, theta0: Array, lx: Array, ly: Array, box, prefit: bool) -> tuple[Array, float]:
    """Huber fit from theta0 (after a plain least-squares prefit if asked), clipped to box:
    (theta, Huber cost at theta)."""
    def fun(theta):
        return form.log_model(theta, lx)[0] - ly

    def jac(theta):
        return form.log_model(theta, lx)[1]

    if prefit:  # L2 first: cheap, and a Huber loss this sharp is slow from far away
        with np.errstate(all="ignore"):
            pre = least_squares(fun, theta0, jac=jac, method="lm").x
        theta0 = np.clip(pre, *box) if np.all(np.isfinite(pre)) else theta0
    with np.errstate(all="ignore"):
        res = least_squares(fun, theta0, jac=jac, loss="huber", f_scale=HUBER_DELTA,
                            max_nfev=2000)
    theta = np.clip(res.x, *box)
    return theta, huber_cost(fun(theta))


def _best(form: Form, lx: Array, ly: Array, box) -> tuple[Array, float]:
    """The lowest-cost solution over the form's grid of starting points."""
    best: tuple[Array, float] | None = None
    for theta0 in form.starts(lx, ly):
        try:
            theta, cost = _solve(form, theta0, lx, ly, box, prefit=True)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(cost) and (best is None or cost < best[1]):
            best = (theta, cost)
    if best is None:
        raise RuntimeError(f"{form.name} fit: no start converged")
    return best


def _check(x: Array, y: Array, groups: Array, form: Form) -> None:
    if not (x.shape == y.shape == groups.shape and x.ndim == 1):
        raise ValueError(f"x, y, groups must be 1-d of one length, got {x.shape}, {y.shape}, "
                         f"{groups.shape}")
    bad = ~(np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} points have non-positive or non-finite x or y")
    if x.size <= len(form.params):
        raise ValueError(f"{form.name} fit needs more than {len(form.params)} points, got {x.size}")


def fit_scaling(x, y, groups, form: str = "saturating", n_boot: int = 1000, seed: int = 0) -> Fit:
    """Fit `form` to points (x (N,), y (N,)) from groups (N,) (seeds); bootstrap over groups.

    x and y must be positive and finite. With fewer than two groups the CI is NaN.
    """
    if form not in FORMS:
        raise ValueError(f"form: unknown {form!r}; valid choices: {', '.join(FORMS)}")
    shape = FORMS[form]
    x, y, groups = np.asarray(x, dtype=float), np.asarray(y, dtype=float), np.asarray(groups)
    _check(x, y, groups, shape)
    lx, ly = np.log(x), np.log(y)
    box = shape.box(lx, ly)
    theta, cost = _best(shape, lx, ly, box)
    residual = shape.log_model(theta, lx)[0] - ly

    labels = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in labels]  # point indices per group
    ci = {name: (math.nan, math.nan) for name in shape.params}
    boots: list[dict[str, float]] = []
    if len(labels) < 2:
        warnings.warn(f"{form} fit: {len(labels)} group(s); no bootstrap CI", stacklevel=2)
        n_boot = 0
    rng = np.random.default_rng(seed)
    for _ in range(n_boot):
        pick = np.concatenate([members[i] for i in rng.integers(len(labels), size=len(labels))])
        try:
            t, _ = _solve(shape, theta, lx[pick], ly[pick], box, prefit=False)
        except (ValueError, np.linalg.LinAlgError):
            continue
        boots.append(shape.to_params(t))
    if boots:
        ci = {name: (float(np.percentile([b[name] for b in boots], 2.5)),
                     float(np.percentile([b[name] for b in boots], 97.5)))
              for name in shape.params}
    return Fit(
        form=form, params=shape.to_params(theta), ci=ci,
        rms_log_residual=float(np.sqrt(np.mean(residual**2))),
        n_points=int(x.size), decades=float(np.log10(x.max() / x.min())),
        n_groups=len(labels), n_boot=len(boots), cost=cost, notes=shape.notes(theta, lx),
    )
