"""Reading a claim's cells from rows (`analysis.claims.engine` decides on what these give): one
value per seed (`seed_values`), the samples a run took to reach a threshold (`n_star_values`),
and the learned-regime check of a trained cell (`regime`). A cell that cannot be read as
declared raises `Undecidable` (the engine's "not testable")."""

from __future__ import annotations

import math

import polars as pl

from analysis.claims.declare import Cell, Claim
from analysis.reading.regime import (
    Regime,
    final_rows,
    learned_regime,
    threshold_regime,
    trivial_levels,
)

ITER_COLUMNS = ("infer_iter", "loop_iter")
N_STAR = "n_star"  # a derived metric: samples to reach `threshold` (n_star_values)


class Undecidable(Exception):
    """A cell that cannot be read as declared (no rows, configs pooled): not testable."""


def _select(rows: pl.DataFrame, claim: Claim, cell: Cell, predictor: str,
            iters: dict, final: bool = True) -> pl.DataFrame:
    f = rows.filter((pl.col("status") == "ok") & (pl.col("metric") == claim.metric)
                    & (pl.col("statistic") == claim.statistic)
                    & (pl.col("predictor") == predictor))
    if "test_dist" in f.columns:
        f = f.filter(pl.col("test_dist").fill_null("train") == (cell.test_dist or claim.test_dist))
    if predictor == cell.predictor:  # a reference on the same prompts: its own iterations only
        iters = {**{c: v for c, v in cell.where.items() if c in ITER_COLUMNS}, **iters}
    for col, want in cell.where.items():
        if col not in f.columns:
            raise Undecidable(f"{cell.label}: the rows have no column {col!r}")
        if col not in ITER_COLUMNS:
            f = f.filter(pl.col(col) == want)
    for col in ITER_COLUMNS:
        if col in f.columns:
            f = f.filter(pl.col(col) == iters[col] if col in iters else pl.col(col).is_null())
    if claim.position is not None:
        f = f.filter(pl.col("position") == claim.position)
    if final:
        f = f.filter(pl.col("step") == pl.col("step").max().over("config_hash"))
    if claim.position is None and "position" in f.columns:
        pos = pl.col("position").fill_null(-1)
        f = f.filter(pos == pos.max().over("config_hash"))
    return f


def n_star_values(rows: pl.DataFrame, claim: Claim, cell: Cell, lower_bound: bool
                  ) -> dict[int, float]:
    """{seed: n*} of a cell: the training samples (step x train.batch_size) at which the
    model's `gate_metric` (its statistic, at the last position) first reaches
    `claim.threshold` (analysis.fitting.sample_complexity.n_star: running minimum, log-log
    interpolation between the bracketing evaluations). A seed that never reached it within its
    run: its cap where the claim needs a lower bound there (`lower_bound`: the side claimed to
    need more samples), else Undecidable (a censored n* cannot support the claim)."""
    from analysis.fitting.sample_complexity import n_star

    gate = Claim(**{**claim.__dict__, "metric": claim.gate_metric or "mse",
                    "statistic": claim.gate_statistic or claim.statistic})
    f = _select(rows, gate, cell, cell.predictor, {}, final=False)
    if f.height == 0:
        raise Undecidable(f"{cell.label}: no {gate.metric} rows over training for {cell.where}")
    if "train.batch_size" not in f.columns:
        raise Undecidable(f"{cell.label}: the rows have no train.batch_size (samples seen)")
    out: dict[int, float] = {}
    f = f.sort("seed", maintain_order=True)  # seed order: the bootstrap's draws follow it
    for (seed,), part in f.group_by(["seed"], maintain_order=True):
        if part["config_hash"].n_unique() > 1:
            raise Undecidable(f"{cell.label}: seed {seed} pools {part['config_hash'].n_unique()}"
                              " configs; declare the cell's settings")
        samples = (part["step"] * part["train.batch_size"]).to_numpy()
        got = n_star(samples, part["value"].to_numpy(), claim.threshold)
        if got.censored and not lower_bound:
            raise Undecidable(f"{cell.label}: seed {seed} did not reach {claim.threshold:g} "
                              f"within {got.x_max:.3g} samples (censored)")
        out[int(seed)] = got.x_max if got.censored else got.n_star
    return out


def seed_values(rows: pl.DataFrame, claim: Claim, cell: Cell, predictor: str | None = None,
                iters: dict | None = None) -> dict[int, float]:
    """{seed: value} of one cell (the median of the seed's rows there); a seed whose rows span
    several configs means the cell is under-declared: Undecidable."""
    f = _select(rows, claim, cell, predictor or cell.predictor, iters or {})
    if f.height == 0:
        raise Undecidable(f"{cell.label}: no {predictor or cell.predictor} rows "
                          f"({claim.metric}, {claim.statistic}) for {cell.where}")
    per = f.group_by("seed").agg(pl.col("value").median(), pl.col("config_hash").n_unique()
                                 ).sort("seed")  # seed order: the bootstrap's draws follow it
    pooled = per.filter(pl.col("config_hash") > 1)
    if pooled.height:
        raise Undecidable(f"{cell.label}: seed {pooled['seed'][0]} pools "
                          f"{pooled['config_hash'][0]} configs; declare the cell's settings")
    return dict(zip(per["seed"].to_list(), per["value"].to_list(), strict=True))


def regime(rows: pl.DataFrame, claim: Claim, cell: Cell) -> Regime:
    """The learned-regime check of one trained cell: its config's headline rows (iteration
    columns left out: the bar's trivial predictors have none) at the claim's position, on the
    gate's metric; a threshold claim's cell: the threshold rule on the best trivial error."""
    f = rows
    for col, want in cell.where.items():
        if col not in f.columns:
            raise Undecidable(f"{cell.label}: the rows have no column {col!r}")
        if col not in ITER_COLUMNS:
            f = f.filter(pl.col(col) == want)
    metric = claim.gate_metric or claim.metric
    statistic = claim.gate_statistic or claim.statistic
    if cell.predictor != "model":  # a trained reference (a net fitted on the prompt): its own bar
        p = pl.col("predictor")
        f = f.filter(p != "model").with_columns(
            pl.when(p == cell.predictor).then(pl.lit("model")).otherwise(p).alias("predictor"))
        f = f.filter(pl.col("infer_iter").is_null() if "infer_iter" in f.columns else True)
    if claim.position is not None:
        f = f.filter(pl.col("position") == claim.position)
    if f.filter((pl.col("predictor") == "model") & (pl.col("metric") == metric)
                & (pl.col("status") == "ok")).height == 0:
        raise Undecidable(f"{cell.label}: no ok {cell.predictor} rows ({metric}) for "
                          f"{cell.where or 'the study'}")
    test_dist = cell.test_dist or claim.test_dist
    if claim.threshold is not None:
        final = final_rows(f, metric, test_dist)
        levels = trivial_levels(final, statistic)
        if levels.height == 0:
            return threshold_regime(claim.threshold, None, label=cell.label)
        best = levels.sort("value").row(0, named=True)
        return threshold_regime(claim.threshold, best["value"], best["predictor"], cell.label)
    table = learned_regime(f, by=[], metric=metric, statistic=statistic, test_dist=test_dist)
    if table.height == 0:
        return Regime(learned=None, model=math.nan, metric=claim.metric, label=cell.label)
    return Regime.from_row(table.row(0, named=True), label=cell.label)
