"""The learned-regime bar (the rule is stated in analysis.verdicts): a claim about a trained
model is judged only where the model is clearly better than the best trivial predictor on
the same test prompts: error <= LEARNED_ERROR_RATIO x the best trivial error, R² >= the best
trivial R² + LEARNED_R2_GAP, a threshold t <= THRESHOLD_RATIO x the best trivial error; ridge
is part of the bar only on tasks it does not solve (`RIDGE_SOLVES`).

    table = learned_regime(rows, by=["model.mixer", "model.depth"])   # one row per cell
    regime_notes(table, group="model.mixer", x="model.depth")         # lines for a panel
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from analysis.spreads import seed_spreads

LEARNED_ERROR_RATIO = 0.1  # error: model <= 0.1 x the best trivial predictor's error
LEARNED_R2_GAP = 0.05  # R²: model >= the best trivial predictor's R² + 0.05
THRESHOLD_RATIO = 0.5  # threshold claims: t <= 0.5 x the best trivial predictor's error

TRIVIAL = ("zero", "prompt_mean", "ridge", "no_retrieval")  # predictors that learn nothing
TRIVIAL_NAMES = {"zero": "zero", "prompt_mean": "prompt mean", "ridge": "ridge",
                 "no_retrieval": "no retrieval"}
RIDGE_SOLVES = ("linear_regression", "ls_features")  # tasks ridge solves: a reference there
R2_METRICS = ("r2",)
NOT_TESTABLE = "not testable at this scale"  # the verdict where the bar is not cleared
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
