"""Trial checkpoints kept in the row store (icl_core.running.store_checkpoints): what a trial run
without Tune leaves when it is cut off, and how the next run goes on from it. The kill of a real
process is in tests/test_run_without_ray.py."""

from __future__ import annotations

import numpy as np
import pyarrow.fs as pafs
import pytest
import torch
from conftest import tiny_member

from analysis.reading.store import read_rows
from icl_core.running.store_checkpoints import (
    checkpoint_path,
    run_with_store_checkpoints,
    saved_state,
    store_reporter,
)
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store


class Cut(Exception):
    pass


def members() -> list[dict]:
    """Two seeds of a tiny float64 member: 12 steps, a checkpoint every 4."""
    return [resolve_member(tiny_member(seed=seed, dtype="float64", device="cpu",
                                       train__steps=12, train__report_every=4,
                                       train__checkpoint_every=4)).to_dict()
            for seed in (0, 1)]


def values(storage: str) -> tuple[list, np.ndarray]:
    rows, _ = read_rows(storage, "s", "t")
    rows = rows.sort(["config_hash", "metric", "predictor", "statistic", "step", "position"],
                     nulls_last=True)
    return rows["metric"].to_list(), np.array(rows["value"].to_list(), dtype=float)


def test_a_trial_cut_during_its_second_member_goes_on_from_its_checkpoint(tmp_path):
    """One member after the other (stack never): the first one's file goes with its rows, the
    second's stays where the trial was cut, at step 8; the next run resumes it there only and
    writes the rows of an uninterrupted run, bit for bit, leaving no file."""
    cut_and_resumed(str(tmp_path / "whole"), str(tmp_path / "cut"))


def cut_and_resumed(whole: str, storage: str) -> None:
    """The test above, a trial's rows in `whole` and its cut run in `storage` (any store
    URI: tests/test_s3.py runs it on S3)."""
    raw = members()
    run_trial(TrialSpec("s", "t", whole, raw, stack="never"))
    spec = TrialSpec("s", "t", storage, raw, stack="never")
    store = Store(spec.storage)
    write = store_reporter(store, spec, min_s=0.0)

    def cut_at_second_members_step_8(metrics, state):
        write(metrics, state)
        if state is not None and metrics["member"] == 1 and metrics["step"] == 8:
            raise Cut

    with pytest.raises(Cut):
        run_trial(spec, cut_at_second_members_step_8)
    paths = [checkpoint_path(store, "s", "t", h) for h in spec.hashes]
    assert [i.type for i in store.fs.get_file_info(paths)] == [pafs.FileType.NotFound,
                                                                pafs.FileType.File]
    assert store.finished("s", "t") == {spec.hashes[0]}
    assert {h: r["step"] for h, r in saved_state(store, spec)["runs"].items()} == \
        {spec.hashes[1]: 8}

    rest = TrialSpec("s", "t", spec.storage, raw[1:], stack="never")  # as the planner skips
    statuses, resumed = run_with_store_checkpoints(rest)  # the finished member
    assert statuses == {spec.hashes[1]: "ok"} and resumed == {spec.hashes[1]: 8}
    assert saved_state(store, spec) is None
    (metrics_whole, values_whole), (metrics_cut, values_cut) = values(whole), values(storage)
    assert metrics_whole == metrics_cut
    np.testing.assert_array_equal(values_cut, values_whole)


def test_writes_are_spaced_by_min_s_and_a_member_is_written_again_only_when_it_moved(tmp_path):
    """The first checkpoint at once, none within min_s of it; a state at a step already
    written is not written again (a stack reporting every member's latest state); a member
    done has its file removed."""
    spec = TrialSpec("s", "t", str(tmp_path / "store"), members()[:1], stack="never")
    store, h = Store(spec.storage), spec.hashes[0]

    def state(step, value):
        return {"runs": {h: {"step": step, "weights": torch.full((2,), float(value))}}}

    def on_file():
        run = saved_state(store, spec)["runs"][h]
        return run["step"], run["weights"][0].item()

    spaced = store_reporter(store, spec, min_s=3600.0)
    spaced({"member": 0, "step": 4}, state(4, 1))
    spaced({"member": 0, "step": 8}, state(8, 2))  # within the hour: not written
    assert on_file() == (4, 1.0)

    report = store_reporter(store, spec, min_s=0.0)
    report({"member": 0, "step": 8}, state(8, 2))
    report({"member": 0, "step": 8}, state(8, 3))  # the same step again: not written
    assert on_file() == (8, 2.0)
    report({"member": 0, "step": 12}, state(12, 4))
    assert on_file() == (12, 4.0)
    report({"member": 0, "step": 12, "member_done": True}, None)
    assert saved_state(store, spec) is None
