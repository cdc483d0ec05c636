"""Verdicts that can fail: when a claim may be judged, and how. The rules, stated once
(docs/REPRODUCTION.md quotes them; figures and reports use these constants):

* **Learned regime.** A claim about a trained model is judged only where the model is clearly
  better than the best trivial predictor on the same test prompts (rows whose `predictor` is
  one of `TRIVIAL`; seed-medians of the same statistic, metric, position and step):
  error metrics (lower is better): model error <= LEARNED_ERROR_RATIO = 0.1 x the best
  trivial error; R² (higher is better): model R² >= the best trivial R² + LEARNED_R2_GAP =
  0.05; a threshold claim (samples to reach error t): t <= THRESHOLD_RATIO = 0.5 x the best
  trivial error. Otherwise the verdict is "not testable at this scale", never "reproduced"
  or "partly reproduced". Ridge is part of the bar only on tasks it does not solve: on the
  linear tasks (`RIDGE_SOLVES`) it is the task's own solution, a reference like OLS.
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

    table = learned_regime(rows, by=["model.mixer", "model.depth"])   # one row per cell
    v = verdict("gap", a=spread(transformer), b=spread(baseconv), factor=100,
                regimes=[Regime.from_row(r) for r in table.iter_rows(named=True)],
                names=("Transformer", "BaseConv"))
    print(v)   # "not testable at this scale: BaseConv not learned: 0.78 = 0.26x prompt mean..."
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from analysis.fit import fit_status
from analysis.fit_result import exponents

__all__ = ["LEARNED_ERROR_RATIO", "LEARNED_R2_GAP", "MIN_SEEDS", "OUTCOMES", "PARTLY_LOG_FRACTION",
           "RIDGE_SOLVES", "SPREAD", "THRESHOLD_RATIO", "TRIVIAL", "Ordering", "Regime",
           "Spread", "Verdict", "config_axes", "final_rows", "fit_status", "learned_regime",
           "ordering", "regime_notes", "seed_spreads", "spread", "threshold_regime",
           "trivial_levels", "verdict"]

LEARNED_ERROR_RATIO = 0.1  # error: model <= 0.1 x the best trivial predictor's error
LEARNED_R2_GAP = 0.05  # R²: model >= the best trivial predictor's R² + 0.05
THRESHOLD_RATIO = 0.5  # threshold claims: t <= 0.5 x the best trivial predictor's error
MIN_SEEDS = 3  # seeds per side before a comparison is judged
SPREAD = "min-max"  # a cell's spread over seeds: the range of its seed values
PARTLY_LOG_FRACTION = 0.5  # "partly": half the claimed orders (gap), twice them (within)

TRIVIAL = ("zero", "prompt_mean", "ridge", "no_retrieval")  # predictors that learn nothing
TRIVIAL_NAMES = {"zero": "zero", "prompt_mean": "prompt mean", "ridge": "ridge",
                 "no_retrieval": "no retrieval"}
RIDGE_SOLVES = ("linear_regression", "ls_features")  # tasks ridge solves: a reference there
R2_METRICS = ("r2",)
OUTCOMES = ("reproduced", "partly reproduced", "not reproduced", "not testable at this scale")
NOT_TESTABLE = OUTCOMES[3]
SEED_COLUMNS = ("seed", "task_seed", "eval.seed", "config_hash")


def _name(predictor: str | None) -> str:
    return TRIVIAL_NAMES.get(predictor or "", predictor or "?")


def is_r2(metric: str) -> bool:
    return metric in R2_METRICS


# ------------------------------------------------------------------------------- seeds


@dataclass(frozen=True)
class Spread:
    """One cell's values over seeds (`fixed`: a reference level, no seeds needed)."""

    values: tuple[float, ...]
    fixed: bool = False

    @property
    def n(self) -> int:
        return len(self.values)

    def _q(self, q: float) -> float:
        return float(np.percentile(self.values, q)) if self.values else math.nan

    @property
    def median(self) -> float:
        return self._q(50)

    @property
    def min(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def max(self) -> float:
        return max(self.values) if self.values else math.nan

    @property
    def q25(self) -> float:
        return self._q(25)

    @property
    def q75(self) -> float:
        return self._q(75)

    def text(self) -> str:
        if self.fixed or self.n == 1:
            return f"{self.median:.3g}"
        return f"{self.median:.3g} [{self.min:.3g}, {self.max:.3g}] ({self.n} seeds, {SPREAD})"


def spread(values, fixed: bool = False) -> Spread:
    """A Spread of seed values (NaN dropped); a plain number is a fixed reference level."""
    if isinstance(values, Spread):
        return values
    if isinstance(values, (int, float)):
        return Spread((float(values),), fixed=True)
    vals = tuple(float(v) for v in np.asarray(values, dtype=float).ravel() if not math.isnan(v))
    return Spread(vals, fixed)


def seed_spreads(frame: pl.DataFrame, by: Sequence[str], value: str = "value",
                 seed: str = "seed") -> pl.DataFrame:
    """Per cell (`by`): n_seeds, min, q25, median, q75, max of the seed values (a seed's value
    is the median over the rows it has in the cell) and `values` (the list), sorted by `by`."""
    keys = [*by] or ["_cell"]
    frame = frame if by else frame.with_columns(pl.lit("all").alias("_cell"))
    per_seed = frame.group_by(*keys, seed).agg(pl.col(value).median())
    v = pl.col(value)
    out = per_seed.group_by(keys).agg(
        pl.col(seed).n_unique().alias("n_seeds"), v.min().alias("min"),
        v.quantile(0.25, "linear").alias("q25"), v.median().alias("median"),
        v.quantile(0.75, "linear").alias("q75"), v.max().alias("max"),
        v.sort().alias("values")).sort(keys, nulls_last=True)
    return out if by else out.drop("_cell")


# ------------------------------------------------------------------------------ regime


def final_rows(rows: pl.DataFrame, metric: str = "mse", test_dist: str | None = "train",
               position: str = "last") -> pl.DataFrame:
    """Rows of ok members at each member's last step (every predictor), headline rows only
    (no infer_iter / loop_iter); position "last": each member's last position (the query),
    "all": every position."""
    out = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == metric))
    if test_dist is not None and "test_dist" in out.columns:
        out = out.filter(pl.col("test_dist") == test_dist)
    for col in ("infer_iter", "loop_iter"):
        if col in out.columns:
            out = out.filter(pl.col(col).is_null())
    out = out.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    if position == "last" and "position" in out.columns:
        pos = pl.col("position").fill_null(-1)
        out = out.filter(pos == pos.max().over("config_hash"))
    return out


