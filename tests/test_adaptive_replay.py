"""The goal's estimator (analysis.forecasts.adaptive_design: `members`, `seeds`, `medians` =
fit_gamma) and the replay of a design on a measured dense grid
(analysis.forecasts.adaptive_replay), on synthetic laws and on a real Parquet row store.
"""

from __future__ import annotations

import dataclasses
import math

import polars as pl
import pytest

from analysis.fitting.sample_complexity import fit_gamma
from analysis.forecasts.adaptive_design import MIN_SEEDS, Goal, assess
from analysis.forecasts.adaptive_replay import (
    SYNTHETIC,
    replay,
    synthetic_grid,
    synthetic_replays,
)
from icl.commands.forecasts import main as forecast
from icl_core.storage.store import Store
from tests.test_adaptive import STUDY, SWEEP, write_member


def main(argv: list[str]) -> int:  # `icl forecast replay`
    return forecast(["replay", *argv])


def test_goal_estimator_is_checked_with_the_valid_choices():
    with pytest.raises(ValueError, match="members, seeds, medians"):
        Goal("exponent", 0.1, estimator="bogus")
    with pytest.raises(ValueError, match="exponent only"):
        Goal("forecast", 0.1, at=64, estimator="medians")
    x, y, seeds, _ = synthetic_grid(6, 3, 1.0, "power", 0)
    with pytest.raises(ValueError, match="needs each point's seed"):
        assess(x, y, Goal("exponent", 0.1, estimator="seeds"))
    with pytest.raises(ValueError, match="not 'saturating'"):
        assess(x, y, Goal("exponent", 0.1, estimator="medians"), "saturating", seeds=seeds)
    # a sweep file that pairs them fails when it is declared, before any trial
    from sweeps.adaptive_sample_complexity import STR_SIMPLE_ADAPTIVE
    with pytest.raises(ValueError, match="form must be 'power', got 'saturating'"):
        dataclasses.replace(STR_SIMPLE_ADAPTIVE, form="saturating")


def test_seed_resampling_estimators_need_three_seeds():
    """Two seeds per x give no CI by the seed-resampling estimators (inf); the third seed
    makes them finite, and `medians` is fit_gamma's width on exactly those members."""
    x, y, seeds, _ = synthetic_grid(6, 3, 1.0, "power", 0)
    two = seeds < 2
    for estimator in ("seeds", "medians"):
        goal = Goal("exponent", 0.1, estimator=estimator)
        assert assess(x[two], y[two], goal, seeds=seeds[two]).width == math.inf
        assert math.isfinite(assess(x, y, goal, seeds=seeds).width)
    assert MIN_SEEDS == 3
    table = pl.DataFrame({"x": x, "n_star": y, "censored": False, "seed": seeds})
    gamma = fit_gamma(table, "x")
    width = assess(x, y, Goal("exponent", 0.1, estimator="medians"), seeds=seeds).width
    assert width == pytest.approx(gamma.ci[1] - gamma.ci[0], rel=1e-12)
    assert math.isfinite(assess(x[two], y[two], Goal("exponent", 0.1)).width)  # members: finite


def test_replay_pays_on_a_dense_power_law_and_cannot_on_four_x():
    """8 x with 4 seeds and cost ~ x: the design reaches the grid's own CI width (seeds
    resampled) with under half its device-hours; with 4 x, round 0 (3 x 2 seeds) is already
    half the grid and the design needs the rest. Drawing outcomes beyond the grid (a synthetic
    law), it stacks more seeds at one x than the grid has."""
    goal = Goal("exponent", 1.0, estimator="seeds")
    dense = replay(*synthetic_grid(8, 4, 1.0, "power", 0), goal)
    assert dense.reached and dense.hours < 0.5 * dense.grid_hours
    assert dense.rounds[0]["trials"] == 6 and dense.trials < dense.grid_trials
    few = replay(*synthetic_grid(4, 3, 1.0, "power", 0), goal)
    assert few.trials == few.grid_trials and few.hours == pytest.approx(few.grid_hours)
    # free to draw any seed (as a live study is, and as --synthetic runs), the design piles
    # seeds at the cheap end
    [free] = synthetic_replays(seeds=(0,), cases=SYNTHETIC[:1], echo=None)
    assert free["stop"] == "reached the grid's width" and free["hour_share"] < 0.5
    assert max(free["x"].values()) > 4  # more seeds at one x than the grid has


def test_replay_command_on_a_store(tmp_path, capsys):
    store = Store(str(tmp_path / "s"))
    for xv in (1, 2, 4, 8, 16, 32, 64):
        for seed in range(3):
            write_member(store, xv, seed)
    argv = ["--storage", store.uri, "--sweep", SWEEP, "--study", STUDY, "--x", "model.depth",
            "--estimator", "seeds"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{SWEEP}/{STUDY}: grid 21 members, {21 / 3600:.4f} device-hours" in out
    assert "round 0: 6 trials" in out and "trials (" in out
    assert main(["--storage", store.uri, "--sweep", SWEEP]) == 2
    assert "--study, --x required" in capsys.readouterr().err
    assert main([*argv[:5], "nope", *argv[6:]]) == 2  # no such study
    assert capsys.readouterr().err.startswith("error: ")
    assert main(argv) == 0 and capsys.readouterr().out == out  # deterministic
