"""The project's one scaling-law fitter: robust log-space fits with a bootstrap over seeds.

    fit = fit_scaling(x, y, groups, form="saturating")     # -> Fit (analysis.fitting.result)
    fits = compare_forms(x, y, groups)                     # best AIC first

The forms (`power`, `saturating`, `broken_power`) live in analysis.fitting.forms, the Huber
optimiser and the seeded group bootstrap in analysis.fitting.solve, the result (`Fit`) and
`fit_status` (is a fit resolved?) in analysis.fitting.result; both are imported from here, where
docs/analysis.md and the fit report name them.

Uncertainty. The point estimate uses every seed-level point. The 95% CI comes from B (default
1000) bootstrap refits on groups (seeds) resampled with replacement; CIs are 2.5/97.5
percentiles.

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
from collections.abc import Sequence

import numpy as np

from analysis.fitting.forms import FORMS, Form, distinct_x
from analysis.fitting.result import BOOT_BOUND_SHARE, BOUND_NOTE, Fit, fit_status
from analysis.fitting.solve import bootstrap, point_fit

# Fit and fit_status are defined in analysis.fitting.result; this module is where the docs, the
# fit report (fits.md) and the figures name them, so they are imported from here.
__all__ = ["DEFAULT_FORMS", "Fit", "aic", "compare_forms", "fit_scaling", "fit_status",
           "holdout_error"]

DEFAULT_FORMS = ("power", "saturating", "broken_power")

Array = np.ndarray


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
    n_x = distinct_x(lx).size
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
    theta, _, _ = point_fit(shape, lx[train], ly[train])
    err = shape.log_model(theta, lx[~train])[0] - ly[~train]
    return {"x": cut, "n": int(err.size), "log_error": float(np.mean(err)),
            "rmsle": float(np.sqrt(np.mean(err * err)))}


def _boot_ci_corr(shape, boots: np.ndarray, ci: dict) -> tuple[dict, dict[str, float]]:
    """95% percentile CIs of the parameters from the bootstrap refits (`ci` when none) and the
    correlations of the fitted coordinates (more than two refits)."""
    corr: dict[str, float] = {}
    if len(boots):
        values = shape.to_params(boots)
        ci = {name: (float(np.percentile(values[name], 2.5)),
                     float(np.percentile(values[name], 97.5))) for name in shape.params}
        if len(boots) > 2:
            with np.errstate(all="ignore"):
                matrix = np.corrcoef(boots, rowvar=False)
            for i, j in itertools.combinations(range(len(shape.params)), 2):
                corr[f"{shape.params[i]}:{shape.params[j]}"] = float(matrix[i, j])
    return ci, corr


def _bound_notes(shape, boots: np.ndarray, lx: np.ndarray, ly: np.ndarray) -> list[str]:
    """A note naming the parameters whose refits sit at the box bounds in more than
    BOOT_BOUND_SHARE of them (read by `fit_status`)."""
    if not len(boots):
        return []
    lower, upper = shape.box(lx, ly)
    at_bound = [name for i, name in enumerate(shape.params)
                if np.mean(np.isclose(boots[:, i], lower[i]) | np.isclose(boots[:, i], upper[i]))
                > BOOT_BOUND_SHARE]
    if at_bound:
        return [f"CI of {', '.join(at_bound)} {BOUND_NOTE} in > {BOOT_BOUND_SHARE:.1%} "
                f"of the refits: not resolved by the data"]
    return []


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
    theta, cost, converged = point_fit(shape, lx, ly)
    residual = shape.log_model(theta, lx)[0] - ly

    labels = np.unique(groups)
    ci = {name: (math.nan, math.nan) for name in shape.params}
    if labels.size < 2 and n_boot > 0:
        warnings.warn(f"{form} fit: {labels.size} group(s); no bootstrap CI", stacklevel=2)
        n_boot = 0
    boots = bootstrap(shape, theta, lx, ly, groups, n_boot, seed) if n_boot > 0 else \
        np.empty((0, len(shape.params)))
    ci, corr = _boot_ci_corr(shape, boots, ci)
    notes = shape.notes(theta, lx)
    notes += _bound_notes(shape, boots, lx, ly)
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