def config_axes(rows: pl.DataFrame) -> list[str]:
    """Config columns ('model.depth', 'dtype', ...) that differ among the model's rows,
    seeds left out: the default cells of `learned_regime`."""
    model = rows.filter(pl.col("predictor") == "model") if "predictor" in rows.columns else rows
    out = []
    for name, dtype in model.schema.items():
        if ("." not in name and name != "dtype") or name in SEED_COLUMNS or "seed" in name:
            continue
        if dtype.is_nested() or dtype == pl.Null:
            continue
        if model[name].n_unique() > 1:
            out.append(name)
    return out


def _bar_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """Trivial-predictor rows that make the bar (ridge left out on tasks it solves)."""
    triv = frame.filter(pl.col("predictor").is_in(list(TRIVIAL)))
    if "task.name" in triv.columns:
        triv = triv.filter((pl.col("predictor") != "ridge")
                           | ~pl.col("task.name").is_in(list(RIDGE_SOLVES)).fill_null(False))
    return triv


def default_statistic(frame: pl.DataFrame) -> str:
    stats = set(frame.filter(pl.col("predictor") == "model")["statistic"].unique().to_list())
    return next((s for s in ("median", "mean", "pooled") if s in stats), sorted(stats or {""})[0])


def learned_regime(rows: pl.DataFrame, by: Sequence[str] | None = None, metric: str = "mse",
                   statistic: str | None = None, test_dist: str | None = "train",
                   position: str = "last", final: bool = True) -> pl.DataFrame:
    """Per cell (`by`: config columns, default `config_axes`; seeds aggregated): is the model in
    the learned regime? Columns: by..., metric, statistic, n_seeds, model (seed-median),
    model_min, model_max, trivial_predictor (the best of the bar), trivial (its
    seed-median), bar (error: 0.1 x trivial; R²: trivial + 0.05), margin (error: model /
    trivial; R²: model - trivial), learned (null: no trivial rows in the cell), regime (text).

    rows: raw rows (final=True: `final_rows` picks each member's last step and position;
    position="all" keeps every position, add "position" to `by`), or rows already picked
    (final=False)."""
    frame = final_rows(rows, metric, test_dist, position) if final else rows.filter(
        pl.col("metric") == metric)
    r2 = is_r2(metric)
    by = list(by) if by is not None else config_axes(frame)
    keys = by or ["_cell"]
    if not by:
        frame = frame.with_columns(pl.lit("all").alias("_cell"))
    statistic = statistic or default_statistic(frame)
    frame = frame.filter(pl.col("statistic") == statistic)
    model = frame.filter(pl.col("predictor") == "model")
    cells = seed_spreads(model, keys).select(
        *keys, "n_seeds", pl.col("median").alias("model"), pl.col("min").alias("model_min"),
        pl.col("max").alias("model_max"))
    triv = _bar_rows(frame)
    best = (triv.group_by(*keys, "predictor", "seed").agg(pl.col("value").median())
            .group_by(*keys, "predictor").agg(pl.col("value").median())
            .sort("value", descending=r2, nulls_last=True)
            .group_by(keys, maintain_order=True).first()
            .rename({"predictor": "trivial_predictor", "value": "trivial"}))
    if best.height == 0:
        best = best.cast({"trivial_predictor": pl.String, "trivial": pl.Float64})
    table = cells.join(best, on=keys, how="left", nulls_equal=True)
    m, t = pl.col("model"), pl.col("trivial")
    if r2:
        table = table.with_columns((t + LEARNED_R2_GAP).alias("bar"), (m - t).alias("margin"))
        learned = m >= pl.col("bar")
    else:
        table = table.with_columns((t * LEARNED_ERROR_RATIO).alias("bar"),
                                   pl.when(t > 0).then(m / t).alias("margin"))
        learned = m <= pl.col("bar")
    table = table.with_columns(pl.when(t.is_not_null()).then(learned).alias("learned"),
                               pl.lit(metric).alias("metric"), pl.lit(statistic).alias("statistic"))
    table = table.with_columns(pl.Series("regime", [
        Regime.from_row(r).text() for r in table.iter_rows(named=True)], dtype=pl.String))
    cols = [*keys, "metric", "statistic", "n_seeds", "model", "model_min", "model_max",
            "trivial_predictor", "trivial", "bar", "margin", "learned", "regime"]
    table = table.select(cols).sort(keys, nulls_last=True)
    return table if by else table.drop("_cell")


