"""Data shaping shared by the figure modules (no drawing here): which members count (status
"ok"), each member's final evaluation, the reference predictors' levels, readable hue labels,
seed-level and cell-level tables, and the learned-regime check of a panel's cells.
"""

from __future__ import annotations

import math
import warnings

import polars as pl

from analysis.reading.regime import FLOOR, TRIVIAL, learned_regime
from analysis.reading.store import member_statuses

# the classical references on the same test prompts (drawn in their analysis.plotting.LOOKS)
REFERENCES = ("ols_float32", "ols_float64", "gd_float32", "gd_float64")
GD = ("gd_float32", "gd_float64")
OLS = ("ols_float32", "ols_float64")
STATS = ("median", "q25", "q75")  # statistics over test prompts a band needs
BASE_COLUMNS = ("config_hash", "status", "seed", "metric", "statistic", "value", "step",
                "position", "test_dist", "predictor")
# What every figure reads (the row columns and the config columns of the study title and
# the reference levels), and what the shared helpers here, analysis.reading.regime and
# analysis.plotting may read besides (hue labels, learned-regime cells, seeds): a figure
# module's COLUMNS add to both, or to the first only where its module says NARROW_COLUMNS
# (analysis.figures.figure_columns). A declared column a store lacks is simply not read.
SHARED_COLUMNS = (*BASE_COLUMNS, "sweep", "study", "infer_iter", "loop_iter", "dtype",
                  "task.name", "task.dim", "task.noise_std")
HELPER_COLUMNS = ("member", "task_seed", "prompt_len", "eval.seed", "model.name",
                  "model.mixer", "model.depth", "model.construction_layers",
                  "model.layer_norm", "task.op", "task.features")
PLAIN_HUES = ("model.mixer", "model.name", "task.op", "dtype", "predictor")
__all__ = ["BASE_COLUMNS", "GD", "HELPER_COLUMNS", "OLS", "REFERENCES", "SHARED_COLUMNS", "STATS", "cell_regime", "excluded_note",
           "final_eval", "labels", "last_step", "levels", "member_counts", "members", "number",
           "reference_levels", "require", "short", "var_y", "warn_pooled", "with_hue"]


def member_counts(rows: pl.DataFrame) -> tuple[int, int]:
    """(members with status "ok", members excluded: diverged or failed)."""
    status = member_statuses(rows)
    ok = int((status == "ok").sum())
    return ok, status.len() - ok


def members(rows: pl.DataFrame, figure: str) -> tuple[int, int]:
    """(ok, excluded) member counts; ValueError when no member is ok."""
    ok, excluded = member_counts(rows)
    if ok == 0:
        raise ValueError(f"{figure} figure: no ok members ({excluded} excluded: "
                         f"diverged/failed/pruned)")
    return ok, excluded


def excluded_note(excluded: int) -> list[str]:
    return [f"{excluded} member(s) excluded (not ok: diverged/failed)"] if excluded else []


def require(rows: pl.DataFrame, figure: str, columns) -> None:
    """ValueError naming the figure and every column the rows lack."""
    missing = [c for c in (*BASE_COLUMNS, *columns) if c not in rows.columns]
    if missing:
        raise ValueError(f"{figure} figure: rows lack the column(s) "
                         f"{', '.join(repr(c) for c in missing)}")


def _at_last_step(metric: str, test_dist: str) -> pl.Expr:
    """Rows of `ok` members with `metric` on `test_dist` at each member's last step among those
    rows: one predicate (a filter with it makes one copy, the result's; at 100,000 members the
    rows are millions and nearly all final: benchmarks/store_scale.py)."""
    kept = ((pl.col("status") == "ok") & (pl.col("metric") == metric)
            & (pl.col("test_dist") == test_dist))
    return kept & (pl.col("step") == pl.when(kept).then(pl.col("step")).max().over("config_hash"))


def final_eval(rows: pl.DataFrame, metric: str = "mse", test_dist: str = "train") -> pl.DataFrame:
    """Rows of `ok` members at each member's last evaluated step and its last position
    (the query after all in-context examples)."""
    last = _at_last_step(metric, test_dist)  # lazily, its window is computed once
    position = pl.col("position").fill_null(-1)
    return rows.lazy().filter(
        last & (position == pl.when(last).then(position).max().over("config_hash"))).collect()


def last_step(rows: pl.DataFrame, metric: str) -> pl.DataFrame:
    """Rows of ok members at each member's last evaluated step, every position."""
    return rows.filter(_at_last_step(metric, "train"))


def reference_levels(final: pl.DataFrame, names=REFERENCES, statistic: str = "median"
                     ) -> dict[str, tuple[float, int | None]]:
    """{predictor: (per-prompt `statistic` over members' median, GD iterations or None)};
    iterative predictors at their largest iteration count (the converged reference)."""
    it = pl.col("infer_iter").fill_null(-1)
    refs = final.filter(pl.col("predictor").is_in(list(names))
                        & (pl.col("statistic") == statistic))
    refs = refs.filter(it == it.max().over("predictor"))
    levels_ = refs.group_by("predictor").agg(pl.col("value").median(), pl.col("infer_iter").max())
    return {r["predictor"]: (r["value"], r["infer_iter"]) for r in levels_.iter_rows(named=True)}


