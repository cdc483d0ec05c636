"""A fitted scaling law (`Fit`: parameters, bootstrap CIs, AIC, held-out error, its tidy
report row and legend label) and whether it is resolved (`fit_status`), for analysis.fitting.fit's
fits and for sample_complexity's γ.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from analysis.fitting.forms import B_MAX, BREAK_NOTE, FORMS, at_bound
from analysis.fitting.solve import HUBER_DELTA

Array = np.ndarray


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
    holdout: dict = field(default_factory=dict)  # x, n, log_error, rmsle (see analysis.fitting.fit)
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

# The rules of `fit_status`. The ones on the point estimate that a batch of fits can apply as
# well (an exponent at the fitter's box, a break at the data edge) are analysis.fitting.forms'
# `at_bound`, `break_window` and `break_inside`, which analysis.backtests.fits applies to its
# prefix fits. The rest need what only a `Fit` or a `GammaFit` carries: bootstrap CI ends and
# refits (the CI and bootstrap rules below) and the claim's sign (the sign rules).
BOUND_NOTE = "reaches the parameter bounds"  # the bootstrap note of `fit_scaling`
BOOT_BOUND_SHARE = 0.025  # a CI is at the box when more of its refits are (`fit._bound_notes`)


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
        if bound is not None:  # finite ends only: the box-clipped fitter gives no infinite one
            ends = [v for v in (value, lo, hi) if math.isfinite(v) and at_bound(v, bound)]
            if ends:
                return f"at bound {name}={ends[0]:.3g}"
    notes = getattr(fit, "notes", [])
    for note in notes:  # "CI of b, c reaches the parameter bounds ...": exponents and breaks
        if BOUND_NOTE in note:
            names = note.removeprefix("CI of ").split(BOUND_NOTE)[0].strip().split(", ")
            hit = [n for n in names if n in {e[0] for e in exps} | {"d"}]
            if hit:
                return (f"CI at bound ({', '.join(hit)}: > {BOOT_BOUND_SHARE:.1%} of refits "
                        f"at the fitter's box)")
    name, value, lo, hi, _ = exps[0]
    if sign and math.isfinite(value) and value * sign <= 0:
        need = ">" if sign > 0 else "<"
        return f"wrong sign ({name} = {value:.3g}; the claim needs {name} {need} 0)"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "CI unresolved (nan)"
    if sign and lo <= 0.0 <= hi:
        return f"CI spans 0 [{lo:.2g}, {hi:.2g}]"
    if any(note.startswith(BREAK_NOTE) for note in notes):  # forms' `break_inside`
        return "break at the data edge"
    return "ok"
