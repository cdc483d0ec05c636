"""One source for the fit-status rules: the scalar `fit_status` (one `Fit`) and the back-tests'
vectorised `_resolved` (arrays of prefix fits) agree case by case on the rules they share (an
exponent at the fitter's box, a break at the data edge), and both read them from
analysis.fitting.forms, so a rule changed there changes both."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.backtests import fits as backtest_fits
from analysis.fitting import fit as fit_module
from analysis.fitting import forms, result
from analysis.fitting.forms import B_MAX, FORMS
from analysis.fitting.result import Fit, fit_status

EDGE = B_MAX * (1.0 - 1e-3)  # the threshold as both paths wrote it before the rules were shared
BELOW, ABOVE = np.nextafter(EDGE, 0.0), np.nextafter(EDGE, math.inf)
EXPONENTS = (0.0, 0.7, -3.0, 19.0, BELOW, EDGE, ABOVE, B_MAX, -BELOW, -EDGE, -B_MAX, math.nan)
U = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])  # distinct log x (exact at 12 digits)
NAN_CI = (math.nan, math.nan)


def power_fit(b: float, ci: tuple[float, float] = NAN_CI, claim_sign: int | None = None) -> Fit:
    """A power-law `Fit` with exponent b and CI ci (what `fit_status` reads)."""
    return Fit(form="power", params={"a": 1.0, "b": b}, ci={"b": ci}, rms_log_residual=0.0,
               n_points=10, decades=2.0, claim_sign=claim_sign)


def broken_fit(theta: np.ndarray, lx: np.ndarray) -> Fit:
    """A broken-power `Fit` at internal theta (log a, b1, b2, log d), its notes those of the
    form on the fitted log x lx, finite CIs away from the box (so only the notes decide)."""
    shape = FORMS["broken_power"]
    params = {k: float(v) for k, v in shape.to_params(theta).items()}
    ci = {name: (-1.0, 1.0) for name in shape.params}
    return Fit(form="broken_power", params=params, ci=ci, rms_log_residual=0.0, n_points=10,
               decades=2.0, notes=shape.notes(theta, lx))


def vectorised(form: str, theta: np.ndarray, u: np.ndarray = U) -> np.ndarray:
    """`_resolved` on thetas (S, K, P)."""
    return backtest_fits._resolved(FORMS[form], theta, u)


# ------------------------------------------------------------------------- bound rule


@pytest.mark.parametrize("b", EXPONENTS)
def test_bound_rule_agrees_case_by_case(b):
    theta = np.array([[[0.0, b]]])  # (S=1, K=1, P=2): log a, b
    resolved = bool(vectorised("power", theta)[0, 0])
    status = fit_status(power_fit(b))
    assert status.startswith("at bound") == (not resolved)
    assert status.startswith("at bound") == (math.isfinite(b) and abs(b) >= EDGE)


def test_bound_rule_on_a_batch_is_the_scalar_rule_per_element():
    b = np.array(EXPONENTS)
    theta = np.stack([np.zeros_like(b), b], axis=-1)[:, None, :]  # (S, 1, 2)
    resolved = vectorised("power", theta)[:, 0]
    scalar = [not fit_status(power_fit(v)).startswith("at bound") for v in EXPONENTS]
    assert resolved.tolist() == scalar
    assert resolved.tolist() == [not forms.at_bound(v) for v in EXPONENTS]


def test_bound_rule_of_both_broken_exponents():
    for i in (1, 2):  # b1, b2
        theta = np.array([0.0, 0.3, 1.2, 1.25])
        theta[i] = -EDGE
        fit = broken_fit(theta, U)
        assert fit_status(fit) == f"at bound {('b1', 'b2')[i - 1]}={-EDGE:.3g}"
        assert not vectorised("broken_power", np.tile(theta, (1, U.size + 1, 1)))[0, -1]


def test_only_the_scalar_reads_ci_ends():
    """A CI end at the box: a `Fit` has one, a prefix fit does not (no bootstrap)."""
    assert fit_status(power_fit(0.7, ci=(0.5, EDGE))) == f"at bound b={EDGE:.3g}"
    assert fit_status(power_fit(0.7, ci=(0.5, BELOW))) == "ok"


# ------------------------------------------------------------------------- break rule


def break_cases() -> list[float]:
    """Break positions (log d) on and around every window end of U's prefixes, and NaN."""
    ends = {float(v) for v in U}
    near = {float(np.nextafter(v, s)) for v in ends for s in (-math.inf, math.inf)}
    return sorted(ends | near | {1.25, -1.0, 9.0}) + [math.nan]


