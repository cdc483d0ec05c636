"""End to end on a real Ray: sweep file -> Tune trials -> Parquet rows -> figure.

Uses the session-scoped Ray (one for the whole suite).
"""

from __future__ import annotations

import json
import re
import time

import polars as pl
import pytest

from analysis.figures.registry import FIGURE_COLUMNS, FIGURES
from analysis.reading.store import read_rows
from icl import console
from icl_core.models import MODELS
from icl_core.storage.store import Store
from icl_core.tasks import TASKS
from sweeps.depth_scaling import SWEEP


def assert_dashboard_answers(out: str) -> None:
    """The run printed the address of the session Ray's dashboard (on loopback), and it
    answers: its page to anyone (a browser asks for the token there), its API with the token
    under token authentication, as the printed line says."""
    import os
    import urllib.error
    import urllib.request

    found = re.search(r"^dashboard: (http://127\.0\.0\.1:\d+)( \(token authentication: "
                      r"paste what `ray get-auth-token` prints when it asks\))?$", out, re.M)
    assert found, out
    url, token_auth = found.group(1), bool(found.group(2))
    assert token_auth == (os.environ.get("RAY_AUTH_MODE") == "token")
    deadline = time.monotonic() + 60  # the dashboard's modules may still be starting
    while True:
        try:
            with urllib.request.urlopen(url + "/", timeout=5) as page:
                assert page.status == 200 and b"<html" in page.read(2000).lower()
            request = urllib.request.Request(url + "/api/version")
            if token_auth:
                from ray._raylet import AuthenticationTokenLoader  # `ray get-auth-token`

                token = AuthenticationTokenLoader.instance().get_raw_token(ignore_auth_mode=True)
                request.add_header("Authorization", f"Bearer {token}")
            with urllib.request.urlopen(request, timeout=5) as api:
                assert json.loads(api.read())["ray_version"]
            break
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    if token_auth:  # without the token the API refuses
        try:
            urllib.request.urlopen(url + "/api/version", timeout=5)
            raise AssertionError("the dashboard's API answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401


def test_depth_smoke_sweep_end_to_end(ray_session, tmp_path, capsys):
    storage, figures = tmp_path / "results", tmp_path / "figures"
    # one study: the others' smoke runs are in test_orchestrator (every sweep file, packed)
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", str(storage),
            "--figures", str(figures)]
    assert SWEEP.main(argv + ["--json"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)  # --json: stdout holds the summary and nothing else
    assert summary["studies"] == [{"study": "least_squares", "kind": "grid", "ok": 4,
                                   "diverged": 0, "pruned": 0, "failed": 0, "missing": 0,
                                   "claimed": 0}]
    assert (summary["exit_status"], summary["ok"], summary["sweep"]) == (0, True, "depth_scaling")
    assert str(figures / "depth_scaling" / "least_squares" / "depth.png") in summary["figures"]
    out = captured.err  # ... every other line on stderr
    assert "4 configs, 0 already finished, running 4" in out
    assert "finished: 4 ok, 0 diverged, 0 failed, 0 missing" in out
    assert_dashboard_answers(out)

    members = SWEEP.study("least_squares").members("smoke")
    store = Store(str(storage))
    assert store.finished("depth_scaling", "least_squares") == {m.hash for m in members}
    rows = pl.read_parquet(storage / "depth_scaling" / "least_squares" / "rows" / "*.parquet")
    final = rows.filter((pl.col("metric") == "mse") & (pl.col("predictor") == "model"))
    assert sorted(set(zip(final["model.depth"], final["seed"], strict=True))) == [
        (1, 0), (1, 1), (2, 0), (2, 1)]
    ols64 = rows.filter((pl.col("predictor") == "ols_float64") & (pl.col("statistic") == "median"))
    assert ols64["value"].max() < 1e-20  # float64 least squares is exact on these prompts
    assert (figures / "depth_scaling" / "least_squares" / "depth.png").exists()

    # Re-running the same grid runs nothing: every config hash already has its rows.
    # --no-dashboard: no address printed (a Ray it starts would serve none); --log-file: the
    # same lines, each with its time, level and logger
    log = tmp_path / "run.log"
    assert SWEEP.main(argv + ["--no-figures", "--no-dashboard", "--log-file", str(log)]) == 0
    out = capsys.readouterr().out
    assert "4 configs, 4 already finished, running 0" in out and "dashboard:" not in out
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO    "
                     r"icl_core\.running\.trial_pool: \[depth_scaling/least_squares\] 4 configs, "
                     r"4 already finished, running 0", log.read_text(), re.M), log.read_text()
    # --quiet: warnings and errors only, and there are none
    assert SWEEP.main(argv + ["--no-figures", "--no-dashboard", "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")

    # `icl compact` merges the member files; the rows, the resume check and the figure stay.
    assert console.main(["compact", "depth_scaling", "--storage", str(storage)]) == 0
    out = capsys.readouterr().out
    assert (f"[depth_scaling/least_squares] compacted 4 member files ({rows.height} rows) "
            "into ") in out
    study = storage / "depth_scaling" / "least_squares"
    assert not list((study / "rows").glob("*.parquet"))
    assert len(list((study / "compacted").glob("compacted-*.parquet"))) == 1
    assert store.finished("depth_scaling", "least_squares") == {m.hash for m in members}
    compacted, _ = read_rows(str(storage), "depth_scaling", "least_squares")
    assert compacted.select(rows.columns).sort(rows.columns).equals(rows.sort(rows.columns))
    assert SWEEP.main(argv + ["--no-figures"]) == 0
    assert "4 configs, 4 already finished, running 0" in capsys.readouterr().out
    # the depth figure from its declared columns only is the figure from every column
    narrow, _ = read_rows(str(storage), "depth_scaling", "least_squares",
                          columns=FIGURE_COLUMNS["depth"], categorical=True)
    assert narrow.width < 25 < rows.width and narrow.schema["metric"] == pl.Categorical
    assert narrow.schema["step"] == narrow.schema["model.depth"] == pl.Int32  # half the bytes
    wide = FIGURES["depth"](compacted, tmp_path / "wide", n_boot=50)
    thin = FIGURES["depth"](narrow, tmp_path / "thin", n_boot=50)
    for key in ("best_depth", "best_median_mse", "var_y", "references", "ok", "excluded",
                "note"):
        assert thin[key] == wide[key], key
    assert thin["regime"].equals(wide["regime"]) and thin["table"].equals(wide["table"])
    assert thin["ax"].get_title() == wide["ax"].get_title()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "model.depth=0"], "error: model.depth: must be >= 1, got 0"),
        (["--set", "model.name=gpt"], "error: model.name: unknown model 'gpt'; valid choices: " + ", ".join(MODELS.names())),
        (["--preset", "huge"], "error: --preset: unknown 'huge'; valid choices: smoke, cpu, reduced, gpu, paper"),
        (["--study", "nope"], "error: --study: unknown 'nope'; valid choices: least_squares"),
        (["--set", "model.layer_norm=maybe"], "expected a boolean (true/false)"),
        (["--storage", "/proc/forbidden"], "error: --storage: cannot write to '/proc/forbidden'"),
        (["--set", "task.name=nope"], "error: task.name: unknown task 'nope'; valid choices: "
         + ", ".join(TASKS.names())),
        (["--set", "model.colour=red"], "error: --set model.colour: unknown field of model 'transformer'; valid fields:"),
        (["--set", "model.width=wide"], "error: --set model.width: expected an integer"),
        (["--set", "model.heads=3"], "error: model.heads: must divide width=8, got 3"),
        (["--set", "train.steps=-5"], "error: train.steps: must be >= 0, got -5"),
        (["--set", "seed"], "error: --set 'seed': expected KEY=VALUE"),
        (["--set", "train.lr=__import__('os').getpid()"],  # parsed, never evaluated
         "error: --set train.lr: expected a number"),
        (["--num-samples", "0"], "error: --num-samples: must be >= 1, got 0"),
        (["--pack", "0"], "error: --pack: must be an integer >= 1, auto or gpu, got 0"),
        (["--max-concurrent", "0"], "error: --max-concurrent: must be >= 1"),
        (["--optuna-journal", "j.log", "--address", "auto"],
         "error: --optuna-journal: conflicts with --address"),
        (["--optuna-journal", "j.log"], "error: --optuna-journal: only searches use it"),
        (["--plan-gpus", "8"], "error: --plan-gpus: only plans; use it with --dry-run"),
    ],
)
def test_bad_input_stops_before_any_trial(tmp_path, capsys, argv, message):
    """No Ray is started and nothing is written: one line names the field and the choices."""
    import ray

    base = ["--preset", "smoke", "--storage", str(tmp_path / "r")]
    was_running = ray.is_initialized()
    assert SWEEP.main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
    assert ray.is_initialized() == was_running
    assert not (tmp_path / "r" / "depth_scaling").exists()


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    # (one study: the file's paper preset has members of ~30 GB, which a small machine's
    # dry run refuses, icl_core.planning.memory; tests/test_memory.py)
    assert SWEEP.main(["--preset", "paper", "--dry-run", "--storage", str(tmp_path),
                       "--study", "least_squares"]) == 0
    out = capsys.readouterr().out
    assert "depth_scaling/least_squares [paper]: " in out and "trials (30 configs)" in out
    assert "member(s) per trial (--pack auto), one after another" in out  # CPU: no stacking
    assert "CPU-h by the cost model" in out and "one pool longest first" in out
    assert "lower bound" in out.splitlines()[-1]
    assert SWEEP.main(["--preset", "cpu", "--dry-run", "--pack", "1", "--study",
                       "least_squares"]) == 0
    assert "least_squares [cpu]: 15 trials (15 configs), 1 member(s) per trial (--pack 1)" \
        in capsys.readouterr().out
    # on a GPU cluster the seeds of one depth share a stack
    assert SWEEP.main(["--preset", "cpu", "--dry-run", "--pack", "3", "--plan-gpus", "1",
                       "--study", "least_squares"]) == 0
    assert "5 trials (15 configs), 3 member(s) per trial (--pack 3), 5 stacks of 3 or fewer " \
        "trained at once, 1 CPU + 0.2 GPU per trial" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def test_diverged_members_are_counted_in_one_packed_trial(ray_session, tmp_path, capsys):
    # progress reports are throttled, so the count travels as a running total per trial
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", str(tmp_path),
            "--no-figures", "--pack", "4", "--set", "train.lr=1e30"]  # float32 overflows
    assert SWEEP.main(argv) == 1  # nothing but diverged members: exit status 1
    out, err = capsys.readouterr()
    assert "every member diverged: exit status 1" in err
    assert "1/1 trials done, 0 running, 0 failed, 4 members diverged" in out
    assert "finished: 0 ok, 4 diverged, 0 failed, 0 missing" in out
