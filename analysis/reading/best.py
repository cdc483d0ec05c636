"""The best settings a search found, read back from the store: e.g. the learning rate per
model width for a scaling sweep (sweeps/hpo_lr.py), `from icl import best_settings`."""

from __future__ import annotations

import polars as pl

from analysis.reading.store import load_rows


def best_settings(storage: str, sweep: str, study: str, by: str, params: list[str]) -> dict:
    """{value of `by`: {param: value}} of the finished search trial with the lowest final
    training loss at each value of `by` (e.g. a learning rate per model.width); of trials
    tied on that loss, the one with the lowest config hash, so every read picks the same."""
    rows = load_rows(storage, sweep, study)
    final = (
        rows.filter((pl.col("metric") == "train_loss") & (pl.col("status") == "ok"))
        .sort("step")
        .group_by("config_hash")
        .agg(pl.col("value").last().alias("loss"), *[pl.col(c).first() for c in [by, *params]])
        .filter(pl.col("loss").is_finite())
        .sort("loss", "config_hash")
        .group_by(by, maintain_order=True)
        .first()
    )
    return {row[by]: {p: row[p] for p in params} for row in final.iter_rows(named=True)}
