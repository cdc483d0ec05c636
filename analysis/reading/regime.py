"""The learned-regime bar, stated once (the verdict engine, analysis.claims.engine, applies it
to every trained cell before any comparison; figures ring the cells that fail it):

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

    table = learned_regime(rows, by=["model.mixer", "model.depth"])   # one row per cell
    regime_notes(table, group="model.mixer", x="model.depth")         # lines for a panel
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from analysis.reading.spreads import seed_spreads

LEARNED_ERROR_RATIO = 0.1  # error: model <= 0.1 x the best trivial predictor's error
LEARNED_R2_GAP = 0.05  # R²: model >= the best trivial predictor's R² + 0.05
THRESHOLD_RATIO = 0.5  # threshold claims: t <= 0.5 x the best trivial predictor's error

TRIVIAL = ("zero", "prompt_mean", "ridge", "no_retrieval")  # predictors that learn nothing
TRIVIAL_NAMES = {"zero": "zero", "prompt_mean": "prompt mean", "ridge": "ridge",
                 "no_retrieval": "no retrieval"}
RIDGE_SOLVES = ("linear_regression", "ls_features")  # tasks ridge solves: a reference there
R2_METRICS = ("r2",)
NOT_TESTABLE = "not testable at this scale"  # the verdict where the bar is not cleared
FLOOR = "floor"  # the predictor of floor rows (icl_core.algorithms.floor.FLOOR); not part of the bar
# reach of a cell's bar: the floor clears today's bar | only the bar on the excess over the
# floor can be cleared (today's lies beyond the floor) | no predictor can clear the bar
REACH = ("reachable", "excess only", "out of reach")
OUT_OF_REACH = "bar out of reach: this setting cannot test the claim"
SEED_COLUMNS = ("seed", "task_seed", "eval.seed", "config_hash")


def _name(predictor: str | None) -> str:
    return TRIVIAL_NAMES.get(predictor or "", predictor or "?")


def is_r2(metric: str) -> bool:
    return metric in R2_METRICS


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


def excess_bar(trivial, floor=None, r2: bool = False):
    """The bar a model must clear, on the excess over the floor (the rule in this module's docstring;
    floats or Polars expressions). error: model − floor <= LEARNED_ERROR_RATIO x (trivial −
    floor), i.e. bar = floor + 0.1 (trivial − floor); R² (floor = the ceiling c): model −
    trivial >= LEARNED_R2_GAP x (c − trivial) / (1 − trivial). With floor 0 / ceiling 1 (and
    None, the default) exactly today's bars 0.1 x trivial / trivial + 0.05."""
    if r2:
        c = 1.0 if floor is None else floor
        return trivial + LEARNED_R2_GAP * ((c - trivial) / (1.0 - trivial))  # c = 1: exact
    f = 0.0 if floor is None else floor
    return f + LEARNED_ERROR_RATIO * (trivial - f)


def bar_reach(trivial: float, floor: float | None, r2: bool) -> str:
    """One of `REACH` for a cell with best trivial level `trivial` and floor (error) or
    ceiling (R²) `floor` (None: 0 / 1)."""
    if r2:
        c = 1.0 if floor is None else floor
        if c >= trivial + LEARNED_R2_GAP:
            return REACH[0]
        return REACH[1] if trivial < c and trivial <= 1.0 - LEARNED_R2_GAP else REACH[2]
    f = 0.0 if floor is None else floor
    if f <= LEARNED_ERROR_RATIO * trivial:
        return REACH[0]
    return REACH[1] if trivial > f else REACH[2]


def _median_level(rows: pl.DataFrame, keys: list[str], predictor: str) -> pl.DataFrame:
    """Seed-median per (keys, predictor) of the per-seed medians of `rows`."""
    seed = ["seed"] if "seed" in rows.columns else []
    return (rows.group_by(*keys, "predictor", *seed).agg(pl.col("value").median())
            .group_by(*keys, "predictor").agg(pl.col("value").median())
            .rename({"predictor": predictor}))


