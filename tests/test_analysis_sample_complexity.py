"""Sample complexity: n* from error curves (monotone envelope, log-log interpolation,
censoring), γ of n* ∝ N^γ with a hierarchical bootstrap CI, the architecture comparison, and
the curves read back from a real Parquet row store."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from analysis.fitting.sample_complexity import (
    compare_architectures,
    error_curves,
    fit_gamma,
    n_star,
    n_star_table,
)
from analysis.reading.store import load_rows
from icl_core.storage.store import Store, rows_table

THRESHOLD = 1e-2
STEPS = np.array([10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000])
BATCH = 64
N_VALUES = (2.0, 4.0, 8.0, 16.0, 32.0)


def curve(true_n_star: float, x=STEPS * BATCH, alpha: float = 1.0, wiggle: float = 0.0,
          rng=None) -> np.ndarray:
    """err(x) = threshold * (x / n*)^-alpha, times a multiplicative wiggle."""
    err = THRESHOLD * (np.asarray(x, dtype=float) / true_n_star) ** -alpha
    if wiggle and rng is not None:
        err = err * np.exp(wiggle * rng.standard_normal(err.size))
    return err


def synthetic_curves(gamma: float, k: float = 3000.0, sigma: float = 0.2, n_seeds: int = 5,
                     n_values=N_VALUES, rng_seed: int = 0, arch: str = "a") -> pl.DataFrame:
    """Curves whose n* = k N^gamma e^(sigma z) per seed, on the recorded sample grid."""
    rng = np.random.default_rng(rng_seed)
    records = []
    for n in n_values:
        for seed in range(n_seeds):
            target = k * n**gamma * math.exp(sigma * rng.standard_normal())
            for x, e in zip(STEPS * BATCH, curve(target, wiggle=0.05, rng=rng), strict=True):
                records.append({"arch": arch, "N": n, "seed": seed, "samples": float(x),
                                "value": float(e), "true": target})
    return pl.DataFrame(records)


# ---------------------------------------------------------------------------------- n*


def test_n_star_interpolates_in_log_log_space():
    result = n_star(STEPS * BATCH, curve(12345.0), THRESHOLD)
    assert result.n_star == pytest.approx(12345.0, rel=1e-9)  # exact on a power-law segment
    assert not result.censored and not result.left_censored
    assert result.x_max == 10000 * BATCH and result.n_points == STEPS.size


def test_n_star_uses_the_running_minimum():
    """A bump after an earlier, better point does not undo reaching the threshold."""
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    err = np.array([1.0, 0.05, 0.5, 0.001])  # 0.05 at x=10 is the best so far until x=1000
    got = n_star(x, err, 0.01).n_star
    # between x=100 (envelope 0.05) and x=1000 (0.001): log-log interpolation
    t = (math.log(0.01) - math.log(0.05)) / (math.log(0.001) - math.log(0.05))
    assert got == pytest.approx(math.exp(math.log(100) + t * math.log(10)))
    assert n_star(x[::-1], err[::-1], 0.01).n_star == pytest.approx(got)  # order-free


def test_never_reached_and_plateau_curves_are_right_censored():
    never = n_star(STEPS * BATCH, curve(1e9), THRESHOLD)
    assert never.censored and math.isnan(never.n_star) and never.x_max == 10000 * BATCH
    plateau = np.maximum(curve(1000.0), 3 * THRESHOLD)  # a floor above the target
    result = n_star(STEPS * BATCH, plateau, THRESHOLD)
    assert result.censored and math.isnan(result.n_star)
    diverged = n_star([1.0, 2.0, 3.0], [math.inf, math.nan, math.inf], THRESHOLD)
    assert diverged.censored
    early = n_star(STEPS * BATCH, curve(1.0), THRESHOLD)
    assert early.left_censored and early.n_star == STEPS[0] * BATCH
    with pytest.raises(ValueError, match="threshold"):
        n_star([1.0], [1.0], 0.0)


# ------------------------------------------------------------------------------------ γ


@pytest.fixture(scope="module")
def gamma_table():
    return n_star_table(synthetic_curves(gamma=0.8), THRESHOLD, by=["N"])


def test_gamma_recovered_within_its_ci(gamma_table):
    fit = fit_gamma(gamma_table, "N", n_boot=1000, rng_seed=0)
    lo, hi = fit.ci
    assert lo <= 0.8 <= hi
    assert not lo <= 0.55 <= hi and not lo <= 1.05 <= hi  # a wrong γ is rejected
    assert math.exp(fit.log_k) == pytest.approx(3000.0, rel=0.3)
    assert fit.n_configs == 5 and fit.n_seeds == 25 and fit.n_censored == 0
    assert fit.decades == pytest.approx(math.log10(16))
    assert fit.weighting == "inverse-variance" and fit.n_boot == 1000
    assert fit.loo_range[0] <= fit.gamma <= fit.loo_range[1]
    assert fit.label().startswith("γ = 0.")
    row = fit.to_row()
    assert {"gamma", "gamma_lo", "gamma_hi", "n_configs", "decades", "n_censored"} <= set(row)
    again = fit_gamma(gamma_table, "N", n_boot=1000, rng_seed=0)
    assert again.ci == fit.ci  # seeded


def test_gamma_and_its_ci_do_not_depend_on_the_tables_row_order(gamma_table):
    """The bootstrap resamples each configuration's seeds: a table read back in another row
    order (a store's files, polars' grouping) gives the same γ and CI."""
    for table in (gamma_table, gamma_table.drop("seed")):  # with or without seed labels
        fit = fit_gamma(table, "N", n_boot=200, rng_seed=0)
        for shuffle in range(3):
            other = fit_gamma(table.sample(fraction=1.0, shuffle=True, seed=shuffle), "N",
                              n_boot=200, rng_seed=0)
            assert (other.gamma, *other.ci) == pytest.approx((fit.gamma, *fit.ci), abs=1e-12)


def test_gamma_ci_covers_over_repeated_experiments():
    covered = 0
    for rep in range(20):
        table = n_star_table(synthetic_curves(gamma=0.8, rng_seed=50 + rep), THRESHOLD, by=["N"])
        fit = fit_gamma(table, "N", n_boot=1000, rng_seed=rep)
        covered += fit.ci[0] <= 0.8 <= fit.ci[1]
    assert covered >= 15


def test_censored_curves_are_excluded_from_gamma(gamma_table):
    base = fit_gamma(gamma_table, "N", n_boot=200)
    censored = pl.DataFrame([{"N": 8.0, "seed": 99, "n_star": math.nan, "censored": True,
                              "left_censored": False, "x_max": 640000.0, "n_points": 10,
                              "threshold": THRESHOLD}], schema=gamma_table.schema)
    with_one = fit_gamma(pl.concat([gamma_table, censored]), "N", n_boot=200)
    assert with_one.n_censored == 1 and with_one.n_seeds == base.n_seeds
    assert with_one.gamma == base.gamma and with_one.n_configs == 5

    # A configuration whose curves mostly never get there has a censored median: dropped.
    curves = synthetic_curves(gamma=0.8)
    slow = curves.filter(pl.col("N") == 32.0).with_columns(
        pl.when(pl.col("seed") < 3).then(pl.col("value") * 1e4).otherwise(pl.col("value"))
        .alias("value"))
    table = n_star_table(pl.concat([curves.filter(pl.col("N") != 32.0), slow]), THRESHOLD,
                         by=["N"])
    assert table.filter(pl.col("N") == 32.0)["censored"].sum() == 3
    fit = fit_gamma(table, "N", n_boot=200)
    assert fit.n_configs == 4 and fit.n_censored == 3
    assert fit.dropped and fit.dropped[0][0] == 32.0 and "censored" in fit.dropped[0][1]
    assert fit.per_config.filter(pl.col("N") == 32.0)["used"].to_list() == [False]

    with pytest.raises(ValueError, match="need >= 2"):
        fit_gamma(table.filter(pl.col("N") >= 16.0), "N", n_boot=10)


def test_equal_weights_when_a_configuration_has_one_seed(gamma_table):
    table = gamma_table.filter((pl.col("N") != 4.0) | (pl.col("seed") == 0))
    fit = fit_gamma(table, "N", n_boot=100)
    assert fit.weighting == "equal" and fit.n_configs == 5


def test_compare_architectures_side_by_side():
    curves = pl.concat([synthetic_curves(0.5, arch="lstm", rng_seed=1),
                        synthetic_curves(1.0, arch="transformer", rng_seed=2)])
    table = n_star_table(curves, THRESHOLD, by=["arch", "N"])
    frame = compare_architectures(table, "N", group="arch", n_boot=500)
    assert frame["arch"].to_list() == ["lstm", "transformer"]
    for arch, gamma in (("lstm", 0.5), ("transformer", 1.0)):
        row = frame.filter(pl.col("arch") == arch).row(0, named=True)
        assert row["gamma_lo"] <= gamma <= row["gamma_hi"]
        assert row["n_configs"] == 5
        assert row["n_star@2"] < row["n_star@32"]
    assert {f"n_star@{n:g}" for n in N_VALUES} <= set(frame.columns)
    # the two exponents differ: the CIs do not overlap
    lstm, tf = frame.row(0, named=True), frame.row(1, named=True)
    assert lstm["gamma_hi"] < tf["gamma_lo"]


# ---------------------------------------------------------------------- from the store


def test_n_star_from_stored_intermediate_evaluations(tmp_path):
    """Members with intermediate evaluations (eval.every > 0) written as real row files:
    x = step x batch size, the final evaluation at step == train.steps included."""
    store = Store(str(tmp_path))
    truth = {}
    for width in (8, 16, 32):
        for seed in (0, 1, 2):
            target = 400.0 * width * (1.0 + 0.1 * seed)
            truth[(width, seed)] = target
            rows = [{"metric": "train_loss", "statistic": "mean", "value": 1.0, "step": int(s),
                     "predictor": "model"} for s in STEPS]
            for s, e in zip(STEPS, curve(target), strict=True):
                for position, factor in ((5, 10.0), (20, 1.0)):  # the query is position 20
                    rows.append({"metric": "mse", "statistic": "median", "value": e * factor,
                                 "step": int(s), "predictor": "model", "position": position,
                                 "test_dist": "train"})
            h = f"w{width}s{seed}"
            constants = {"sweep": "sc", "study": "s", "trial_id": h, "member": 0,
                         "config_hash": h, "seed": seed, "status": "ok", "reason": None,
                         "model.width": width, "train.batch_size": BATCH,
                         "train.steps": int(STEPS[-1]), "eval.every": 10}
            store.write_rows(store.rows_path("sc", "s", h), rows_table(rows, constants))
    curves = error_curves(load_rows(str(tmp_path), "sc"))
    assert set(curves["position"]) == {20} and set(curves["metric"]) == {"mse"}
    assert curves.filter(pl.col("config_hash") == "w8s0")["samples"].to_list() == \
        [float(s * BATCH) for s in STEPS]
    table = n_star_table(curves, THRESHOLD, by=["model.width"])
    for row in table.iter_rows(named=True):
        assert row["n_star"] == pytest.approx(truth[(row["model.width"], row["seed"])], rel=1e-9)
    fit = fit_gamma(table, "model.width", n_boot=200)
    assert fit.gamma == pytest.approx(1.0, abs=1e-9)
