"""One engine decides every declared claim (`analysis.claims.declare`) from rows, by the same
rules; there is no per-claim code path.

1. **Evidence.** No rows for the claim's source, or none for one of its cells' configs (a
   partial run): "evidence pending" with the command that produces them.
2. **Learned regime** of every trained cell (`analysis.reading.regime.learned_regime`: the bar
   and the floor, constants unchanged): no predictor can clear the bar: "bar out of reach";
   a cell not learned (or no trivial rows): "not testable".
3. **Seeds.** Fewer than MIN_SEEDS on a compared cell: "not testable".
4. **The comparison** of the claim's kind, on one value per seed (the median over the seed's
   rows in the cell), by the bootstrap interval of `analysis.claims.separation`, on log values
   for errors (so factors are ratios) and raw values for R²: the interval wholly on the
   claim's side: "reproduced"; wholly on the other: "not reproduced"; across it: "not
   testable: unresolved". Where the claim names a `reference` predictor scored on the same
   prompts, each seed's model value is divided by its own reference value first (paired).
5. **Parts**: a part pending: the claim is pending (each decided part still shown); all parts
   reproduced: reproduced; some reproduced and some not: "partly"; none reproduced and some
   not: "not reproduced"; otherwise the parts' common state.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

from analysis.claims.cells import (
    ITER_COLUMNS,
    N_STAR,
    Undecidable,
    n_star_values,
    regime,
    seed_values,
)
from analysis.claims.declare import MIN_SEEDS, Cell, Claim, Source
from analysis.claims.separation import LEVEL, ci_one, ci_two, minmax_apart
from analysis.reading.regime import REACH, Regime, excess_bar, is_r2

OUTCOMES = ("reproduced", "not reproduced", "partly", "not testable", "bar out of reach",
            "evidence pending")


@dataclass(frozen=True)
class Decision:
    claim: Claim
    outcome: str  # one of OUTCOMES
    reason: str = ""  # why (for every outcome but reproduced / not reproduced: what is missing)
    numbers: str = ""  # the values it was decided on: cells, reference, bar, floor, seeds
    minmax: str = ""  # today's min-max rule on the same values (reported, not deciding)
    parts: tuple[Decision, ...] = field(default_factory=tuple)

    def line(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"{self.outcome}{why}"

    def leaves(self) -> list[Decision]:
        """The decisions of its parts' parts, down to those without parts (itself if none)."""
        return [x for p in self.parts for x in p.leaves()] if self.parts else [self]


def _fmt(values) -> str:
    v = sorted(values)
    med = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    return f"{med:.3g} [{v[0]:.3g}–{v[-1]:.3g}] ({len(v)} seeds)"


def _scale(claim: Claim, values):
    """log values for errors (a factor is a ratio), raw for R²."""
    if is_r2(claim.metric):
        return list(values)
    if min(values) <= 0:
        raise Undecidable(f"non-positive error {min(values):.3g}: no ratio")
    return [math.log(v) for v in values]


def _side(lo: float, hi: float, bound: float, want_above: bool, strict: bool = False) -> str:
    """reproduced / not reproduced / unresolved for an interval against a bound (strict: an
    interval touching the bound is unresolved: an ordering needs a difference)."""
    if want_above:
        above = lo > bound if strict else lo >= bound
        return "reproduced" if above else "not reproduced" if hi < bound else "unresolved"
    below = hi < bound if strict else hi <= bound
    return "reproduced" if below else "not reproduced" if lo > bound else "unresolved"


def _show(claim: Claim, lo: float, hi: float) -> str:
    if is_r2(claim.metric):
        return f"{int(LEVEL * 100)}% CI [{lo:.3g}, {hi:.3g}]"
    return f"{int(LEVEL * 100)}% CI of the ratio [{math.exp(lo):.3g}, {math.exp(hi):.3g}]"


def _paired_seeds(a: dict, b: dict) -> list:
    """The seeds both sides have (paired comparisons), at least MIN_SEEDS."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < MIN_SEEDS:
        raise Undecidable(f"{len(seeds)} paired seed(s) (needs >= {MIN_SEEDS})")
    return seeds


def _slopes(claim: Claim, cells: tuple[Cell, ...], vals: list[dict]) -> list[float]:
    """Per seed (those every cell has), the least-squares slope of the claim's scale of the
    values (log errors; R² as is) on log x over the cells."""
    if claim.x is None:
        raise ValueError(f"claim {claim.id}: a slope claim needs x")
    seeds = sorted(set.intersection(*(set(v) for v in vals)))
    if len(seeds) < MIN_SEEDS:
        raise Undecidable(f"{len(seeds)} seed(s) in every cell (needs >= {MIN_SEEDS})")
    lx = [math.log(c.where[claim.x]) for c in cells]
    mx = sum(lx) / len(lx)
    slopes = []
    for s in seeds:
        ly = _scale(claim, [v[s] for v in vals])
        my = sum(ly) / len(ly)
        slopes.append(sum((u - mx) * (w - my) for u, w in zip(lx, ly, strict=True))
                      / sum((u - mx) ** 2 for u in lx))
    if not all(math.isfinite(x) for x in slopes):
        raise Undecidable(f"a non-finite slope ({_fmt(slopes)}): a value is not a number")
    return slopes


def _values(rows: pl.DataFrame, claim: Claim, cell: Cell, lower_bound: bool = False
            ) -> dict[int, float]:
    """{seed: value} of a compared cell: its n* for the derived metric, else its rows'."""
    if claim.metric == N_STAR:
        return n_star_values(rows, claim, cell, lower_bound=lower_bound)
    return seed_values(rows, claim, cell)


