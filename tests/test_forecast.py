"""Pre-registered forecasts (analysis.forecasts.forecast) on real Parquet row stores written with the
row writer (icl_core.storage.store): seal at an x not yet run, write the truth rows, score.

Synthetic laws y = a x^-b with log-normal seed noise: the sealed 90% interval covers the
median of the later seeds at the right rate across laws; a wrong truth is a miss; a modified
forecast file is tampered and never scored; an id is sealed once; a point with rows is refused;
a right-censored n* is a miss only when the interval lies wholly below its cap.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from analysis.forecasts.figure import forecast_frames
from analysis.forecasts.forecast import (
    ForecastError,
    Measure,
    content_hash,
    forecast_dir,
    judge,
    score,
    seal,
    verify,
)
from analysis.forecasts.points import member_values
from icl.commands.forecasts import main
from icl_core.storage.store import Store, rows_table

SWEEP = "fc"
XS = (8, 16, 32, 64, 128)
SEEDS = (0, 1, 2, 3)
N_BOOT = 200


def write_final(store: Store, study: str, x: float, seed: int, value: float,
                status: str = "ok", prefix: str = "w") -> None:
    """One member (config hash `<prefix><x>s<seed>`): its final query MSE (median over
    prompts) at width x."""
    h = f"{prefix}{x:g}s{seed}"
    rows = [{"metric": "mse", "statistic": "median", "value": value, "step": 100,
             "predictor": "model", "position": 20, "test_dist": "train"},
            {"metric": "mse", "statistic": "median", "value": value * 10, "step": 100,
             "predictor": "model", "position": 5, "test_dist": "train"}]
    constants = {"sweep": SWEEP, "study": study, "trial_id": h, "member": 0, "config_hash": h,
                 "seed": seed, "status": status, "reason": None, "model.width": x}
    store.write_rows(store.rows_path(SWEEP, study, h, status), rows_table(rows, constants))


def write_law(store: Store, study: str, a: float, b: float, sigma: float, rng,
              xs=XS, seeds=SEEDS) -> None:
    for x in xs:
        for seed in seeds:
            write_final(store, study, x, seed, a * x ** -b * math.exp(sigma * rng.normal()))


def seal_width(tmp_path, study: str, at=(512,), forecast_id: str = "f", **kw):
    return seal(str(tmp_path), SWEEP, study, "model.width", "mse", at, forecast_id,
                n_boot=N_BOOT, **kw)


# ----------------------------------------------------------------------------- the rules


def test_judge_measured_and_censored_both_ways():
    assert judge(1.0, 2.0, 1.5, 1.5) == "covered"
    assert judge(1.0, 2.0, 2.5, 2.5) == "miss"
    # right-censored truth (>= 10): an interval wholly below the cap is a miss ...
    assert judge(1.0, 2.0, 10.0, math.inf) == "miss"
    # ... one reaching above it is consistent with the truth, never a hit or miss
    assert judge(1.0, 20.0, 10.0, math.inf) == "censored, consistent"
    assert judge(1.0, 20.0, 10.0, 15.0) == "covered"  # every possible value inside
    assert judge(1.0, 12.0, 10.0, 15.0) == "censored, consistent"
    assert judge(20.0, 30.0, 0.0, 10.0) == "miss"  # left-censored truth (<= 10)


# ---------------------------------------------------------------------- seal, then score


def test_sealed_forecast_is_stable_json_and_scores_truth(tmp_path):
    store, rng = Store(str(tmp_path)), np.random.default_rng(1)
    write_law(store, "s", 2.0, 0.7, 0.1, rng)
    path, doc = seal_width(tmp_path, "s", at=(256, 512))
    assert path == forecast_dir(str(tmp_path), SWEEP, "s") / "f.json"
    stored = json.loads(path.read_text())
    assert stored == doc and verify(stored) and content_hash(stored) == doc["content_hash"]
    assert len(doc["inputs"]["config_hashes"]) == len(XS) * len(SEEDS)
    assert doc["fit"]["form"] in ("power", "saturating", "broken_power")
    for p in doc["points"]:
        assert p["lo"] < p["predicted"] < p["hi"]
        assert p["predicted"] == pytest.approx(2.0 * p["x"] ** -0.7, rel=0.15)
    pending = score(str(tmp_path), SWEEP, "s", figure=False)
    assert pending.points["status"].to_list() == ["pending", "pending"]
    assert math.isnan(pending.coverage)
    for seed in SEEDS:  # the truth at 256 on the law; a wrong one (100x) at 512
        write_final(store, "s", 256, seed, 2.0 * 256 ** -0.7)
        write_final(store, "s", 512, seed, 100 * 2.0 * 512 ** -0.7)
    scores = score(str(tmp_path), SWEEP, "s")
    by_x = {r["x"]: r for r in scores.points.iter_rows(named=True)}
    assert by_x[256.0]["status"] == "covered" and by_x[512.0]["status"] == "miss"
    assert by_x[512.0]["log10_error"] == pytest.approx(2.0, abs=0.1)
    assert by_x[256.0]["n_seeds"] == len(SEEDS) and scores.coverage == 0.5
    folder = forecast_dir(str(tmp_path), SWEEP, "s")
    report = (folder / "score.md").read_text()
    assert "1/2 = 0.50" in report and "| f | 512 |" in report
    assert (folder / "forecasts.png").stat().st_size > 0


def test_interval_covers_truth_at_nominal_rate_over_laws(tmp_path):
    """20 laws (random a, b, 10% seed noise): the 90% interval sealed at 4x the largest x
    covers the later median of 4 seeds in >= 70% of them; a 100x wrong truth never."""
    store, rng = Store(str(tmp_path)), np.random.default_rng(7)
    hits = 0
    for i in range(20):
        a, b, study = rng.uniform(0.5, 3.0), rng.uniform(0.3, 1.2), f"law{i}"
        write_law(store, study, a, b, 0.1, rng)
        seal_width(tmp_path, study)
        write_law(store, study, a, b, 0.1, rng, xs=(512,))
        status = score(str(tmp_path), SWEEP, study, write=False).points["status"].item()
        hits += status == "covered"
    assert hits >= 14, f"coverage {hits}/20"


def test_tampered_forecast_is_reported_never_scored(tmp_path):
    store, rng = Store(str(tmp_path)), np.random.default_rng(2)
    write_law(store, "s", 1.0, 0.5, 0.05, rng)
    path, _ = seal_width(tmp_path, "s", forecast_id="tamper")
    seal_width(tmp_path, "s", forecast_id="honest")
    write_law(store, "s", 1.0, 0.5, 0.0, rng, xs=(512,))
    doc = json.loads(path.read_text())
    doc["points"][0]["hi"] *= 100  # widen the interval after the fact, keep the old hash
    path.chmod(0o644)
    path.write_text(json.dumps(doc, sort_keys=True))
    scores = score(str(tmp_path), SWEEP, "s", write=False)
    status = dict(zip(scores.points["forecast"], scores.points["status"], strict=True))
    assert status == {"honest": "covered", "tamper": "tampered"}
    assert scores.tampered == ["tamper"] and scores.n_scored == 1
    inputs, curves, points = forecast_frames(scores.forecasts, scores.points)  # the figure's data
    assert set(points["forecast"]) == set(curves["forecast"]) == {"honest"}
    assert inputs["x"].to_list() == [float(x) for x in XS] and curves["x"].max() == 512.0


def test_sealing_twice_or_at_a_point_with_rows_fails(tmp_path, capsys):
    store, rng = Store(str(tmp_path)), np.random.default_rng(3)
    write_law(store, "s", 1.0, 0.5, 0.05, rng)
    write_final(store, "s", 1024, 0, 0.01, status="failed")  # run (and failed): not a forecast
    path, doc = seal_width(tmp_path, "s")
    before = path.read_text()
    with pytest.raises(FileExistsError, match="sealed already"):
        seal_width(tmp_path, "s")
    args = ["seal", "--storage", str(tmp_path), "--sweep", SWEEP, "--study", "s", "--x",
            "model.width", "--metric", "mse", "--n-boot", "50"]
    assert main([*args, "--at", "512", "--id", "f"]) == 2
    assert "sealed already" in capsys.readouterr().err and path.read_text() == before
    with pytest.raises(ForecastError, match="already has rows"):
        seal_width(tmp_path, "s", at=(64, 512), forecast_id="g")
    assert main([*args, "--at", "1024", "--id", "h"]) == 2
    assert "1024 already has rows" in capsys.readouterr().err
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.json"]
    assert main([*args, "--at", "2048", "--id", "k"]) == 0
    assert "sealed" in capsys.readouterr().out


# ------------------------------------------------------------------- censored truth (n*)

THRESHOLD, BATCH = 1e-2, 10


def write_curve(store: Store, study: str, n: int, seed: int, n_star: float, cap: float) -> None:
    """A member whose recorded error err(s) = T (n*/s)^0.5 crosses T at s = n*, evaluated at
    8 points up to `cap` samples (never reached when n* > cap: right-censored)."""
    steps = np.unique(np.geomspace(1, cap / BATCH, 8).round().astype(int))
    rows = [{"metric": "mse", "statistic": "median", "value": THRESHOLD * (n_star / (s * BATCH))
             ** 0.5, "step": int(s), "predictor": "model", "position": 9, "test_dist": "train"}
            for s in steps]
    h = f"n{n}s{seed}"
    constants = {"sweep": SWEEP, "study": study, "trial_id": h, "member": 0, "config_hash": h,
                 "seed": seed, "status": "ok", "reason": None, "task.dim": n,
                 "train.batch_size": BATCH}
    store.write_rows(store.rows_path(SWEEP, study, h), rows_table(rows, constants))


@pytest.mark.parametrize("cap_factor, verdict", [(100.0, "miss"),
                                                  (0.2, "censored, consistent")])
def test_censored_n_star_is_a_miss_only_when_the_interval_is_wholly_below(tmp_path, cap_factor,
                                                                          verdict):
    store, rng = Store(str(tmp_path)), np.random.default_rng(4)
    for n in (4, 8, 16, 32):
        for seed in (0, 1, 2):  # n* = 50 N, budget 1000 N: always reached
            write_curve(store, "s", n, seed, 50.0 * n * math.exp(0.05 * rng.normal()), 1000.0 * n)
    measure = Measure("n_star", threshold=THRESHOLD)
    _, doc = seal(str(tmp_path), SWEEP, "s", "task.dim", measure, (128,), "nstar",
                  forms=("power",), n_boot=N_BOOT)
    point = doc["points"][0]
    assert point["predicted"] == pytest.approx(50.0 * 128, rel=0.1)
    cap = cap_factor * point["predicted"]  # never reached within the budget
    for seed in (0, 1, 2):
        write_curve(store, "s", 128, seed, 1e6 * cap, cap)
    row = score(str(tmp_path), SWEEP, "s", write=False).points.row(0, named=True)
    assert row["status"] == verdict and row["measured"] is None
    assert row["measured_lo"] == pytest.approx(cap, rel=0.05) and row["measured_hi"] == math.inf
    assert "lower bound" in row["note"]
    scored = score(str(tmp_path), SWEEP, "s", write=False)
    assert scored.n_scored == (1 if verdict == "miss" else 0)
    assert scored.points.schema["status"] == pl.String


def test_measure_at_a_position_and_one_minus_r2():
    """Measure(position=k) reads the query at k, not each member's last position; the metric
    `1-r2` is 1 - the r2 rows (the Wu figure's error); both survive to_dict/from_dict."""
    base = {"sweep": "s", "study": "t", "trial_id": "h", "member": 0, "config_hash": "h",
            "seed": 0, "status": "ok", "reason": None, "model.width": 32.0}
    rows = rows_table([{"metric": "r2", "statistic": "pooled", "value": 0.9 - 0.01 * k,
                        "step": 100, "predictor": "model", "position": k, "test_dist": "w0.0"}
                       for k in range(30)], base)
    rows = pl.from_arrow(rows)
    at20 = Measure("1-r2", statistic="pooled", test_dist="w0.0", position=20)
    last = Measure("1-r2", statistic="pooled", test_dist="w0.0")
    assert member_values(rows, "model.width", at20)["lo"].to_list() == [pytest.approx(0.3)]
    assert member_values(rows, "model.width", last)["lo"].to_list() == [pytest.approx(0.39)]
    r2 = Measure("r2", statistic="pooled", test_dist="w0.0", position=20)
    assert member_values(rows, "model.width", r2)["lo"].to_list() == [pytest.approx(0.7)]
    assert Measure.from_dict(at20.to_dict()) == at20
    assert "position" not in last.to_dict()


def test_two_presets_in_one_study_folder_are_kept_apart_by_preset(tmp_path, capsys):
    """A cpu run beside a smoke run of the same study: each (x, seed) holds two configs. The
    forecast commands warn that they would pool them; --preset keeps the members that preset's
    plan expects (the study's manifest), and an unknown preset names the valid ones."""
    store, rng = Store(str(tmp_path)), np.random.default_rng(5)
    write_law(store, "s", 1.0, 0.5, 0.05, rng)  # the "cpu" members, w<x>s<seed>
    for x in XS:
        for seed in SEEDS:  # a "smoke" run at the same widths and seeds: another law
            write_final(store, "s", x, seed, 5.0, prefix="smoke")
    plans = {"cpu": [f"w{x:g}s{s}" for x in XS for s in SEEDS],
             "smoke": [f"smoke{x}s{s}" for x in XS for s in SEEDS]}
    (tmp_path / SWEEP / "s" / "study.json").write_text(json.dumps(
        {"study": "s", "kind": "grid", "order": 0, "expected": plans}))
    with pytest.warns(UserWarning, match=r"20 \(model.width, seed\) pair\(s\) hold several"):
        _, pooled = seal_width(tmp_path, "s", forecast_id="pooled")
    assert len(pooled["inputs"]["config_hashes"]) == 40
    for again in range(3):  # the same intervals each time: the tied configs in a fixed order
        with pytest.warns(UserWarning, match="hold several"):
            _, same = seal_width(tmp_path, "s", forecast_id=f"pooled{again}")
        assert same["points"] == pooled["points"]
    _, cpu = seal_width(tmp_path, "s", forecast_id="cpu", preset="cpu")
    assert sorted(cpu["inputs"]["config_hashes"]) == sorted(plans["cpu"])
    assert cpu["fit"]["params"]["b"] == pytest.approx(0.5, abs=0.05)  # the cpu law alone
    args = ["design", "--storage", str(tmp_path), "--sweep", SWEEP, "--study", "s", "--x",
            "model.width"]
    assert main([*args, "--preset", "smoke"]) == 0
    assert "fc/s: 20 trials (20 measured)" in capsys.readouterr().out
    assert main([*args, "--preset", "paper"]) == 2
    assert "--preset: unknown 'paper'; valid choices: cpu, smoke" in capsys.readouterr().err
