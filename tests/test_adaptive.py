"""Adaptive studies (analysis.forecasts.adaptive_design, icl.adaptive) on real Parquet row stores and a real
Ray: synthetic laws y = a x^-b with log-normal seed noise written with the row writer
(icl_core.storage.store) for the design; the smoke preset of sweeps/adaptive_depth.py for the driver.
"""

from __future__ import annotations

import math
import os
import warnings

import numpy as np
import pytest

from analysis.forecasts.adaptive_design import (
    Goal,
    assess,
    choose,
    lattice,
    measured_cost,
    member_points,
)
from analysis.reading.store import read_rows
from icl_core.storage.store import Store, rows_table

SWEEP, STUDY = "adapt", "law"
A, B, SIGMA = 2.0, 1.2, 0.3
CANDIDATES = lattice(1, 64, 10, integer=True)


def measured(x: float, seed: int) -> float:
    """The law's value at (x, seed): the same draw whichever design asks for it."""
    rng = np.random.default_rng([int(x * 1000), int(seed), 7])
    return A * x ** -B * math.exp(SIGMA * rng.normal())


def grid_points(xs, n_seeds: int):
    """(x, seeds, y): seeds 0..n_seeds-1 at each x, each measured on the law."""
    x, seeds = np.repeat(xs, n_seeds).astype(float), np.tile(np.arange(n_seeds), len(xs))
    return x, seeds, np.array([measured(a, s) for a, s in zip(x, seeds, strict=True)])


def write_member(store: Store, x: float, seed: int, **extra) -> None:
    h = f"x{x:g}s{seed}"
    rows = [{"metric": "mse", "statistic": "median", "value": measured(x, seed), "step": 100,
             "predictor": "model", "position": 20, "test_dist": "train"}]
    constants = {"sweep": SWEEP, "study": STUDY, "trial_id": h, "member": 0, "config_hash": h,
                 "seed": seed, "status": "ok", "reason": None, "model.depth": x,
                 "wall_time_s": 1.0, **extra}
    store.write_rows(store.rows_path(SWEEP, STUDY, h), rows_table(rows, constants))


def points(store: Store):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, _ = read_rows(store.uri, SWEEP, STUDY)
    return member_points(rows, "model.depth")


def trials_to_target(store: Store, goal: Goal, rounds) -> tuple[int, float]:
    """Write each round's trials and read them back until the goal is met: (trials, width)."""
    n, width = 0, math.inf
    for batch in rounds:
        for x, seed in batch(store):
            write_member(store, x, seed)
            n += 1
        x, y, _ = points(store)
        assert x.size == n  # every trial is a new config read back from Parquet
        width = assess(x, y, goal).width
        if width <= goal.target or n >= 200:
            return n, width
    return n, width


def test_lattice_and_goal_checks():
    assert lattice(1, 64, 10, integer=True).tolist() == [1, 2, 3, 4, 6, 10, 16, 25, 40, 64]
    assert lattice(1, 3, 10, integer=True).tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="at="):
        Goal("forecast", 0.1)
    with pytest.raises(ValueError, match="valid choices"):
        Goal("slope", 0.1)


def test_design_reaches_the_ci_target_with_half_the_trials_of_a_dense_grid(tmp_path):
    goal = Goal("exponent", target=0.2)

    def dense_rounds():  # one more seed at every lattice point per round
        for seed in range(20):
            yield lambda store, s=seed: [(float(x), s) for x in CANDIDATES]

    def adaptive_rounds():
        yield lambda store: [(x, s) for x in (1.0, 8.0, 64.0) for s in (0, 1)]
        for _ in range(60):
            yield lambda store: choose(*points(store), CANDIDATES, goal, 3, seed=0).trials

    dense, dense_width = trials_to_target(Store(str(tmp_path / "dense")), goal, dense_rounds())
    adaptive, width = trials_to_target(Store(str(tmp_path / "adaptive")), goal,
                                       adaptive_rounds())
    assert dense_width <= goal.target and width <= goal.target
    # measured: 12 trials vs 30
    assert adaptive <= 0.5 * dense, (
        f"adaptive design needed {adaptive} trials to reach b's CI width <= {goal.target} "
        f"(width {width:.3f}); the dense grid ({CANDIDATES.size} points) needed {dense} "
        f"(width {dense_width:.3f})")


