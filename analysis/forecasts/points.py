"""What a forecast predicts and what scores it: one measured value per member, bounded when it
is censored, and the truth at an x (the median over its seeds) with honest bounds.

    members = member_values(rows, "model.depth", Measure("mse"))       # per config hash
    truth = truth_at(members)                                          # per x

A `Measure` is either a row metric at each member's final evaluation (its last step and last
position, the query: analysis.reading.frames.final_eval, or the `position` given, e.g. the
training prompt length; `statistic` over test prompts, `predictor`; `1-r2` is 1 - the `r2`
rows, the error the R² figures fit),
or `n_star`: the samples a member needs to reach `threshold` on its recorded `curve_metric`
curve (analysis.fitting.sample_complexity: n_star, right-censored at the run's cap when never reached,
left-censored at its first point when reached at once).

Bounds. Each member's value lies in [lo, hi]: lo = hi = value when measured, [cap, inf) when
right-censored, (0, x_min] when left-censored. The median over seeds is monotone in every
seed's value, so the median lies in [median(lo), median(hi)]: the truth at an x is exact when
those agree, censored otherwise (its known bound is the finite end). Only exact members enter
a fit.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import polars as pl

from analysis.fitting.sample_complexity import error_curves, n_star_table
from analysis.reading.coverage import expected_hashes
from analysis.reading.frames import final_eval
from analysis.reading.regime import final_rows
from analysis.reading.store import locate, read_rows
from icl_core.spec.adaptive import N_STAR, Measure  # noqa: F401  (the declaration, re-exported)
from icl_core.storage.store import read_manifest

COMPLEMENTS = {"1-r2": "r2"}  # a metric read as 1 - the named row metric
MEMBER_SCHEMA = {"config_hash": pl.String, "x": pl.Float64, "seed": pl.Int64,
                 "lo": pl.Float64, "hi": pl.Float64}


def _require(rows: pl.DataFrame, x: str) -> None:
    if x not in rows.columns:
        raise ValueError(f"rows lack the x column {x!r}")
    if not rows.schema[x].is_numeric():
        raise ValueError(f"x column {x!r} is not numeric ({rows.schema[x]})")


def _final_values(rows: pl.DataFrame, x: str, m: Measure) -> pl.DataFrame:
    metric = COMPLEMENTS.get(m.metric, m.metric)
    if m.position is None:
        final = final_eval(rows, metric, m.test_dist)
    else:
        final = final_rows(rows, metric, m.test_dist, position="all").filter(
            pl.col("position") == m.position)
    final = final.filter((pl.col("predictor") == m.predictor)
                         & (pl.col("statistic") == m.statistic))
    value = 1 - pl.col("value") if m.metric in COMPLEMENTS else pl.col("value")
    per = final.group_by("config_hash").agg(
        pl.col(x).first().cast(pl.Float64).alias("x"), pl.col("seed").first(),
        value.median().alias("lo"))
    return per.with_columns(pl.col("lo").alias("hi"))


def _n_star_values(rows: pl.DataFrame, x: str, m: Measure) -> pl.DataFrame:
    curves = error_curves(rows, m.curve_metric, m.statistic, m.predictor, m.test_dist)
    if curves.is_empty():
        return pl.DataFrame(schema=MEMBER_SCHEMA)
    table = n_star_table(curves, m.threshold, by=[x, "config_hash"])
    lo = (pl.when(pl.col("censored")).then(pl.col("x_max"))
          .when(pl.col("left_censored")).then(0.0).otherwise(pl.col("n_star")))
    hi = pl.when(pl.col("censored")).then(math.inf).otherwise(pl.col("n_star"))
    return table.select("config_hash", pl.col(x).cast(pl.Float64).alias("x"), "seed",
                        lo.alias("lo"), hi.alias("hi"))


def study_rows(storage: str, sweep: str, study: str, preset: str | None = None) -> pl.DataFrame:
    """A study's rows; with `preset`, only the members its plan expects (the study's manifest
    in the store): a store that also holds another preset's runs (smoke beside cpu) keeps
    them out of a forecast."""
    hashes = None
    if preset:  # the plan first: a study without one is refused before its rows are read
        loc = locate(storage)
        hashes = expected_hashes(read_manifest(loc.fs, loc.study_dir(sweep, study)) or {},
                                 preset)
        if hashes is None:
            raise ValueError(f"--preset: {sweep}/{study} has no grid plan in its manifest (a "
                             "search, an adaptive study or rows written without a sweep run): "
                             "leave it out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, _ = read_rows(storage, sweep, study)
    return rows if hashes is None else rows.filter(pl.col("config_hash").is_in(hashes))


def member_values(rows: pl.DataFrame, x: str, measure: Measure) -> pl.DataFrame:
    """One row per ok member with an x value: config_hash, x, seed, lo, hi (lo == hi when the
    value is measured; see the module doc), sorted by x, seed and config_hash (a seeded
    interval's draws follow this order, so it is fixed where configs share an (x, seed)).
    Warns where several configs share an (x, seed): other presets, --set values or another
    axis pooled at one x."""
    _require(rows, x)
    rows = rows.filter(pl.col(x).is_not_null())
    shape = _n_star_values if measure.metric == N_STAR else _final_values
    out = shape(rows, x, measure).cast(MEMBER_SCHEMA).select(list(MEMBER_SCHEMA))
    out = out.filter(pl.col("x").is_finite() & (pl.col("x") > 0))
    out = out.sort("x", "seed", "config_hash")
    shared = out.group_by("x", "seed").len().filter(pl.col("len") > 1).sort("x", "seed")
    if shared.height:
        first = shared.row(0, named=True)
        warnings.warn(f"{shared.height} ({x}, seed) pair(s) hold several configs (e.g. {x} = "
                      f"{first['x']:g}, seed {first['seed']}: {first['len']}): other presets, "
                      f"--set values or another axis share this study, and each counts as a "
                      f"point; --preset keeps one preset's members", stacklevel=2)
    return out


def exact(members: pl.DataFrame) -> pl.DataFrame:
    """Members whose value is measured (not censored), finite and positive: what a fit uses."""
    return members.filter((pl.col("lo") == pl.col("hi")) & pl.col("lo").is_finite()
                          & (pl.col("lo") > 0))


def truth_at(members: pl.DataFrame) -> pl.DataFrame:
    """Per x: the median over seeds and its bounds (x, n_seeds, lo, hi, value, censored,
    config_hashes); value is the median when exact, else null."""
    records = []
    for (xv,), part in members.group_by(["x"], maintain_order=True):
        lo = float(np.median(part["lo"].to_numpy()))
        hi = float(np.median(part["hi"].to_numpy()))
        censored = not lo == hi
        records.append({"x": float(xv), "n_seeds": part.height, "lo": lo, "hi": hi,
                         "value": None if censored else lo, "censored": censored,
                         "config_hashes": sorted(part["config_hash"].to_list())})
    schema = {"x": pl.Float64, "n_seeds": pl.Int64, "lo": pl.Float64, "hi": pl.Float64,
              "value": pl.Float64, "censored": pl.Boolean, "config_hashes": pl.List(pl.String)}
    return pl.DataFrame(records, schema=schema).sort("x")
