"""Faults injected for real: a trial's worker SIGKILLed mid-training resumes from its last
checkpoint (a grid's: in the row store) with the same numbers; checkpoints are atomic and
never unpickle code."""

from __future__ import annotations

import glob
import json
import os
import re
import threading
import time
from pathlib import Path

import polars as pl
import pytest
import torch
from conftest import tiny_member
from faults import kill, raylet_pid, trial_workers
from ray.tune.experiment import Trial

from icl_core.running.ray_launch import Progress, run_tune
from icl_core.running.store_checkpoints import FOLDER
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.running.tune_trainable import CHECKPOINT_FILE, load_state, save_state
from icl_core.spec.config import resolve_member

ROW_KEYS = ["metric", "statistic", "predictor", "step", "position", "infer_iter", "test_dist"]


def member():
    """float64 on the CPU, long enough to be killed between checkpoints."""
    return resolve_member({
        "task": {"name": "linear_regression", "dim": 3, "n_points": 6},
        "model": {"name": "transformer", "width": 16, "depth": 2, "heads": 2},
        "train": {"steps": 600, "batch_size": 16, "report_every": 50, "checkpoint_every": 100,
                  "schedule": "step", "step_size": 200, "gamma": 0.7},
        "eval": {"n_prompts": 100, "every": 300, "baselines": ["ols"]},
        "dtype": "float64", "device": "cpu",
    })


def rows(storage: Path) -> pl.DataFrame:
    (path,) = glob.glob(str(storage / "sw" / "st" / "rows" / "*.parquet"))
    return pl.read_parquet(path).select([*ROW_KEYS, "value", "status"]).sort(ROW_KEYS)


def test_killed_trial_worker_resumes_from_its_checkpoint_with_identical_rows(ray_session,
                                                                             tmp_path):
    m = member()
    threads = torch.get_num_threads()
    try:  # the uninterrupted reference, in this process, with the trial's one thread
        run_trial(TrialSpec("sw", "st", str(tmp_path / "ref"), [m.to_dict()]))
    finally:
        torch.set_num_threads(threads)

    spec = TrialSpec("sw", "st", str(tmp_path / "run"), [m.to_dict()])
    tune_dir = tmp_path / "tune"
    progress = []
    runner = threading.Thread(target=lambda: progress.append(
        run_tune([spec], "kill", str(tune_dir), None)))
    runner.start()
    raylet = raylet_pid()
    killed = None
    deadline = time.time() + 120
    while killed is None and time.time() < deadline and runner.is_alive():
        if glob.glob(str(tmp_path / "run" / "sw" / "st" / FOLDER / "*.pt")):
            for pid in trial_workers(raylet):
                if kill(pid):  # mid-training, after at least one checkpoint
                    killed = pid
        time.sleep(0.05)
    runner.join(timeout=300)
    assert killed is not None, "the trial finished before a checkpoint could be seen"
    assert not runner.is_alive()
    # Tune restarted the trial once, and the progress line counted it; the restarted attempt
    # went on from the member's checkpoint in the store (at step 100 or later): its first
    # report, made at once, is past step 100 (from step 0 it would be step 50)
    assert progress[0].restarts == 1 and progress[0].done == 1 and not progress[0].running
    (result,) = tune_dir.glob("*/*/result.json")
    after = [r["step"] for r in map(json.loads, result.read_text().splitlines())
             if r["pid"] != killed]
    assert after and after[0] > 100, after

    got, ref = rows(tmp_path / "run"), rows(tmp_path / "ref")
    # one row file, every row once: train-loss rows before the checkpoint come back from it,
    # the ones after it are recomputed, none twice and none missing
    assert got.select(ROW_KEYS).is_duplicated().sum() == 0
    assert got.select(ROW_KEYS).equals(ref.select(ROW_KEYS))
    assert set(got["status"]) == {"ok"}
    # model, optimizer, scheduler and data stream came back: the same numbers, bit for bit
    assert got["value"].to_list() == ref["value"].to_list()


def test_a_grid_trial_of_tiny_members_hands_tune_no_checkpoint_and_leaves_no_file(ray_session,
                                                                                 tmp_path):
    """Each member checkpoints at step 10 of 20: a grid trial writes its members' states to
    the store (at most a minute apart: tests/test_store_checkpoints.py), never to Tune
    (each checkpoint made its driver save the whole experiment state), and removes each
    member's file with its rows."""
    members = [resolve_member(tiny_member(seed=s)).to_dict() for s in range(4)]
    spec = TrialSpec("sw", "st", str(tmp_path / "run"), members)
    progress = run_tune([spec], "tiny", str(tmp_path / "tune"), None)
    assert progress.done == 1 and not progress.failed
    assert glob.glob(str(tmp_path / "tune" / "*" / "*" / "result.json"))  # Tune's own files
    assert not glob.glob(str(tmp_path / "tune" / "*" / "*" / "checkpoint_*"))
    assert not glob.glob(str(tmp_path / "run" / "sw" / "st" / FOLDER / "*"))
    assert len(glob.glob(str(tmp_path / "run" / "sw" / "st" / "rows" / "*.parquet"))) == 4


def test_checkpoints_are_atomic_and_loaded_without_unpickling_code(tmp_path):
    state = {"step": 3, "weights": torch.arange(4.0)}
    save_state(str(tmp_path), state)
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]  # written, then renamed
    assert torch.equal(load_state(str(tmp_path))["weights"], state["weights"])

    class Payload:  # what a tampered checkpoint could carry
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"step": Payload()}, tmp_path / CHECKPOINT_FILE)
    with pytest.raises(Exception, match="[Ww]eights only load failed|Unsupported"):
        load_state(str(tmp_path))


def test_a_restored_runs_progress_counts_its_ended_trials_and_its_own_time(capsys):
    """Tuner.restore (a search's --resume) unpickles the Progress callback as it was when the
    first run started: the line must count the trials that run had ended and time this run."""
    progress = Progress("s", total=3, every_s=0.0)
    progress.start -= 5000  # the first run began long ago
    progress.setup()  # Tune calls it at the start of each fit()
    trials = [Trial("__fake", stub=True) for _ in range(3)]
    trials[0].set_status(Trial.TERMINATED)
    trials[1].set_status(Trial.ERROR)
    progress.on_step_begin(0, trials)
    progress.on_trial_start(0, trials, trials[2])
    assert "1/3 trials done, 1 running, 1 failed" in capsys.readouterr().out
    progress.start = time.time() - 100  # this run's own 100 s: half of the one trial left
    progress.on_trial_result(0, trials, trials[2], {"progress": 0.5})
    line = capsys.readouterr().out
    # not 5000 s (1h23m), not 2.5 trials left (4m10s): 100 s of the run's own, 100 s to go
    assert re.search(r"elapsed 1m4[0-2]s, ETA 1m4[0-2]s$", line.strip()), line