@dataclass(frozen=True)
class Regime:
    """One cell's learned-regime check (a row of `learned_regime`, or `threshold_regime`)."""

    learned: bool | None  # None: no trivial-predictor rows to check against
    model: float
    trivial: float | None = None
    trivial_predictor: str | None = None
    metric: str = "mse"
    label: str = ""
    n_seeds: int = 0
    threshold: float | None = None  # a threshold claim's t (then `model` is unused)

    @classmethod
    def from_row(cls, row: dict, label: str = "") -> Regime:
        return cls(learned=row.get("learned"), model=row.get("model", math.nan),
                   trivial=row.get("trivial"), trivial_predictor=row.get("trivial_predictor"),
                   metric=row.get("metric", "mse"), label=label, n_seeds=row.get("n_seeds") or 0)

    def text(self) -> str:
        who = f"{self.label}: " if self.label else ""
        if self.learned is None or self.trivial is None:
            return f"{who}regime unknown (no trivial-predictor rows)"
        name = _name(self.trivial_predictor)
        state = "learned" if self.learned else "not learned"
        if self.threshold is not None:
            need = f"needs <= {THRESHOLD_RATIO:g}x" if not self.learned else f"<= {THRESHOLD_RATIO:g}x"
            return (f"{who}threshold {self.threshold:.3g} = {self.threshold / self.trivial:.2g}x "
                    f"{name} {self.trivial:.3g} ({need})")
        if is_r2(self.metric):
            need = "needs" if not self.learned else "bar"
            return (f"{who}{state}: R² {self.model:.3g} vs {name} {self.trivial:.3g} (gap "
                    f"{self.model - self.trivial:+.3f}; {need} >= +{LEARNED_R2_GAP:g})")
        ratio = self.model / self.trivial if self.trivial > 0 else math.inf
        need = "needs" if not self.learned else "bar"
        return (f"{who}{state}: {self.model:.3g} = {ratio:.2g}x {name} {self.trivial:.3g} "
                f"({need} <= {LEARNED_ERROR_RATIO:g}x)")