def _compare(claim: Claim, rows: pl.DataFrame) -> tuple[str, str, str]:
    """(result, numbers, minmax) of the claim's comparison; result as `_side`."""
    higher = is_r2(claim.metric)
    # n*: samples to reach the threshold; B's censored seeds count as caps in an ordering
    vals = [_values(rows, claim, c, lower_bound=claim.kind in ("better", "gap") and i == 1)
            for i, c in enumerate(claim.cells)]
    for c, v in zip(claim.cells, vals, strict=True):
        if c.trained and len(v) < MIN_SEEDS:
            raise Undecidable(f"{c.label}: {len(v)} seed(s) (needs >= {MIN_SEEDS})")
    kind = claim.kind
    if kind in ("better", "gap") and (claim.reference or claim.paired):  # per seed
        a, la = vals[0], claim.cells[0].label
        if claim.reference:  # the model vs a predictor on the same prompts
            b, lb = seed_values(rows, claim, claim.cells[0], claim.reference,
                                claim.reference_where), claim.reference
        else:  # two cells of the same seeds
            b, lb = vals[1], claim.cells[1].label
        seeds = _paired_seeds(a, b)
        sa, sb = _scale(claim, [a[s] for s in seeds]), _scale(claim, [b[s] for s in seeds])
        adv = [x - y for x, y in zip(sa, sb, strict=True)] if higher else \
            [y - x for x, y in zip(sa, sb, strict=True)]  # A's advantage over B, per seed
        lo, hi = ci_one(adv)
        bound = math.log(claim.factor) if kind == "gap" else 0.0
        result = _side(lo, hi, bound, want_above=True, strict=kind == "better")
        factor = f", claim >= {claim.factor:g}x" if kind == "gap" else ""
        shown = adv if higher else [math.exp(x) for x in adv]
        if claim.reference:
            numbers = (f"{lb} ÷ {la} on the same prompts, per seed {_fmt(shown)}; "
                       f"{_show(claim, lo, hi)}{factor}; model {_fmt(a.values())}, reference "
                       f"{_fmt([b[s] for s in seeds])}")
        else:
            numbers = (f"{lb} vs {la}, paired per seed: {'difference' if higher else 'ratio'} "
                       f"{_fmt(shown)}; {_show(claim, lo, hi)}{factor}; {la} "
                       f"{_fmt(a.values())}, {lb} {_fmt(b.values())}")
        ok = all(x > bound for x in adv)
        return result, numbers, "every seed on the claim's side" if ok else "not every seed"
    if kind in ("better", "gap"):
        a, b = vals[0], vals[1]
        la, lb = claim.cells[0].label, claim.cells[1].label
        sa, sb = _scale(claim, a.values()), _scale(claim, b.values())
        lo, hi = ci_two(sb, sa) if higher else ci_two(sa, sb)  # A's advantage over B
        bound = math.log(claim.factor) if kind == "gap" else 0.0
        result = _side(lo, hi, bound, want_above=True, strict=kind == "better")
        factor = f", claim >= {claim.factor:g}x" if kind == "gap" else ""
        numbers = f"{la} {_fmt(a.values())} vs {lb} {_fmt(b.values())}; {_show(claim, lo, hi)}{factor}"
        apart = minmax_apart(list(a.values()), list(b.values()))
        return result, numbers, "ranges apart" if apart else "ranges overlap"
    if kind == "within":
        cell = claim.cells[0]
        model = vals[0]
        if claim.reference:
            ref = seed_values(rows, claim, cell, claim.reference, claim.reference_where)
            seeds = _paired_seeds(model, ref)
            ratios = [model[s] / ref[s] for s in seeds]
            what = f"{cell.label} ÷ {claim.reference} on the same prompts, per seed"
            ref_text = f"; reference {_fmt([ref[s] for s in seeds])}"
        else:
            other = vals[1]
            seeds = _paired_seeds(model, other)
            ratios = [model[s] / other[s] for s in seeds]
            what = f"{cell.label} ÷ {claim.cells[1].label}, per seed"
            ref_text = ""
        if min(ratios) <= 0:
            raise Undecidable(f"a non-positive ratio ({min(ratios):.3g}): no factor")
        lo, hi = ci_one([math.log(r) for r in ratios])
        bound = math.log(claim.factor)
        result = ("reproduced" if -bound <= lo and hi <= bound else
                  "not reproduced" if lo > bound or hi < -bound else "unresolved")
        numbers = (f"{what}: {_fmt(ratios)}; {int(LEVEL * 100)}% CI of the ratio "
                   f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}], claim within "
                   f"{claim.factor:g}x; model {_fmt(model.values())}{ref_text}")
        inside = all(1 / claim.factor <= r <= claim.factor for r in ratios)
        outside = all(r > claim.factor or r < 1 / claim.factor for r in ratios)
        return result, numbers, ("all seeds within" if inside else "all seeds outside"
                                 if outside else "seeds on both sides")
    if kind == "reaches":
        a = vals[0]
        s = _scale(claim, a.values())
        bound = claim.value if higher else math.log(claim.value)
        lo, hi = ci_one(s)
        result = _side(lo, hi, bound, want_above=higher)
        shown = (f"[{lo:.3g}, {hi:.3g}]" if higher else f"[{math.exp(lo):.3g}, {math.exp(hi):.3g}]")
        word = ">=" if higher else "<="
        numbers = (f"{claim.cells[0].label} {_fmt(a.values())}; {int(LEVEL * 100)}% CI {shown}, "
                   f"claim {word} {claim.value:g}")
        ok = all(v >= claim.value for v in a.values()) if higher else \
            all(v <= claim.value for v in a.values())
        return result, numbers, "every seed on the claim's side" if ok else "not every seed"
    if kind == "slope":
        slopes = _slopes(claim, claim.cells, vals)
        lo, hi = ci_one(slopes)
        what = "slope of R² on log" if higher else "log-log slope in"
        if claim.below:  # milder than another curve: the two intervals apart, this one below
            other = _slopes(claim, claim.below, [_values(rows, claim, c) for c in claim.below])
            olo, ohi = ci_one(other)
            result = ("reproduced" if hi < olo else "not reproduced" if lo > ohi else
                      "unresolved")
            numbers = (f"{what} {claim.x} per seed {_fmt(slopes)}, {int(LEVEL * 100)}% CI "
                       f"[{lo:.3g}, {hi:.3g}]; {claim.below[0].label.split(',')[0]} "
                       f"{_fmt(other)}, CI [{olo:.3g}, {ohi:.3g}]; claim below it, apart")
            return result, numbers, f"slopes {min(slopes):.3g} to {max(slopes):.3g}"
        if claim.value:  # a sign: the interval on that side of 0
            result = _side(lo, hi, 0.0, want_above=claim.value > 0, strict=True)
            claim_text = "falls" if claim.value < 0 else "grows"
        elif claim.factor == 0:  # flat in the strict sense: the interval reaches 0
            result = "reproduced" if lo <= 0 <= hi else "not reproduced"
            claim_text = "flat (its interval reaches 0)"
        else:  # flat: the interval inside ±factor
            f = claim.factor
            result = ("reproduced" if -f <= lo and hi <= f else
                      "not reproduced" if lo > f or hi < -f else "unresolved")
            claim_text = f"flat (|slope| <= {f:g})"
        numbers = (f"{what} {claim.x} per seed {_fmt(slopes)}; {int(LEVEL * 100)}% CI "
                   f"[{lo:.3g}, {hi:.3g}], claim {claim_text}")
        return result, numbers, f"slopes {min(slopes):.3g} to {max(slopes):.3g}"
    raise ValueError(f"claim {claim.id}: kind {kind!r} is decided without rows")