def bar_levels(frame: pl.DataFrame, keys: Sequence[str], r2: bool) -> pl.DataFrame:
    """Per cell (`keys`, >= 1 column) of rows already picked (one metric, statistic, position): the best
    trivial predictor of the bar (trivial_predictor, trivial), the floor (null: none
    reported), raw_bar (today's: 0.1 x trivial / trivial + 0.05), bar (`excess_bar`) and
    reach (`REACH`). Used by `learned_regime` and by `icl levels` (no model rows)."""
    keys = list(keys)
    best = (_median_level(_bar_rows(frame), keys, "trivial_predictor")
            # ties (two trivial predictors at one level) go by name, not by group order
            .sort(pl.col("value"), pl.col("trivial_predictor").cast(pl.String),
                  descending=[r2, False], nulls_last=True)
            .group_by(keys, maintain_order=True).first().rename({"value": "trivial"}))
    if best.height == 0:
        best = best.cast({"trivial_predictor": pl.String, "trivial": pl.Float64})
    floor = _median_level(frame.filter(pl.col("predictor") == FLOOR), keys, "_p").select(
        *keys, pl.col("value").cast(pl.Float64).alias("floor"))
    table = best.join(floor, on=keys, how="left", nulls_equal=True)
    t, f = pl.col("trivial"), pl.col("floor")
    raw = t + LEARNED_R2_GAP if r2 else t * LEARNED_ERROR_RATIO
    table = table.with_columns(raw.alias("raw_bar"),
                               excess_bar(t, f.fill_null(1.0 if r2 else 0.0), r2).alias("bar"))
    reach = [bar_reach(tv, fv, r2) if tv is not None else None
             for tv, fv in zip(table["trivial"], table["floor"], strict=True)]
    return table.with_columns(pl.Series("reach", reach, dtype=pl.String))