def threshold_regime(threshold: float, trivial: float | None, predictor: str | None = None,
                     label: str = "") -> Regime:
    """Is a threshold claim (samples to reach error <= t) testable: t <= 0.5 x the best trivial
    error? (learned None without a trivial level)."""
    ok = None if trivial is None or not math.isfinite(trivial) else \
        threshold <= THRESHOLD_RATIO * trivial
    return Regime(learned=ok, model=math.nan, trivial=trivial, trivial_predictor=predictor,
                  label=label, threshold=threshold)


def trivial_levels(final: pl.DataFrame, statistic: str = "median",
                   by: Sequence[str] = ()) -> pl.DataFrame:
    """Each trivial predictor's level in these rows: (by..., predictor, value) = the median
    over members of `statistic` (empty when the rows have none, e.g. an old store)."""
    triv = final.filter(pl.col("predictor").is_in(list(TRIVIAL))
                        & (pl.col("statistic") == statistic))
    out = triv.group_by(*by, "predictor").agg(pl.col("value").median())
    return out.sort([*by, "predictor"])


def regime_notes(table: pl.DataFrame, group: str | None = None, x: str | None = None
                 ) -> list[str]:
    """Lines for a panel from a `learned_regime` table: "<group>: not testable at this scale
    (median: best 0.26x prompt mean; needs <= 0.1x)" for each group with no learned cell, "<group>:
    learned only at <x> = 2, 4" for a group learned at some cells only; [] when every cell
    is learned or no trivial rows exist."""
    if table.height == 0 or table["learned"].null_count() == table.height:
        return []
    lines = []
    groups = table.partition_by(group, maintain_order=True) if group else [table]
    for part in groups:
        part = part.filter(pl.col("learned").is_not_null())
        if part.height == 0:
            continue
        who = f"{part[group][0]}: " if group else ""
        if not part["learned"].any():
            r2 = is_r2(part["metric"][0])
            best = part.sort("margin", descending=r2, nulls_last=True).row(0, named=True)
            regime = Regime.from_row(best)
            stat = best["statistic"]
            bar = (f"{stat} R² gap {best['margin']:+.3f} over "
                   f"{_name(regime.trivial_predictor)}; needs >= +{LEARNED_R2_GAP:g}") if r2 \
                else (f"{stat}: best {best['margin']:.2g}x {_name(regime.trivial_predictor)}; "
                      f"needs <= {LEARNED_ERROR_RATIO:g}x")
            lines.append(f"{who}{NOT_TESTABLE} ({bar})")
        elif x is not None and not part["learned"].all():
            at = ", ".join(f"{v:g}" for v in part.filter(pl.col("learned"))[x].to_list())
            lines.append(f"{who}learned only at {x} = {at}")
    return lines


# ----------------------------------------------------------------------------- verdicts


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
    reason: str = "judged"  # judged | not learned | regime unknown | seeds | unresolved | fit

    def __str__(self) -> str:
        return f"{self.outcome}: {self.evidence}"


def _regime_gate(regimes: Sequence) -> Verdict | None:
    """'not testable' when a model the claim rests on is not (known to be) learned."""
    for r in regimes:
        r = r if isinstance(r, Regime) else Regime.from_row(r)
        if r.learned is None:
            return Verdict(NOT_TESTABLE, r.text(), "regime unknown")
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

