"""Back-tested forecasts (analysis.backtests.interval, analysis.backtests.backtest): the synthetic
calibration (laws with a known truth; no training) and the back-test command on a real Parquet
row store written with the row writer (icl_core.storage.store).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.backtests import interval
from analysis.backtests.backtest import TABLE_COLUMNS, backtest_store
from analysis.backtests.interval import (
    SeriesGrid,
    backtest_grid,
    backtest_grids,
    interval_score,
    summarize,
)
from analysis.backtests.scoreboard import judgement, shown
from analysis.backtests.synthetic import synthetic_backtests
from icl.console import main as icl_main
from icl_core.storage.store import Store, rows_table

main = icl_main  # `icl backtest`, `icl scoreboard`
SWEEP = "bt"


def test_interval_score_is_width_plus_scaled_miss():
    assert interval_score(0.0, 1.0, 0.5, 0.8) == pytest.approx(1.0)
    assert interval_score(0.0, 1.0, 1.5, 0.8) == pytest.approx(1.0 + 10 * 0.5)
    assert interval_score(0.0, 1.0, -0.2, 0.8) == pytest.approx(1.0 + 10 * 0.2)


def test_synthetic_calibration_covers_nominal_and_beats_both_naive_forecasters():
    """>= 200 back-tests of random power, saturating and broken power laws (4-8 x, 3-5 seeds,
    log-normal seed noise, fixed seed): our 80% intervals cover 70-90% of the measured values,
    and both naive forecasters are worse on the median |log10 error| and the interval score."""
    rows = synthetic_backtests(n_laws=100, seed=0)
    s = summarize(rows)
    assert s["ours"]["n"] >= 200
    assert {r["law"] for r in rows} == {"power", "saturating", "broken_power"}
    assert 0.70 <= s["ours"]["coverage"] <= 0.90
    for naive in ("last", "line"):
        assert s["ours"]["median_abs_log10_error"] < s[naive]["median_abs_log10_error"]
        assert s["ours"]["interval_score"] < s[naive]["interval_score"]


def test_a_known_law_is_forecast_inside_its_interval():
    """A noiseless-enough power law on 6 x: every back-test of ours holds the truth, tightly."""
    x = 2.0 ** np.arange(1, 7)
    xi = np.repeat(np.arange(6), 4)
    rng = np.random.default_rng(3)
    y = 3.0 * x[xi] ** -0.8 * np.exp(0.02 * rng.normal(size=xi.size))
    rows = [r for r in backtest_grid(SeriesGrid(x, xi, y[None, :])) if r["method"] == "ours"]
    assert [(r["held_out"], r["x"]) for r in rows] == [(1, 64.0), (2, 32.0), (2, 64.0)]
    for r in rows:
        assert r["hit"] and abs(r["log10_error"]) < 0.03
        assert r["lo"] < 3.0 * r["x"] ** -0.8 < r["hi"]


def test_curves_off_any_law_widen_the_pooled_prior_and_keep_coverage(monkeypatch):
    """Power laws with a random walk in ln y (sd TAU per unit ln x) on 5 and 6 x: back-tested
    together, the pooled extrapolation prior finds TAU from held-in points only and the 80%
    intervals cover 70-90%; with the fixed prior instead (no pooling) they cover far less."""
    tau, rng, grids = 1.0, np.random.default_rng(2), []
    for n_x in (5, 6):
        x, xi = 2.0 ** np.arange(1, n_x + 1), np.repeat(np.arange(n_x), 3)
        ys = []
        for _ in range(30):
            walk = np.cumsum(np.r_[0.0, tau * math.log(2) * rng.normal(size=n_x - 1)])
            y = np.exp(-rng.uniform(0.3, 1.2) * np.log(x) + walk)[xi]
            ys.append(y * np.exp(0.1 * rng.normal(size=xi.size)))
        grids.append(SeriesGrid(x, xi, np.array(ys)))
    pooled = [r for rows in backtest_grids(grids) for r in rows if r["method"] == "ours"]
    monkeypatch.setattr(interval, "POOL_MIN", 10 ** 9)  # never pool: the fixed prior TAU0
    fixed = [r for rows in backtest_grids(grids) for r in rows if r["method"] == "ours"]
    assert all(0.7 * tau < r["tau0"] < 2.0 * tau for r in pooled)  # measured: 1.28, 1.48
    assert {r["tau0"] for r in fixed} == {interval.TAU0}
    assert 0.70 <= summarize(pooled)["ours"]["coverage"] <= 0.90
    # measured: 0.858 pooled, 0.692 fixed
    assert summarize(pooled)["ours"]["coverage"] > summarize(fixed)["ours"]["coverage"] + 0.1


# --------------------------------------------------------------------- on a real store


def write_member(store: Store, study: str, x: float, seed: int, value: float) -> None:
    h = f"{study}-w{x:g}s{seed}"
    rows = [{"metric": "mse", "statistic": "median", "value": value, "step": 100,
             "predictor": "model", "position": 20, "test_dist": "train"},
            {"metric": "mse", "statistic": "median", "value": value * 10, "step": 100,
             "predictor": "model", "position": 5, "test_dist": "train"}]
    constants = {"sweep": SWEEP, "study": study, "trial_id": h, "member": 0, "config_hash": h,
                 "seed": seed, "status": "ok", "reason": None, "model.width": x}
    store.write_rows(store.rows_path(SWEEP, study, h, "ok"), rows_table(rows, constants))


@pytest.fixture
def law_store(tmp_path):
    """Study `law`: mse = 2 x^-0.7, 6 widths x 3 seeds, 5% noise; study `short`: 3 widths."""
    store, rng = Store(str(tmp_path)), np.random.default_rng(0)
    for x in (8, 16, 32, 64, 128, 256):
        for seed in range(3):
            write_member(store, "law", x, seed, 2.0 * x ** -0.7 * math.exp(0.05 * rng.normal()))
    for x in (8, 16, 32):
        for seed in range(3):
            write_member(store, "short", x, seed, 1.0 / x)
    return str(tmp_path)


def test_backtest_on_a_store_recovers_the_planted_law(law_store):
    result = backtest_store(law_store)
    assert result.studies == [f"{SWEEP}/law"]
    assert any(s.startswith(f"{SWEEP}/short: no numeric axis with >= 4") for s in result.skipped)
    table = result.table
    assert tuple(table.columns) == TABLE_COLUMNS
    ours = table.filter(table["method"] == "ours")
    assert ours["x"].to_list() == [256.0, 128.0, 256.0]
    assert ours["axis"].unique().to_list() == ["model.width"]
    for r in ours.iter_rows(named=True):
        truth = 2.0 * r["x"] ** -0.7
        assert r["predicted"] == pytest.approx(truth, rel=0.1)
        assert r["hit"] and r["lo"] < r["measured"] < r["hi"]
    assert set(table["method"].unique()) == {"ours", "last", "line"}
    assert result.reliability["ours"][0.8] == 1.0


def test_a_store_pools_the_extrapolation_prior_over_its_studies(tmp_path):
    """Three studies of curves off any law (a random walk in ln y, 1.0 per unit ln x; 6 widths,
    3 rolling-origin errors each): back-tested as one store they share one learned prior,
    far above the fixed 0.1; one study alone has too few errors to pool and keeps 0.1."""
    store, rng = Store(str(tmp_path)), np.random.default_rng(4)
    widths = (8, 16, 32, 64, 128, 256)
    for study in ("walk0", "walk1", "walk2"):
        walk = np.cumsum(np.r_[0.0, math.log(2) * rng.normal(size=len(widths) - 1)])
        for x, step in zip(widths, walk, strict=True):
            for seed in range(3):
                write_member(store, study, x, seed,
                             x ** -0.7 * math.exp(step + 0.05 * rng.normal()))
    pooled = {(r["study"], r["tau0"]) for r in backtest_store(str(tmp_path)).rows
              if r["method"] == "ours" and r["held_out"] == 1}
    assert len(pooled) == 3 and len({t for _, t in pooled}) == 1
    assert next(iter(pooled))[1] > 0.3  # measured: 0.82
    alone = backtest_store(str(tmp_path), study="walk0").rows
    assert {r["tau0"] for r in alone if r["method"] == "ours"} == {0.1}


def test_a_zipped_axis_is_one_axis_not_a_series_split(tmp_path):
    """training_length's (train.steps, train.step_size) are zipped: steps is the axis and its
    partner neither splits it into one-x series nor is back-tested a second time."""
    store = Store(str(tmp_path))
    store.write_manifest(SWEEP, "steps", {"grid": [["train.steps", "train.step_size"], "seed"]})
    for x in (1000, 2000, 4000, 8000):
        for seed in range(3):
            h = f"steps-{x}s{seed}"
            rows = [{"metric": "mse", "statistic": "median", "value": 5.0 * x ** -0.5,
                     "step": x, "predictor": "model", "position": 20, "test_dist": "train"}]
            constants = {"sweep": SWEEP, "study": "steps", "trial_id": h, "member": 0,
                         "config_hash": h, "seed": seed, "status": "ok", "reason": None,
                         "train.steps": x, "train.step_size": x // 10}
            store.write_rows(store.rows_path(SWEEP, "steps", h, "ok"), rows_table(rows, constants))
    result = backtest_store(str(tmp_path))
    ours = result.table.filter(result.table["method"] == "ours")
    assert result.studies == [f"{SWEEP}/steps"]
    assert ours.select("axis", "series", "x").rows() == [("train.steps", "", 8000.0)]
    assert ours["hit"].to_list() == [True]


def test_backtest_command_table_and_one_line_errors(law_store, tmp_path, capsys):
    assert main(["backtest", "--storage", law_store, "--sweep", SWEEP, "--study", "law",
                 "--figure", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert "| bt/law | model.width |" in out and "| ours | 3 |" in out
    assert (tmp_path / "fig" / "backtest_reliability.png").stat().st_size > 0
    for argv, field in ((["--storage", str(tmp_path / "none")], "--storage"),
                        (["--storage", law_store, "--sweep", "nope"], "--sweep"),
                        (["--storage", law_store, "--sweep", SWEEP, "--study", "nope"],
                         "--study")):
        assert main(["backtest", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {field}") and "\n" not in err
    assert main(["backtest", "--storage", law_store, "--sweep", SWEEP, "--study", "short"]) == 0
    assert "qualifies" in capsys.readouterr().out
    assert icl_main(["backtest", "--storage", law_store, "--sweep", "nope"]) == 2  # `icl backtest`
    assert capsys.readouterr().err.startswith("error: --sweep: no sweep 'nope'")
    assert main(["bogus"]) == 2  # an unknown command: one line naming the choices
    assert "valid choices: run, plan" in capsys.readouterr().err


def test_scoreboard_page_counts_backtests_against_the_target(law_store, tmp_path, capsys):
    out, figures = tmp_path / "docs" / "FORECASTS.md", tmp_path / "docs" / "figures"
    assert main(["scoreboard", "--storage", law_store, "--storage", str(tmp_path / "none"),
                 "--out", str(out), "--figures", str(figures), "--laws", "12"]) == 0
    page = out.read_text()
    assert "**3 back-tested forecasts over 1 studies** (target >= 30 over >= 8: NOT met)" in page
    assert "| bt/law | model.width |" in page and "not read: --storage: no store" in page
    assert "tau_0 = 0.1 (1 held out), 0.1 (2 held out) per unit ln x" in page  # too few to pool
    assert "| line |" in page and "No sealed forecast" in page
    assert (figures / "backtest_reliability.png").stat().st_size > 0


def write_law(root, law, noise: float = 0.01) -> str:
    """A store of study `law`: mse = law(x) at 6 widths x 3 seeds, log-normal noise."""
    store, rng = Store(str(root)), np.random.default_rng(0)
    for x in (8, 16, 32, 64, 128, 256):
        for seed in range(3):
            write_member(store, "law", x, seed, law(x) * math.exp(noise * rng.normal()))
    return str(root)


def test_scoreboard_judges_ours_against_the_naive_forecasters_per_store(tmp_path, monkeypatch):
    """A curve that stops falling after its held-in x (the last value is right, ours is not)
    and a saturating law (ours is right, both naive forecasters are not): each store's page
    section says who is ahead on the median |log10 error|, with the numbers its table prints;
    all stores together are judged at the top; stores inside the current directory are named
    by their relative path."""
    monkeypatch.chdir(tmp_path)
    flat = write_law(tmp_path / "evidence" / "flat", lambda x: min(x, 64) ** -1.0)
    sat = write_law(tmp_path / "evidence" / "sat", lambda x: 0.1 + 2.0 * x ** -0.7)
    out = tmp_path / "docs" / "FORECASTS.md"
    assert main(["scoreboard", "--storage", flat, "--storage", sat, "--out", str(out),
                 "--figures", str(tmp_path / "docs" / "figures"), "--laws", "12",
                 "--note", "Free prose."]) == 0
    page = out.read_text()
    assert str(tmp_path) not in page and "--storage evidence/flat" in page
    top, flat_part, sat_part = (page.split("## Back-tests on the stores")[1]
                                .split("## Sealed forecasts")[0].split("### evidence/"))
    assert flat_part.startswith("flat\n") and sat_part.startswith("sat\n")

    def err(storage):
        return {m: f"{s['median_abs_log10_error']:.4f}"
                for m, s in backtest_store(storage).summary.items()}

    e = err(flat)  # measured: last 0.0027, ours 0.2980, line 0.3051
    assert float(e["last"]) < float(e["ours"]) < float(e["line"])
    assert (f"- On this store the last measured value beats ours on median |log10 error| "
            f"({e['last']} vs {e['ours']}); the log-log line through the last two values does "
            f"not ({e['line']}).") in flat_part
    e = err(sat)  # measured: ours 0.0076, last 0.0998, line 0.0301
    assert float(e["ours"]) < min(float(e["last"]), float(e["line"]))
    assert (f"- On this store ours beats both naive forecasters on median |log10 error| "
            f"({e['ours']} vs last {e['last']}, line {e['line']}).") in sat_part
    for part in (flat_part, sat_part):  # one sentence per score
        assert part.count("- On this store ") == 3
        assert "mean interval score" in part and "coverage of the 80% intervals" in part
    assert top.count("- On all stores together ") == 3 and "Free prose." in top
    assert top.index("All stores together:") < top.index("Free prose.")
    assert "level with" not in flat_part.split("\n- On this store")[1]


def test_the_judgement_compares_the_printed_values():
    """Ties only where the table prints the same value; a strictly better one beats."""
    def summary(**scores):
        return {m: {"median_abs_log10_error": e, "interval_score": 1.0, "coverage": c}
                for m, (e, c) in scores.items()}

    text = judgement(summary(ours=(0.2247, 0.733), last=(0.2169, 0.2), line=(0.2386, 0.4)),
                     where="On all stores together")
    assert ("On all stores together the last measured value beats ours on median |log10 error| "
            "(0.2169 vs 0.2247); the log-log line through the last two values does not "
            "(0.2386).") in text
    assert "ours is level with both naive forecasters on mean interval score (1.0000)" in text
    assert ("ours beats both naive forecasters on coverage of the 80% intervals (0.733 vs last "
            "0.200, line 0.400; nearer 0.8 is better)") in text
    text = judgement(summary(ours=(0.22471, 0.9), last=(0.22469, 0.7), line=(0.1, 0.85)))
    assert ("On this store the log-log line through the last two values beats ours on median "
            "|log10 error| (0.1000 vs 0.2247); the last measured value is level with ours.") in text
    assert "both naive forecasters beat ours on coverage of the 80% intervals (last 0.700" not in text
    assert ("the log-log line through the last two values beats ours on coverage of the 80% "
            "intervals (0.850 vs 0.900; nearer 0.8 is better); the last measured value is level "
            "with ours.") in text


def test_a_store_is_named_relative_to_the_current_directory_when_inside_it(tmp_path, monkeypatch):
    (tmp_path / "evidence" / "cpu").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "evidence")
    assert shown(str(tmp_path / "evidence" / "cpu")) == "cpu" == shown("cpu")
    assert shown(str(tmp_path)) == str(tmp_path.resolve())
    assert shown("s3://KEY:SECRET@bucket/root") == "s3://KEY:***@bucket/root"


def test_icl_backtest_synthetic_prints_each_methods_calibration(capsys):
    assert icl_main(["backtest", "--synthetic"]) == 0
    out = capsys.readouterr().out
    assert "synthetic back-tests in" in out
    assert all(f"  {name:5s} coverage" in out for name in ("ours", "last", "line"))