def learned_regime(rows: pl.DataFrame, by: Sequence[str] | None = None, metric: str = "mse",
                   statistic: str | None = None, test_dist: str | None = "train",
                   position: str = "last", final: bool = True) -> pl.DataFrame:
    """Per cell (`by`: config columns, default `config_axes`; seeds aggregated): is the model in
    the learned regime? Columns: by..., metric, statistic, n_seeds, model (seed-median),
    model_min, model_max, trivial_predictor (the best of the bar), trivial (its
    seed-median), floor (the task's floor row, seed-median; null: none, taken as 0 error /
    R² 1), raw_bar (today's bar: error 0.1 x trivial; R² trivial + 0.05), bar (the bar on
    the excess over the floor, `excess_bar`: = raw_bar without a floor), reach (`REACH`),
    margin (error: (model − floor) / (trivial − floor), = model / trivial without a floor;
    R²: model − trivial), learned (model clears `bar`; False where the bar is out of reach;
    null: no trivial rows in the cell), regime (text).

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
    table = cells.join(bar_levels(frame, keys, r2), on=keys, how="left", nulls_equal=True)
    m, t, f = pl.col("model"), pl.col("trivial"), pl.col("floor")
    if r2:
        table = table.with_columns((m - t).alias("margin"))
        learned = m >= pl.col("bar")
    else:
        f0 = f.fill_null(0.0)
        table = table.with_columns(pl.when(t > f0).then((m - f0) / (t - f0)).alias("margin"))
        learned = m <= pl.col("bar")
    learned = learned & (pl.col("reach") != REACH[2])
    table = table.with_columns(pl.when(t.is_not_null()).then(learned).alias("learned"),
                               pl.lit(metric).alias("metric"), pl.lit(statistic).alias("statistic"))
    table = table.with_columns(pl.Series("regime", [
        Regime.from_row(r).text() for r in table.iter_rows(named=True)], dtype=pl.String))
    cols = [*keys, "metric", "statistic", "n_seeds", "model", "model_min", "model_max",
            "trivial_predictor", "trivial", "floor", "raw_bar", "bar", "reach", "margin",
            "learned", "regime"]
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
    floor: float | None = None  # the task's floor (error) / ceiling (R²); None: 0 / 1
    reach: str | None = None  # one of REACH (None: not computed, e.g. a threshold claim)

    @classmethod
    def from_row(cls, row: dict, label: str = "") -> Regime:
        return cls(learned=row.get("learned"), model=row.get("model", math.nan),
                   trivial=row.get("trivial"), trivial_predictor=row.get("trivial_predictor"),
                   metric=row.get("metric", "mse"), label=label, n_seeds=row.get("n_seeds") or 0,
                   floor=row.get("floor"), reach=row.get("reach"))

    @property
    def out_of_reach(self) -> bool:
        return self.reach == REACH[2]

    def levels(self) -> str:
        """'best trivial prompt mean 0.94, floor 0.51, bar 0.094' (R²: ceiling)."""
        r2 = is_r2(self.metric)
        bound = "ceiling" if r2 else "floor"
        level = f"{self.floor:.3g}" if self.floor is not None else \
            f"{1 if r2 else 0} (none reported)"
        raw = self.trivial + LEARNED_R2_GAP if r2 else self.trivial * LEARNED_ERROR_RATIO
        return (f"best trivial {_name(self.trivial_predictor)} {self.trivial:.3g}, {bound} "
                f"{level}, bar {raw:.3g}")

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
        if self.out_of_reach:
            return f"{who}{OUT_OF_REACH} ({self.levels()})"
        need = "needs" if not self.learned else "bar"
        beyond = "; today's bar lies beyond it" if self.reach == REACH[1] else ""
        if is_r2(self.metric):
            gap = excess_bar(self.trivial, self.floor, r2=True) - self.trivial
            over = f"; ceiling {self.floor:.3g}{beyond}" if self.floor is not None else ""
            return (f"{who}{state}: R² {self.model:.3g} vs {name} {self.trivial:.3g} (gap "
                    f"{self.model - self.trivial:+.3f}; {need} >= +{gap:.3g}{over})")
        f = self.floor or 0.0
        ratio = (self.model - f) / (self.trivial - f) if self.trivial > f else math.inf
        if self.floor:
            return (f"{who}{state}: {self.model:.3g}, over the floor {f:.3g}: {ratio:.2g}x "
                    f"{name}'s excess {self.trivial - f:.3g} ({need} <= "
                    f"{LEARNED_ERROR_RATIO:g}x{beyond})")
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
    (median: best 0.26x prompt mean; needs <= 0.1x)" for each group with no learned cell,
    "<group>: bar out of reach: this setting cannot test the claim (best trivial ..., floor
    ..., bar ...)" for a group whose every cell's bar is out of reach, "<group>: learned only
    at <x> = 2, 4" for a group learned at some cells only; [] when every cell is learned or
    no trivial rows exist."""
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
            reach = part["reach"] if "reach" in part.columns else None
            if reach is not None and (reach == REACH[2]).all():
                lines.append(f"{who}{OUT_OF_REACH} ({Regime.from_row(part.row(0, named=True)).levels()})")
                continue
            if reach is not None:
                part = part.filter(pl.col("reach") != REACH[2])
            r2 = is_r2(part["metric"][0])
            best = part.sort("margin", descending=r2, nulls_last=True).row(0, named=True)
            regime = Regime.from_row(best)
            stat = best["statistic"]
            floor = best.get("floor")
            if r2:
                gap = best["bar"] - best["trivial"] if best.get("bar") is not None \
                    else LEARNED_R2_GAP
                bar = (f"{stat} R² gap {best['margin']:+.3f} over "
                       f"{_name(regime.trivial_predictor)}; needs >= +{gap:.3g}")
            else:
                over = f" over the floor {floor:.3g}" if floor else ""
                bar = (f"{stat}: best {best['margin']:.2g}x {_name(regime.trivial_predictor)}"
                       f"{over}; needs <= {LEARNED_ERROR_RATIO:g}x")
            lines.append(f"{who}{NOT_TESTABLE} ({bar})")
        elif x is not None and not part["learned"].all():
            at = ", ".join(f"{v:g}" for v in part.filter(pl.col("learned"))[x].to_list())
            lines.append(f"{who}learned only at {x} = {at}")
    return lines