@pytest.mark.parametrize("estimator", ["members", "seeds", "medians"])
def test_a_goals_width_does_not_depend_on_the_order_of_its_points(estimator):
    """Each member its own bootstrap group, or its seed's: the points read back in another
    order (a store's files) give the same width."""
    x, seeds, y = grid_points([1, 4, 16, 64], 3)
    goal = Goal("exponent", 0.1, estimator=estimator)
    width = assess(x, y, goal, seeds=seeds).width
    assert math.isfinite(width)
    for shuffle in range(3):
        order = np.random.default_rng(shuffle).permutation(x.size)
        assert assess(x[order], y[order], goal, seeds=seeds[order]).width == pytest.approx(
            width, abs=1e-12)


def test_choice_is_deterministic_for_a_seed_and_goes_where_the_law_is_uncertain():
    x, seeds, y = grid_points([1, 8, 64], 2)
    exponent = Goal("exponent", 0.1)
    first = choose(x, y, seeds, CANDIDATES, exponent, 4, seed=3)
    again = choose(x, y, seeds, CANDIDATES, exponent, 4, seed=3)
    assert first.trials == again.trials and first.variance_after == again.variance_after
    # a slope is pinned by the ends of the range: most trials go there
    ends = sum(t[0] in (1.0, 64.0) for t in first.trials)
    assert ends >= 3, first.trials
    # each trial is a new seed at its x: (x, seed) never repeats a measured or chosen one
    taken = set(zip(x.tolist(), seeds.tolist(), strict=True))
    assert all(t not in taken for t in first.trials)
    assert len(set(first.trials)) == len(first.trials)
    # a member that ran but is not a point (censored, diverged) keeps its seed: never chosen
    taken = [(1.0, 2), (64.0, 2), (1.0, 3), (64.0, 3)]
    spared = choose(x, y, seeds, CANDIDATES, exponent, 4, seed=3, taken=taken)
    assert [t[0] for t in spared.trials] == [t[0] for t in first.trials]
    assert not set(spared.trials) & set(taken), spared.trials
    # a forecast far beyond the data is pinned by the largest x first
    forecast = choose(x, y, seeds, CANDIDATES, Goal("forecast", 0.1, at=256), 2, seed=3)
    assert forecast.trials[0][0] == 64.0, forecast.trials
    assert forecast.variance_after[0] < forecast.variance_now


# ---------------------------------------------------------------- the driver on real Ray


def row_mtimes(root) -> dict[str, float]:
    folder = root / "adaptive_depth" / "least_squares_adaptive" / "rows"
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.parquet")}


def test_driver_runs_round_zero_and_one_round_then_resumes(ray_session, tmp_path, capsys):
    from icl.adaptive import main, read_log, read_state, run_adaptive
    from sweeps.adaptive_depth import ADAPTIVE, LEAST_SQUARES_ADAPTIVE

    store = Store(str(tmp_path))
    assert main("adaptive_depth", ADAPTIVE, ["--preset", "smoke", "--dry-run",
                                              "--storage", str(tmp_path)]) == 0
    assert "round 0: 3 trials" in capsys.readouterr().out and not row_mtimes(tmp_path)

    log = run_adaptive("adaptive_depth", LEAST_SQUARES_ADAPTIVE, "smoke", store, max_rounds=2)
    done = [r for r in log["rounds"] if r["done"]]
    assert [r["round"] for r in done] == [0, 1]
    assert done[0]["ran"] == 3 and done[1]["ran"] == 2  # budget 6: one trial left
    assert log["stopped"].startswith("paused")
    first = row_mtimes(tmp_path)
    assert len(first) == 5
    on_disk = read_log(store, "adaptive_depth", "least_squares_adaptive", "smoke")
    assert on_disk["rounds"][-1]["done"] is False  # round 2 planned, not run: resumable
    # a run killed between a member's rows and the removal of its checkpoint left it: the
    # next round's run clears it (icl_core.running.store_checkpoints.clear_leftovers)
    folder = tmp_path / "adaptive_depth" / "least_squares_adaptive"
    (folder / "checkpoints").mkdir(exist_ok=True)
    leftover = folder / "checkpoints" / f"{next((folder / 'rows').glob('*.parquet')).stem}.pt"
    leftover.write_bytes(b"a state")

    log = run_adaptive("adaptive_depth", LEAST_SQUARES_ADAPTIVE, "smoke", store)
    assert not leftover.exists()
    after = row_mtimes(tmp_path)
    assert len(after) == 6 and log["stopped"] == "budget spent"
    assert {k: after[k] for k in first} == first  # finished configs were not rerun
    last = log["rounds"][-1]
    assert last["round"] == 2 and last["ran"] == 1 and last["after"]["spent_trials"] == 6
    rows, _ = read_rows(str(tmp_path), "adaptive_depth", "least_squares_adaptive")
    assert set(rows["model.depth"].unique().to_list()) <= {1, 2, 3}
    assert rows["status"].unique().to_list() == ["ok"]

    # another preset in the same study folder starts from its own round 0: the smoke rounds
    # are not its rounds, the smoke members neither its points nor its budget
    cpu = LEAST_SQUARES_ADAPTIVE.for_preset("cpu")
    base, _ = cpu.study.base_and_grid("cpu")
    assert read_log(store, "adaptive_depth", "least_squares_adaptive", "cpu") == {"rounds": []}
    (x, _, _), spent = read_state(store, "adaptive_depth", cpu, base)
    assert x.size == 0 and spent.trials == 0
    smoke = LEAST_SQUARES_ADAPTIVE.for_preset("smoke")
    (x, _, _), spent = read_state(store, "adaptive_depth", smoke,
                                  smoke.study.base_and_grid("smoke")[0])
    assert x.size == 6 and spent.trials == 6
    assert main("adaptive_depth", ADAPTIVE, ["--preset", "cpu", "--dry-run",
                                              "--storage", str(tmp_path)]) == 0
    assert "rounds logged so far: 0" in capsys.readouterr().out
    # a log of the one-file layout before (adaptive.json, its preset named) is read as the
    # preset's own, and not as another's
    folder = tmp_path / "adaptive_depth" / "least_squares_adaptive"
    (folder / "adaptive-smoke.json").rename(folder / "adaptive.json")
    assert read_log(store, "adaptive_depth", "least_squares_adaptive", "smoke") == log
    assert read_log(store, "adaptive_depth", "least_squares_adaptive", "cpu") == {"rounds": []}