@functools.cache
def computed(compute: str) -> float:
    """The number an exact claim's `compute` ("module:function" or a constant) gives; once per
    process (the checks are deterministic: a construction against GD, a model against GPT-2)."""
    module, _, name = compute.partition(":")
    found = getattr(importlib.import_module(module), name)
    return float(found() if callable(found) else found)


def _exact(claim: Claim) -> Decision:
    try:
        got = computed(claim.compute)
    except ImportError as exc:  # an optional dependency of the check (e.g. transformers)
        return Decision(claim, "not testable", f"cannot compute: {exc}")
    err = abs(got - claim.value) / abs(claim.value) if claim.value else abs(got)
    ok = err <= claim.tolerance
    numbers = (f"computed {got:.6g} vs {claim.value:.6g}: relative error {err:.2g} "
               f"(tolerance {claim.tolerance:g})")
    return Decision(claim, "reproduced" if ok else "not reproduced", "", numbers, "—")


def decide(claim: Claim, rows_of: Callable[[Source], pl.DataFrame | None]) -> Decision:
    """The verdict of one claim; `rows_of(source)` returns the rows of a source (None: no
    evidence)."""
    if claim.parts:
        return _combine(claim, [decide(p, rows_of) for p in claim.parts])
    if claim.kind == "exact":
        return _exact(claim)
    rows = rows_of(claim.source)
    if rows is None:
        return Decision(claim, "evidence pending", f"run `{claim.source.command()}`")
    absent = [c.label for c in (*claim.cells, *claim.below) if not _in_evidence(rows, c)]
    if absent:  # a partial run: the rows say nothing yet about these configs
        return Decision(claim, "evidence pending", f"{', '.join(absent)}: not in the committed "
                        f"rows (a partial run); run `{claim.source.command()}`")
    try:
        notes = []
        for cell in (*claim.cells, *claim.below):
            if not (cell.trained and cell.gated):
                continue
            r = regime(rows, claim, cell)
            if r.reach == REACH[2] or (r.threshold is not None and r.learned is False):
                return Decision(claim, "bar out of reach", r.text())
            if not r.learned:
                beyond = _reference_beyond_the_bar(rows, claim, cell, r)
                if beyond:
                    return Decision(claim, "bar out of reach", beyond)
                return Decision(claim, "not testable", r.text())
            notes.append(r.text())
        result, numbers, minmax = _compare(claim, rows)
    except Undecidable as exc:
        return Decision(claim, "not testable", str(exc))
    numbers = "; ".join([numbers, *notes])
    if result == "unresolved":
        return Decision(claim, "not testable", "unresolved: the interval spans the claim's "
                        "bound", numbers, minmax)
    return Decision(claim, result, "", numbers, minmax)


