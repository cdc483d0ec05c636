"""Verdicts that can fail: when a claim may be judged, and how. The rules, stated once
(docs/REPRODUCTION.md quotes them; figures and reports use the constants, which live beside
the code that applies them: the learned-regime bar in analysis.reading.regime, a cell's seed spread
in analysis.reading.spreads, the seed rule and the claims here):

* **Learned regime.** A claim about a trained model is judged only where the model is clearly
  better than the best trivial predictor on the same test prompts (rows whose `predictor` is
  one of `TRIVIAL`; seed-medians of the same statistic, metric, position and step):
  error metrics (lower is better): model error <= LEARNED_ERROR_RATIO = 0.1 x the best
  trivial error; R² (higher is better): model R² >= the best trivial R² + LEARNED_R2_GAP =
  0.05; a threshold claim (samples to reach error t): t <= THRESHOLD_RATIO = 0.5 x the best
  trivial error. Otherwise the verdict is "not testable at this scale", never "reproduced"
  or "partly reproduced". Ridge is part of the bar only on tasks it does not solve: on the
  linear tasks (`RIDGE_SOLVES`) it is the task's own solution, a reference like OLS.
* **The floor.** Every task reports its floor (rows with predictor "floor", icl_core.algorithms.floor:
  the error of the best predictor that knows the task's law, e.g. the Bayes posterior mean
  of noisy linear regression; not a trivial predictor): F for errors, a ceiling C for R²;
  a task without a floor row has F = 0 / C = 1 (exact for noiseless tasks whose law the
  prompt determines, optimistic otherwise). The bar applies to the excess over the floor,
  for every row, the constants unchanged (`analysis.reading.regime.excess_bar`):
  error: model − F <= 0.1 x (trivial − F); R²: model − trivial >= 0.05 x (C − trivial) /
  (1 − trivial). Why this R² form: R² = 1 − error / Var(y), so 1 − R² is the error in units
  of Var(y) and C − R² the error above the floor. Today's R² rule asks the model to remove
  a fixed share 0.05 / (1 − trivial) of the trivial predictor's unexplained variance
  (1 − trivial, its error above a floor of 0); likewise the floor rule asks the same share
  of its error above the floor (C − trivial). With F = 0 / C = 1 both are exactly today's
  rules (0.1 x trivial; trivial + 0.05); a floor only lowers what a model must beat by what
  no model can beat. A cell's **reach**: "reachable" where the floor clears today's bar (F
  <= 0.1 x trivial; C >= trivial + 0.05); "excess only" where only the bar on the excess
  can be cleared (judged by it, and said so); "out of reach" where no predictor can clear
  the bar (error: trivial <= F, nothing above the floor to learn; R²: trivial >= C or
  trivial > 1 − 0.05, where the gap demanded exceeds the room left): "bar out of reach:
  this setting cannot test the claim (best trivial X, floor F, bar B)", not "not learned";
  the remedy is a setting or position with room, named in the verdict ("at k >= 2d").
* **Seeds.** A comparison needs >= MIN_SEEDS = 3 seeds on each side ("not testable: N
  seeds" otherwise). A cell's spread is its seed values' min-max range (`SPREAD`).
* **Orderings** ("A is better than B"): hold only if A's seed-median is better AND the two
  min-max ranges do not overlap; otherwise "unresolved" (judged "not testable at this scale").
* **Gaps** ("B is >= k x A"): reproduced if the ordering holds and median_B / median_A >= k;
  partly reproduced if it holds and the ratio reaches k ** PARTLY_LOG_FRACTION (half the
  claimed orders, e.g. 10x for a claimed 100x); else not reproduced.
* **Within a factor** ("A is within f x of B"): reproduced if the seed-medians' ratio (either
  way) is <= f; partly reproduced if <= f ** (1 / PARTLY_LOG_FRACTION) (twice the orders,
  e.g. 4x for a claimed 2x); else not reproduced.
* **Trends** (a fitted exponent): judged only if `fit_status(fit, sign)` is "ok" and the CI
  excludes 0 on the claimed side: reproduced; a resolved exponent of the wrong sign: not
  reproduced; any other status (at a bound, CI nan or spanning 0): not testable.

    table = learned_regime(rows, by=["model.mixer", "model.depth"])   # analysis.reading.regime
    v = verdict("gap", a=spread(transformer), b=spread(baseconv), factor=100,
                regimes=[Regime.from_row(r) for r in table.iter_rows(named=True)],
                names=("Transformer", "BaseConv"))
    print(v)   # "not testable at this scale: BaseConv not learned: 0.78 = 0.26x prompt mean..."
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analysis.fitting.fit import fit_status
from analysis.fitting.result import exponents
from analysis.reading.regime import NOT_TESTABLE, Regime
from analysis.reading.spreads import Spread, spread

MIN_SEEDS = 3  # seeds per side before a comparison is judged
PARTLY_LOG_FRACTION = 0.5  # "partly": half the claimed orders (gap), twice them (within)
OUTCOMES = ("reproduced", "partly reproduced", "not reproduced", NOT_TESTABLE)


@dataclass(frozen=True)
class Ordering:
    """Outcome of "is A better than B": winner "a" / "b" (resolved), or None (unresolved, or
    too few seeds), with the evidence."""

    winner: str | None
    status: str  # "resolved" | "unresolved" | "too few seeds"
    text: str


def _seeds_missing(sides: Iterable[tuple[str, Spread]]) -> str | None:
    short = [f"{name} {s.n}" for name, s in sides if not s.fixed and s.n < MIN_SEEDS]
    return f"not testable: {', '.join(short)} seed(s) (needs >= {MIN_SEEDS})" if short else None


def ordering(a, b, higher_is_better: bool = False, names: tuple[str, str] = ("A", "B")
             ) -> Ordering:
    """Is A better than B (lower, or higher with higher_is_better)? Resolved only if the
    seed-medians are ordered AND the seed ranges (min-max) do not overlap; with < MIN_SEEDS
    seeds on a side: refused."""
    a, b = spread(a), spread(b)
    na, nb = names
    short = _seeds_missing([(na, a), (nb, b)])
    if short:
        return Ordering(None, "too few seeds", short)
    sign = -1.0 if higher_is_better else 1.0
    better = "a" if sign * a.median < sign * b.median else "b"
    lo, hi = (a, b) if better == "a" else (b, a)  # lo: the better side
    separated = lo.min > hi.max if higher_is_better else lo.max < hi.min
    evidence = f"{na} {a.text()} vs {nb} {b.text()}"
    if a.median == b.median or not separated:
        return Ordering(None, "unresolved", f"unresolved: seed ranges overlap ({evidence})")
    win = na if better == "a" else nb
    return Ordering(better, "resolved", f"{win} better, ranges apart ({evidence})")


@dataclass(frozen=True)
class Verdict:
    outcome: str  # one of OUTCOMES
    evidence: str
    # judged | not learned | out of reach | regime unknown | seeds | unresolved | fit
    reason: str = "judged"

    def __str__(self) -> str:
        return f"{self.outcome}: {self.evidence}"


def _regime_gate(regimes: Sequence) -> Verdict | None:
    """'not testable' when a model the claim rests on is not (known to be) learned, with the
    reason: its bar out of reach in this setting, or not learned."""
    for r in regimes:
        r = r if isinstance(r, Regime) else Regime.from_row(r)
        if r.learned is None:
            return Verdict(NOT_TESTABLE, r.text(), "regime unknown")
        if r.out_of_reach:
            return Verdict(NOT_TESTABLE, r.text(), "out of reach")
        if not r.learned:
            return Verdict(NOT_TESTABLE, r.text(), "not learned")
    return None


def verdict(kind: str, a=None, b=None, *, factor: float | None = None, fit=None,
            sign: int = 1, regimes: Sequence = (), names: tuple[str, str] = ("A", "B"),
            higher_is_better: bool = False) -> Verdict:
    """Judge one claim; returns a Verdict whose outcome is one of OUTCOMES.

    kind "ordering": A is better than B. "gap": B is >= factor x A (errors: A better).
    "within": A is within factor x of B. "trend": the fit's first exponent has sign `sign`
    (a x^-b with sign +1: y falls as x grows). a, b: seed values (a Spread, a sequence) or a
    plain number for a fixed reference (OLS level, a closed form). regimes: `Regime`s (or
    `learned_regime` rows) of every trained model the claim rests on; any not learned, or
    unknown, gives "not testable at this scale" before anything else is looked at; an empty
    list checks nothing (hand-built models, closed forms)."""
    gate = _regime_gate(regimes)
    if gate is not None:
        return gate
    if kind == "trend":
        status = fit_status(fit, sign)
        if status == "ok":
            return Verdict(OUTCOMES[0], f"{fit.label()} (sign {sign:+d} resolved)")
        if status.startswith("wrong sign"):
            _, _, lo, hi, _ = exponents(fit)[0]
            if math.isfinite(lo) and math.isfinite(hi) and not lo <= 0 <= hi:
                return Verdict(OUTCOMES[2], f"{status}: {fit.label()}", "fit")
        return Verdict(NOT_TESTABLE, f"fit unresolved: {status}", "fit")
    if kind not in ("ordering", "gap", "within"):
        raise ValueError(f"verdict: unknown kind {kind!r} (ordering, gap, within, trend)")
    a, b = spread(a), spread(b)
    na, nb = names
    short = _seeds_missing([(na, a), (nb, b)])
    if short:
        return Verdict(NOT_TESTABLE, short, "seeds")
    if kind == "within":
        if factor is None or factor < 1:
            raise ValueError("verdict within: factor >= 1 needed")
        if not (a.median > 0 and b.median > 0):
            return Verdict(NOT_TESTABLE, f"non-positive level ({na} {a.text()}, {nb} "
                           f"{b.text()})", "unresolved")
        ratio = max(a.median / b.median, b.median / a.median)
        text = f"{na} {a.text()} vs {nb} {b.text()}: ratio {ratio:.3g} (claim <= {factor:g}x)"
        if ratio <= factor:
            return Verdict(OUTCOMES[0], text)
        if ratio <= factor ** (1.0 / PARTLY_LOG_FRACTION):
            return Verdict(OUTCOMES[1], text)
        return Verdict(OUTCOMES[2], text)
    order = ordering(a, b, higher_is_better, names)
    if order.winner is None:
        return Verdict(NOT_TESTABLE, order.text, "unresolved")
    if order.winner == "b":
        return Verdict(OUTCOMES[2], f"opposite order: {order.text}")
    if kind == "ordering":
        return Verdict(OUTCOMES[0], order.text)
    if factor is None or factor <= 1:
        raise ValueError("verdict gap: factor > 1 needed")
    ratio = b.median / a.median if a.median > 0 else math.inf
    text = f"{nb} / {na} = {ratio:.3g}x (claim >= {factor:g}x; {order.text})"
    if ratio >= factor:
        return Verdict(OUTCOMES[0], text)
    if ratio >= factor ** PARTLY_LOG_FRACTION:
        return Verdict(OUTCOMES[1], text)
    return Verdict(OUTCOMES[2], text)