def var_y(rows: pl.DataFrame) -> float:
    """Var(y) of linear regression with x, w ~ N(0, I_D): D (+ noise_std^2); NaN if unknown."""
    if "task.dim" not in rows.columns:
        return math.nan
    needed = [c for c in ("status", "task.dim", "task.noise_std") if c in rows.columns]
    ok = rows.select(needed).filter(pl.col("status") == "ok")  # never a copy of every column
    dims = ok["task.dim"].drop_nulls().unique().to_list()
    noises = [0.0]
    if "task.noise_std" in ok.columns:
        noises = ok["task.noise_std"].drop_nulls().unique().to_list() or [0.0]
    if len(dims) != 1 or len(noises) != 1:
        warnings.warn(f"Var(y): members differ (task.dim {dims}, noise_std {noises})", stacklevel=2)
        return math.nan
    return float(dims[0]) + float(noises[0]) ** 2


def labels(rows: pl.DataFrame, column: str) -> str:
    """The column's distinct values joined by '/' ('?' if none)."""
    if column not in rows.columns:
        return "?"
    return "/".join(str(v) for v in sorted(rows[column].drop_nulls().unique().to_list())) or "?"


def short(column: str) -> str:
    return column.rsplit(".", 1)[-1]


def number(value: float) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() else value


def _hue_part(column: str) -> pl.Expr:
    """One column's share of a hue label (null: left out of the label)."""
    c = pl.col(column)
    if column == "model.layer_norm":
        return (pl.when(c.is_null()).then(pl.lit(None, pl.String))
                .when(c.cast(pl.Boolean)).then(pl.lit("LN on")).otherwise(pl.lit("LN off")))
    if column == "task.features":
        return pl.lit("k=") + c.cast(pl.String)
    if column == "model.construction_layers":  # trained from scratch: nothing to add
        return pl.when(c > 0).then(pl.lit("frozen k=") + c.cast(pl.String))
    if column in PLAIN_HUES:
        return c.cast(pl.String)
    return pl.lit(f"{short(column)}=") + c.cast(pl.String)


def with_hue(frame: pl.DataFrame, hue: tuple[str, ...]) -> tuple[pl.DataFrame, list[str]]:
    """frame with a readable "hue" label column ("baseconv, LN off", "attention, k=1"), and
    the labels in the order of the hue columns' values."""
    if not hue:
        return frame.with_columns(pl.lit("model").alias("hue")), ["model"]
    label = pl.concat_str([_hue_part(c) for c in hue], separator=", ", ignore_nulls=True)
    frame = frame.with_columns(
        pl.when(label == "").then(pl.lit("model")).otherwise(label).alias("hue"))
    order = frame.select(*hue, "hue").unique().sort(list(hue), nulls_last=True)
    return frame, order["hue"].unique(maintain_order=True).to_list()


def levels(frame: pl.DataFrame, keys: list[str], unit: str = "seed"
           ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(unit-level: keys, unit, median, q25, q75 (medians over configs sharing them);
    key-level: medians over units of each statistic, n = units). unit "seed" for trained
    members, "config_hash" for baselines (a median over members)."""
    stats = frame.filter(pl.col("statistic").is_in(STATS))
    empty = pl.DataFrame(schema={**{k: frame.schema[k] for k in keys},
                                 **{s: pl.Float64 for s in STATS}, "n": pl.UInt32})
    if stats.height == 0:
        return empty.drop("n"), empty
    count = unit == "seed" and "config_hash" in stats.columns  # configs per seed, same pass
    per_stat = stats.group_by(*keys, unit, "statistic").agg(
        pl.col("value").median(), *([pl.col("config_hash").n_unique().alias("configs")] if count else []))
    if count:
        warn_pooled(per_stat, keys)
    per_unit = per_stat.select(*keys, unit, "statistic", "value").pivot(
        on="statistic", index=[*keys, unit], values="value")
    per_unit = per_unit.with_columns(
        [pl.lit(None, pl.Float64).alias(s) for s in STATS if s not in per_unit.columns]
    ).sort(*keys, unit)
    table = per_unit.group_by(*keys).agg(
        *[pl.col(s).median() for s in STATS], pl.col(unit).n_unique().alias("n")
    ).sort(keys)
    return per_unit, table


def warn_pooled(per_stat: pl.DataFrame, keys: list[str]) -> None:
    """Warn when a seed's value in a cell is a median over several configs (`per_stat`: per
    keys, seed and statistic, its `configs`): they differ in a column the cell's keys do not
    hold (a figure's undrawn axis, e.g. the learning rate), so the figure draws their mix as
    one line."""
    pooled = (per_stat.filter(pl.col("configs") > 1)
              .group_by(*keys, "seed").agg(pl.col("configs").max())
              .sort([*keys, "seed"], nulls_last=True))
    if pooled.height:
        first = pooled.row(0, named=True)
        where = ", ".join(f"{k}={first[k]}" for k in keys)
        warnings.warn(f"{pooled.height} (cell, seed) pair(s) pool several configs (up to "
                      f"{pooled['configs'].max()}; e.g. {where}, seed {first['seed']}): they differ "
                      f"in a column the figure does not draw (runs of other --set values in "
                      f"one store?), and each seed's value is their median; regenerate from a "
                      f"store of one setting to keep them apart", stacklevel=3)


def cell_regime(final: pl.DataFrame, keys: list[str], statistic: str = "median",
                metric: str | None = None) -> pl.DataFrame:
    """The learned-regime table (analysis.reading.regime.learned_regime) of the model's cells `keys`
    in rows already picked (final evaluation), with the trivial predictors of the same
    members (and their floor); `learned` is null everywhere when the rows hold no trivial
    predictor."""
    metric = metric or (final["metric"][0] if final.height else "mse")
    picked = final.filter(pl.col("predictor").is_in(["model", *TRIVIAL, FLOOR]))
    return learned_regime(picked, by=keys, metric=metric, statistic=statistic, final=False)