def _reference_beyond_the_bar(rows: pl.DataFrame, claim: Claim, cell: Cell, r: Regime
                              ) -> str | None:
    """Why no model the claim is about can be learned here, where that is so: the claim
    compares the model with a reference on its own prompts declared the optimum of its class
    (`reference_is_optimum`: f_L*), and the reference itself does not clear the learned bar
    (errors, the gate reading the claim's own metric). None otherwise (the model simply did
    not learn; a baseline such as GD after t steps says nothing of what a model can reach)."""
    if not claim.reference_is_optimum or r.trivial is None or is_r2(claim.metric) or \
            (claim.gate_metric or claim.metric) != claim.metric or \
            (claim.gate_statistic or claim.statistic) != claim.statistic:
        return None
    try:
        ref = seed_values(rows, claim, cell, claim.reference, claim.reference_where)
    except Undecidable:
        return None
    if not ref:
        return None
    level = sorted(ref.values())[len(ref) // 2]
    bar = excess_bar(r.trivial, r.floor)
    if not math.isfinite(level) or level <= bar:
        return None
    return (f"{r.text()}; the reference {claim.reference} on the same prompts is itself at "
            f"{level:.3g}, above the bar {bar:.3g}: no model of the class can be learned here")


def _in_evidence(rows: pl.DataFrame, cell: Cell) -> bool:
    """Some row of any status was written for the cell's config (its iteration columns left
    out): if none, the cell is missing evidence, not a result."""
    where = {c: v for c, v in cell.where.items() if c not in ITER_COLUMNS}
    if any(c not in rows.columns for c in where):
        return False
    return rows.filter(pl.all_horizontal([pl.col(c) == v for c, v in where.items()])
                       if where else pl.lit(True)).height > 0


def _combine(claim: Claim, parts: list[Decision]) -> Decision:
    outcomes = [p.outcome for p in parts]
    numbers = "; ".join(f"{p.claim.figure}: {p.outcome}" for p in parts)  # each part: its row
    if "evidence pending" in outcomes:  # decided when every part is: no early "partly"
        pending = sum(o == "evidence pending" for o in outcomes)
        return Decision(claim, "evidence pending", f"{pending} of {len(parts)} parts pending",
                        numbers, "", tuple(parts))
    if claim.parts_rule == "first" and outcomes[0] == "reproduced":
        return Decision(claim, "reproduced", "", numbers, "", tuple(parts))
    if all(o == "reproduced" for o in outcomes):
        return Decision(claim, "reproduced", "", numbers, "", tuple(parts))
    if "reproduced" in outcomes:
        return Decision(claim, "partly", "parts: " + ", ".join(outcomes), numbers, "",
                        tuple(parts))
    if "not reproduced" in outcomes:
        return Decision(claim, "not reproduced", "parts: " + ", ".join(outcomes), numbers, "",
                        tuple(parts))
    first = next(o for o in OUTCOMES[3:] if o in outcomes)
    reason = next(p.reason for p in parts if p.outcome == first)
    return Decision(claim, first, reason, numbers, "", tuple(parts))