def test_status_command_reads_a_store(tmp_path, capsys):
    from icl.commands.forecasts import main as forecast

    def main(argv):
        return forecast(["design", *argv])

    store = Store(str(tmp_path))
    for x in (1.0, 8.0, 64.0):
        for seed in (0, 1):
            write_member(store, x, seed)
    argv = ["--storage", str(tmp_path), "--sweep", SWEEP, "--study", STUDY, "--x", "model.depth"]
    assert main(argv + ["--at", "256"]) == 0
    out = capsys.readouterr().out
    assert "6 trials (6 measured), 0.0017 device-hours" in out
    assert "exponent 95% CI width" in out and "band at 256" in out
    # every estimator's width; the seed-resampling ones need 3 seeds (2 here: no CI)
    assert "power: exponent 95% CI width inf (seeds resampled)" in out
    assert "power: exponent 95% CI width inf (fit_gamma's: per-x medians" in out
    assert "width inf (members resampled)" not in out
    assert main(argv[:4] + ["--study", "none", "--x", "model.depth"]) == 2


def design_seconds(root, seed: int) -> dict[str, float]:
    """The device seconds (a trial at x costs x seconds here, as a model's depth does) the
    plain and the cost-weighted designs of choice seed `seed` spend to reach the exponent's CI
    target 0.2, from the same first six trials."""
    goal = Goal("exponent", target=0.2)
    cost = measured_cost([1, 2, 64, 64], [1.0, 2.0, 64.0, 64.0])  # seconds = x, fitted

    def rounds(weigh):
        yield lambda store: [(x, s) for x in (1.0, 8.0, 64.0) for s in (0, 1)]
        for _ in range(60):
            yield lambda store: choose(*points(store), CANDIDATES, goal, 3, seed=seed,
                                       cost=weigh).trials

    seconds = {}
    for name, weigh in (("plain", None), ("weighted", cost)):
        store = Store(str(root / f"{name}{seed}"))
        n, width = trials_to_target(store, goal, rounds(weigh))
        assert width <= goal.target, (name, n, width)
        seconds[name] = float(points(store)[0].sum())
    return seconds


def test_a_trials_cost_is_fitted_and_a_weighted_choice_buys_cheaper_trials():
    """The cost fitted from measured wall times; one choice seed (of the slow test's four)
    with it: the weighted design's trials cost less than the unweighted design's (a design
    that ignored the cost would pick the same)."""
    cost = measured_cost([1, 2, 64, 64], [1.0, 2.0, 64.0, 64.0])  # seconds = x, fitted
    assert cost(8.0) == pytest.approx(8.0) and cost(40.0) == pytest.approx(40.0)
    assert measured_cost([4, 4], [1.0, 9.0]) is None  # one x: every trial costs the same
    x, seeds, y = grid_points([1, 8, 64], 2)
    goal = Goal("exponent", target=0.2)
    spent = [sum(cost(t[0]) for t in choose(x, y, seeds, CANDIDATES, goal, 3, seed=1,
                                            cost=weigh).trials) for weigh in (None, cost)]
    assert spent[1] < 0.5 * spent[0], spent  # measured: 3 vs 66 s


