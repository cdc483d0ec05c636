"""The forms a scaling law may take, in log space (`FORMS`; analysis.fitting.fit fits them):

    power         y = a * x**(-b)                                          a > 0
    saturating    y = c + a * x**(-b)                                      a > 0, c >= 0
    broken_power  y = a * x**(-b1) * (1 + (x/d)**(1/f))**(-(b2 - b1) * f)  a, d > 0, f = 0.1

`broken_power` is the smooth broken power law (BNSL, Caballero et al. 2022) with one break and
no floor: slope -b1 below the break x = d, slope -b2 above it. The sharpness f is fixed at
`BREAK_F` = 0.1 (the bend spans about +-0.13 decades around d): fitting f as well is badly
conditioned with a handful of x values, and a fixed f keeps the form at 4 parameters.

a, c and d are fitted as logs so they stay positive. Every form has a grid of starting points
(exponents x floors for `saturating`, exponents for `power`, break positions for
`broken_power` with the exponents solved linearly at each break) and a box its solutions are
clipped to (|b| <= `B_MAX`).

What the fitter's box and a break's position mean for a fit being resolved is held here once
(`at_bound`, `break_window`, `break_inside`, `BREAK_NOTE`): analysis.fitting.result.fit_status
applies them to one fit, analysis.backtests.fits to arrays of prefix fits.

A floor far below every y (c < 1% of the fit at all x) is not resolved by the data: the fit
clips it at ~2e-9 min(y) and says so in its notes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

B_STARTS = (0.25, 0.5, 1.0, 2.0, 4.0)
C_DECADES = (-3.0, -2.0, -1.0, 0.0)  # starting floors c = min(y) * 10**k
BREAK_STARTS = 9  # break positions tried (evenly in log x between the 2nd and 2nd-last x)
BREAK_F = 0.1  # fixed sharpness of the broken power law (in units of ln x)
B_MAX = 20.0  # |b| <= B_MAX
C_LOG_FLOOR = 20.0  # c >= min(y) * e**-20 (~2e-9 min y): "no floor" within the data
RESOLVED_SHARE = 0.01  # a floor is resolved if c is >= 1% of the fitted y at some data x
BOUND_RTOL = 1e-3  # an exponent within 0.1% of the box (|b| >= 0.999 B_MAX) sits at it
BREAK_MIN_X = 4  # distinct x a break needs: it must lie from the 2nd to the 2nd-last of them
BREAK_NOTE = "break at the edge of the data"  # the note of a break outside `break_window`

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


# ------------------------------------------------------------------- is it resolved? (rules)


def at_bound(value, bound: float = B_MAX):
    """Whether an exponent sits at the fitter's box: |value| >= bound * (1 - BOUND_RTOL).
    Elementwise on arrays, a bool on a float; NaN is never at the bound, +-inf always is."""
    return np.abs(value) >= bound * (1.0 - BOUND_RTOL)


def break_window(u: Array, m: int | None = None) -> tuple[float, float] | None:
    """(lo, hi): the log x a broken power law's break must lie in to be resolved, from the 2nd
    to the 2nd-last of the first m distinct log x u (ascending; m: all of u); None with fewer
    than BREAK_MIN_X of them (any break is then at the data edge)."""
    m = len(u) if m is None else m
    if m < BREAK_MIN_X:
        return None
    return u[1], u[m - 2]


def break_inside(log_d, window: tuple[float, float] | None):
    """Whether the break log d lies in `window` (ends included; see `break_window`).
    Elementwise on arrays, a bool on a float; a NaN break or a None window is never inside."""
    if window is None:
        return np.zeros(np.shape(log_d), dtype=bool)
    lo, hi = window
    return (log_d >= lo) & (log_d <= hi)


# ------------------------------------------------------------------------------- helpers


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


def distinct_x(lx: Array) -> Array:
    """The distinct log x values (rounded to 12 digits)."""
    return np.unique(np.round(lx, 12))


def _broken_starts(lx: Array, ly: Array) -> list[Array]:
    """At each trial break ld the model is linear in (log a, b1, b2): solve it by least
    squares and start from there."""
    u = distinct_x(lx)
    lo, hi = break_window(u) or (u[0], u[-1])
    out = []
    for ld in np.linspace(lo, hi, BREAK_STARTS):
        sp, _ = _broken_terms(lx, ld)
        design = np.column_stack([np.ones_like(lx), -(lx - BREAK_F * sp), -BREAK_F * sp])
        coef, *_ = np.linalg.lstsq(design, ly, rcond=None)
        out.append(np.array([coef[0], coef[1], coef[2], ld]))
    return out


def _broken_notes(theta: Array, lx: Array) -> list[str]:
    """The `BREAK_NOTE` when the break is outside `break_window` of the fitted x."""
    if not break_inside(theta[3], break_window(distinct_x(lx))):
        return [f"{BREAK_NOTE}: fewer than 2 distinct x on one side"]
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