def test_break_rule_agrees_case_by_case():
    lds = break_cases()
    K = U.size + 1
    theta = np.zeros((len(lds), K, 4))
    theta[..., 1], theta[..., 2] = 0.3, 1.2
    theta[..., 3] = np.array(lds)[:, None]
    resolved = vectorised("broken_power", theta)
    n_edge = 0
    for s, ld in enumerate(lds):
        for m in range(K):
            status = fit_status(broken_fit(theta[s, m], U[:m]))
            assert status in ("ok", "break at the data edge")
            assert (status == "ok") == bool(resolved[s, m]), (ld, m, status)
            n_edge += status != "ok"
    assert 0 < n_edge < resolved.size  # both outcomes occur
    assert not resolved[:, : forms.BREAK_MIN_X].any()


def test_break_window_is_the_second_to_the_second_last_distinct_x():
    assert forms.break_window(U) == (U[1], U[-2])
    assert forms.break_window(U, 5) == (U[1], U[3])
    assert forms.break_window(U[:3]) is None
    assert forms.break_inside(1.0, forms.break_window(U))
    assert not forms.break_inside(math.nan, forms.break_window(U))
    assert not forms.break_inside(1.0, None)
    assert forms.break_inside(np.array([0.4, 0.5, 2.5, 2.6]), (0.5, 2.5)).tolist() == \
        [False, True, True, False]


def test_break_note_text_and_status():
    theta = np.array([0.0, 0.3, 1.2, 0.0])  # break at the first x
    note = FORMS["broken_power"].notes(theta, U)
    assert note == ["break at the edge of the data: fewer than 2 distinct x on one side"]
    assert fit_status(broken_fit(theta, U)) == "break at the data edge"


# --------------------------------------------------------------- scalar-only rules, strings


def test_scalar_only_rules_keep_their_strings():
    assert fit_status(power_fit(-0.5, ci=(-0.6, -0.4), claim_sign=1)) == \
        "wrong sign (b = -0.5; the claim needs b > 0)"
    assert fit_status(power_fit(0.5)) == "CI unresolved (nan)"
    assert fit_status(power_fit(0.5, ci=(-0.2, 0.4), claim_sign=1)) == "CI spans 0 [-0.2, 0.4]"
    assert fit_status(power_fit(0.5, ci=(-0.2, 0.4))) == "ok"  # no claim: a flat law may hold
    fit = power_fit(0.5, ci=(0.4, 0.6))
    fit.notes = ["CI of b reaches the parameter bounds in > 2.5% of the refits: not resolved"]
    assert fit_status(fit) == "CI at bound (b: > 2.5% of refits at the fitter's box)"


def test_bootstrap_bound_note_is_the_one_fit_status_reads():
    shape = FORMS["power"]
    lx = np.log(2.0 ** np.arange(6))
    boots = np.tile([0.0, B_MAX], (40, 1))  # every refit at the box
    note = fit_module._bound_notes(shape, boots, lx, -0.5 * lx)
    assert note == ["CI of b reaches the parameter bounds in > 2.5% of the refits: not "
                    "resolved by the data"]
    fit = power_fit(0.5, ci=(0.4, 0.6))
    fit.notes = note
    assert fit_status(fit).startswith("CI at bound (b:")


# --------------------------------------------------------------------------- one source


def test_both_paths_use_the_same_rule_objects():
    assert backtest_fits.at_bound is forms.at_bound is result.at_bound
    assert backtest_fits.break_inside is forms.break_inside
    assert backtest_fits.break_window is forms.break_window
    assert result.BREAK_NOTE is forms.BREAK_NOTE
    assert fit_module.BOUND_NOTE is result.BOUND_NOTE
    assert fit_module.BOOT_BOUND_SHARE is result.BOOT_BOUND_SHARE


def test_a_rule_changed_once_changes_both_paths(monkeypatch):
    b = 18.5  # resolved under the 0.1% tolerance, at the box under a 10% one
    theta = np.array([[[0.0, b]]])
    assert fit_status(power_fit(b)) == "CI unresolved (nan)" and vectorised("power", theta)[0, 0]
    monkeypatch.setattr(forms, "BOUND_RTOL", 0.1)
    assert fit_status(power_fit(b)) == "at bound b=18.5"
    assert not vectorised("power", theta)[0, 0]

    monkeypatch.setattr(forms, "BREAK_MIN_X", 8)  # no prefix of U's 7 x may hold a break
    theta = np.tile([0.0, 0.3, 1.2, 1.5], (1, U.size + 1, 1))
    assert not vectorised("broken_power", theta).any()
    assert fit_status(broken_fit(theta[0, -1], U)) == "break at the data edge"