@pytest.mark.slow  # ~16 s, eight designs' choices (one of them in the test above)
def test_cost_weighted_choices_buy_the_variance_with_cheaper_trials():
    """With the cost learned from measured wall times (a trial at x costs x seconds, as a
    model's depth does), the design buys variance reduction per second: from the same six
    points its trials cost no more than the unweighted design's for each choice seed, and far
    less in all (a design that ignored the cost would pick the same; one that inverted it,
    dearer ones)."""
    cost = measured_cost([1, 2, 64, 64], [1.0, 2.0, 64.0, 64.0])  # seconds = x, fitted
    x, seeds, y = grid_points([1, 8, 64], 2)
    goal = Goal("exponent", target=0.2)
    spent = {"plain": [], "weighted": []}
    for seed in range(4):
        for name, weigh in (("plain", None), ("weighted", cost)):
            trials = choose(x, y, seeds, CANDIDATES, goal, 3, seed=seed, cost=weigh).trials
            spent[name].append(sum(cost(t[0]) for t in trials))
    assert all(w <= p for w, p in zip(spent["weighted"], spent["plain"], strict=True)), spent
    assert sum(spent["weighted"]) < 0.5 * sum(spent["plain"]), spent  # measured: 138 vs 330 s


@pytest.mark.slow  # ~45 s: four designs of each kind
def test_cost_weighted_designs_reach_the_target_for_less_device_time(tmp_path):
    """Whole designs, round after round to the exponent's CI target: one design's saving
    depends on its draws (4% to 31% over choice seeds 0-3); over four seeds the weighted
    designs spend less each time and at most 0.9x in all (measured 2026-11-28: 1317 vs 1593
    s, 0.83x)."""
    runs = [design_seconds(tmp_path, seed) for seed in range(4)]
    assert all(r["weighted"] < r["plain"] for r in runs), runs
    assert sum(r["weighted"] for r in runs) < 0.9 * sum(r["plain"] for r in runs), runs


@pytest.mark.parametrize("name", ["adaptive_depth", "adaptive_sample_complexity"])
def test_every_adaptive_file_plans_each_preset(tmp_path, capsys, name):
    """Each adaptive sweep file's --dry-run, every preset: its round-0 members validate, the
    candidates lie within the bounds, nothing is written."""
    import importlib

    from icl.adaptive import main
    from icl_core.spec.study import REQUIRED_PRESETS

    module = importlib.import_module(f"sweeps.{name}")
    for preset in REQUIRED_PRESETS:
        assert main(name, module.ADAPTIVE, ["--preset", preset, "--dry-run",
                                            "--storage", str(tmp_path)]) == 0, preset
        out = capsys.readouterr().out
        assert f"[{preset}]" in out and "round 0: " in out and "budget: " in out
        for adaptive in module.ADAPTIVE:
            ready = adaptive.for_preset(preset)
            lo, hi = ready.bounds
            assert all(lo <= c <= hi for c in ready.lattice())
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # ~13 s; the pool's own Ctrl-C test stays in the fast suite
def test_ctrl_c_ends_an_adaptive_study_with_its_round_left_to_run(ray_session, tmp_path):
    """Tune catches Ctrl-C and returns from fit(); the adaptive command must end there (exit
    130, one line), its round still planned, not marked done and followed by the next."""
    import signal
    import subprocess
    import sys

    from conftest import ROOT

    from icl.adaptive import read_log

    driver = subprocess.Popen(
        [sys.executable, str(ROOT / "sweeps" / "adaptive_depth.py"), "--preset", "smoke",
         "--storage", str(tmp_path), "--max-concurrent", "1",
         "--address", ray_session.get_runtime_context().gcs_address],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for line in driver.stdout:  # round 0's first of three trials (one at a time) started
            if "1 running" in line:
                break
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 130, err[-2000:]
    assert "[adaptive_depth/least_squares_adaptive] interrupted (Ctrl-C)" in err, err[-1500:]
    log = read_log(Store(str(tmp_path)), "adaptive_depth", "least_squares_adaptive", "smoke")
    assert [r["done"] for r in log["rounds"]] == [False]  # re-running the command resumes it
    assert "after round 0" not in out
