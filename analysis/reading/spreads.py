"""A cell's spread over seeds, the project's one rule for it (analysis.claims.engine states the
rules): a seed's value in a cell is the median of its rows there; a cell's spread is its seed
values' min-max range (`SPREAD`).

    seed_spreads(frame, ["model.depth"])   # per cell: n_seeds, min, q25, median, q75, max
    spread([0.1, 0.2, 0.3]).text()         # "0.2 [0.1, 0.3] (3 seeds, min-max)"
    spread_keys("err", table, 0)           # {"err": median, "err_lo": min, "err_hi": max, ...}
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

SPREAD = "min-max"  # a cell's spread over seeds: the range of its seed values


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


def spread_keys(key: str, cell: dict | pl.DataFrame, i: int = -1) -> dict:
    """A cell's seed spread as summary values: {key: median, key_lo: min, key_hi: max,
    key_n_seeds: n_seeds}; cell: a row of a `seed_spreads` table (a dict), or the table and
    the row index i."""
    if isinstance(cell, pl.DataFrame):
        cell = cell.row(i, named=True)
    return {key: float(cell["median"]), f"{key}_lo": float(cell["min"]),
            f"{key}_hi": float(cell["max"]), f"{key}_n_seeds": int(cell["n_seeds"])}
