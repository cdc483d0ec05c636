"""Trial checkpoints kept in the row store (icl_core.running.store_checkpoints): what a trial
leaves when it is cut off, and how the next run goes on from it, without Tune and as a Tune
grid trial. The kill of a real process is in tests/test_run_without_ray.py and, under Tune,
tests/test_reliability.py."""

from __future__ import annotations

import io
import json
import logging

import numpy as np
import pyarrow.fs as pafs
import pytest
import torch
from conftest import tiny_member

from analysis.reading.store import read_rows
from icl_core.running import store_checkpoints
from icl_core.running.store_checkpoints import (
    FOLDER,
    RESUMABLE,
    StoreReporter,
    checkpoint_path,
    clear_leftovers,
    origin,
    run_with_store_checkpoints,
    saved_state,
    with_checkpoints,
)
from icl_core.running.trial import TrialFailed, TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store


class Cut(Exception):
    pass


def members(widths=(8, 8), seeds=(0, 1)) -> list[dict]:
    """Tiny float64 members: 12 steps, a checkpoint every 4."""
    return [resolve_member(tiny_member(seed=seed, dtype="float64", device="cpu",
                                       train__steps=12, train__report_every=4,
                                       train__checkpoint_every=4, model__width=width,
                                       model__depth=2, model__heads=2)).to_dict()
            for width, seed in zip(widths, seeds, strict=True)]


def values(storage: str) -> tuple[list, np.ndarray]:
    rows, _ = read_rows(storage, "s", "t")
    rows = rows.sort(["config_hash", "metric", "predictor", "statistic", "step", "position"],
                     nulls_last=True)
    return rows["metric"].to_list(), np.array(rows["value"].to_list(), dtype=float)


def assert_same_rows(whole: str, storage: str) -> None:
    """The rows in `storage` are those in `whole`, metric for metric, bit for bit."""
    (metrics_whole, values_whole), (metrics_cut, values_cut) = values(whole), values(storage)
    assert metrics_whole == metrics_cut
    np.testing.assert_array_equal(values_cut, values_whole)


# how the trial is run: (members' widths, stack, interleave), the steps its checkpoint files
# hold when it is cut at its first report of step 8 (of the second member, one after the
# other), and the members finished by then
WAYS = {
    "one after the other": ((8, 8), "never", False, {1: 8}, {0}),
    "stacked": ((8, 8), "always", False, {0: 8, 1: 8}, set()),
    # two shapes trained at once: the checkpoint holds the other group's latest state (step 4)
    "interleaved": ((8, 16), "never", True, {0: 8, 1: 4}, set()),
}


@pytest.mark.parametrize("way", WAYS)
def test_a_trial_cut_off_goes_on_from_its_checkpoints_to_an_uninterrupted_runs_rows(
        way, tmp_path, monkeypatch):
    """A finished member's file goes with its rows; the others stay where the trial was cut;
    the next run resumes each from its own step (it reports no step at or before it) and
    writes the rows of an uninterrupted run, bit for bit, leaving no file."""
    cut_and_resumed(str(tmp_path / "whole"), str(tmp_path / "cut"), monkeypatch, *WAYS[way])


def cut_and_resumed(whole: str, storage: str, monkeypatch, widths=(8, 8), stack="never",
                    interleave=False, held=None, finished=None) -> None:
    """The test above, a trial's rows in `whole` and its cut run in `storage` (any store
    URI: tests/test_s3.py runs it on S3)."""
    held, finished = held or {1: 8}, finished if finished is not None else {0}
    raw = members(widths)
    run_trial(TrialSpec("s", "t", whole, raw, stack=stack, interleave=interleave))
    spec = TrialSpec("s", "t", storage, raw, stack=stack, interleave=interleave)
    store = Store(spec.storage)
    write = StoreReporter(store, spec, min_s=0.0)

    def cut_at_step_8(metrics, state):
        write(metrics, state)
        if state is not None and metrics["step"] == 8 and \
                (stack != "never" or interleave or metrics["member"] == 1):
            raise Cut

    with pytest.raises(Cut):
        run_trial(spec, cut_at_step_8)
    hashes = spec.hashes
    assert store.finished("s", "t") == {hashes[k] for k in finished}
    state = saved_state(store, spec)
    assert {h: r["step"] for h, r in state["runs"].items()} == \
        {hashes[k]: step for k, step in held.items()}
    paths = [checkpoint_path(store, "s", "t", h) for h in hashes]
    assert [i.type == pafs.FileType.File for i in store.fs.get_file_info(paths)] == \
        [k in held for k in range(len(hashes))]

    rest = [k for k in range(len(raw)) if k not in finished]  # as the planner skips the
    spec_rest = TrialSpec("s", "t", storage, [raw[k] for k in rest], stack=stack,  # finished
                          interleave=interleave)
    trained = []  # the steps the resumed run reported: none at or before a saved one
    real = store_checkpoints.run_trial_results

    def reporting(spec, report, state):
        def both(metrics, checkpoint):
            if not metrics.get("member_done"):
                trained.append(metrics["step"])
            report(metrics, checkpoint)
        return real(spec, both, state)

    monkeypatch.setattr(store_checkpoints, "run_trial_results", reporting)
    statuses, resumed, failure = run_with_store_checkpoints(spec_rest)
    assert statuses == {hashes[k]: "ok" for k in rest} and failure is None
    assert resumed == {hashes[k]: step for k, step in held.items()}
    assert trained and min(trained) > min(held.values()), trained
    assert saved_state(store, spec) is None
    assert_same_rows(whole, storage)


def one_member_cut_at_step_8(tmp_path) -> tuple[TrialSpec, StoreReporter]:
    """One member's uninterrupted rows in tmp_path/whole, and its run in tmp_path/cut cut off
    at step 8 of 12 with its state there (written by the returned reporter)."""
    raw = members()[:1]
    run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), raw))
    spec = TrialSpec("s", "t", str(tmp_path / "cut"), raw)
    write = StoreReporter(Store(spec.storage), spec, min_s=0.0)

    def cut_at_step_8(metrics, state):
        write(metrics, state)
        if state is not None and metrics["step"] == 8:
            raise Cut

    with pytest.raises(Cut):
        run_trial(spec, cut_at_step_8)
    return spec, write


@pytest.mark.slow  # ~15 s; tests/test_reliability.py's worker kill tells a resume under Tune
# from a restart at step 0 in the default run
def test_a_grid_trial_under_tune_goes_on_from_the_stores_checkpoint(ray_session, tmp_path):
    """What a killed driver or batch job leaves (a member's file at step 8 of 12), a grid
    trial under Ray Tune resumes: its first report to Tune is past step 8, Tune is handed no
    checkpoint (the store holds them), and the rows are an uninterrupted run's, bit for bit,
    with no file left."""
    from icl_core.running.ray_launch import run_tune

    spec, write = one_member_cut_at_step_8(tmp_path)
    store = write.store
    assert saved_state(store, spec)["runs"][spec.hashes[0]]["step"] == 8
    progress = run_tune([spec], "resume", str(tmp_path / "tune"), None)
    assert progress.done == 1 and not progress.failed and not progress.restarts
    (result,) = (tmp_path / "tune").glob("*/*/result.json")
    steps = [json.loads(line)["step"] for line in result.read_text().splitlines()]
    assert steps[0] == 12, steps  # the trial's first report is at once: after the resume
    assert not list((tmp_path / "tune").glob("*/*/checkpoint_*"))
    assert saved_state(store, spec) is None
    assert_same_rows(str(tmp_path / "whole"), spec.storage)


def test_writes_are_spaced_by_min_s_and_a_member_is_written_again_only_when_it_moved(tmp_path):
    """The first checkpoint at once, none within min_s of it; a state at a step already
    written is not written again (a stack reporting every member's latest state); a member
    done with its rows (ok) has its file removed."""
    spec = TrialSpec("s", "t", str(tmp_path / "store"), members()[:1], stack="never")
    store, h = Store(spec.storage), spec.hashes[0]

    def state(step, value):
        return {"runs": {h: {"step": step, "weights": torch.full((2,), float(value))}}}

    def on_file():
        run = saved_state(store, spec)["runs"][h]
        return run["step"], run["weights"][0].item()

    spaced = StoreReporter(store, spec, min_s=3600.0)
    spaced({"member": 0, "step": 4}, state(4, 1))
    spaced({"member": 0, "step": 8}, state(8, 2))  # within the hour: not written
    assert on_file() == (4, 1.0)

    report = StoreReporter(store, spec, min_s=0.0)
    report({"member": 0, "step": 8}, state(8, 2))
    report({"member": 0, "step": 8}, state(8, 3))  # the same step again: not written
    assert on_file() == (8, 2.0)
    report({"member": 0, "step": 12}, state(12, 4))
    assert on_file() == (12, 4.0)
    report({"member": 0, "step": 12, "member_done": True, "status": "ok"}, None)
    assert saved_state(store, spec) is None


def test_a_checkpoint_of_other_code_or_one_that_does_not_load_is_set_aside(tmp_path, caplog):
    """A member's rows come from one code and one device: a file written by other code (its
    digest of the core's sources), on another device or cut short is removed with a warning
    naming why, and the member starts again."""
    spec = TrialSpec("s", "t", str(tmp_path / "store"), members()[:1])
    store, h = Store(spec.storage), spec.hashes[0]
    StoreReporter(store, spec, min_s=0.0)({"member": 0, "step": 4}, {"runs": {h: {"step": 4}}})
    assert saved_state(store, spec) is not None  # its own code resumes it
    buffer = io.BytesIO()
    torch.save({**origin(spec.members[0]), "code": "0123456789abcdef", "run": {"step": 4}},
               buffer)
    store.write_bytes(checkpoint_path(store, "s", "t", h), buffer.getvalue())
    with caplog.at_level(logging.WARNING):
        assert saved_state(store, spec) is None
    assert "'code': '0123456789abcdef'" in caplog.text and "trains from its first step" in \
        caplog.text
    assert not store.fs.get_file_info(checkpoint_path(store, "s", "t", h)).size

    # a state from another device (on CUDA its origin names the GPU: tests/test_cuda_graph.py)
    buffer = io.BytesIO()
    torch.save({**origin(spec.members[0]), "device": "cuda:0 (NVIDIA H100 80GB HBM3)",
                "run": {"step": 4}}, buffer)
    store.write_bytes(checkpoint_path(store, "s", "t", h), buffer.getvalue())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert saved_state(store, spec) is None
    assert "'device': 'cuda:0 (NVIDIA H100 80GB HBM3)'" in caplog.text

    store.write_bytes(checkpoint_path(store, "s", "t", h), b"cut short")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert saved_state(store, spec) is None
    assert "does not load" in caplog.text
    statuses, resumed, failure = run_with_store_checkpoints(spec)
    assert statuses == {h: "ok"} and resumed == {} and failure is None


def test_what_a_killed_run_left_is_cleared_and_an_unfinished_members_file_stays(tmp_path):
    """A run killed between a member's rows and the removal of its file, or during a write
    (a `*.tmp-*` file): the planner clears both (`clear_leftovers`: a Tune pool's, of the
    members its driver claimed, and run_without_ray's); an unfinished member's file stays,
    and a partial write of a member another driver holds."""
    raw = members()
    spec = TrialSpec("s", "t", str(tmp_path / "store"), raw[:1])
    run_trial(spec)
    store = Store(spec.storage)
    both = TrialSpec("s", "t", spec.storage, raw)
    for h in both.hashes:
        store.write_bytes(checkpoint_path(store, "s", "t", h), b"state")
    partial = f"{both.hashes[1]}.pt.tmp-1-ab"
    store.write_bytes(checkpoint_path(store, "s", "t", both.hashes[1]) + ".tmp-1-ab", b"st")
    folder = tmp_path / "store" / "s" / "t" / FOLDER
    clear_leftovers(store, "s", "t", hashes=[both.hashes[0]])  # the other is another's
    assert sorted(p.name for p in folder.iterdir()) == [f"{both.hashes[1]}.pt", partial]
    clear_leftovers(store, "s", "t")
    assert sorted(p.name for p in folder.iterdir()) == [f"{both.hashes[1]}.pt"]


def test_a_failed_member_keeps_its_checkpoint_and_its_retry_goes_on_from_it(tmp_path):
    """A member recorded failed (here: a retry on a device that is not there; the device is
    not in the hash) is unfinished: its file stays through the failure's report and the
    planner's clearing, and the next run resumes it to an uninterrupted run's rows."""
    spec, write = one_member_cut_at_step_8(tmp_path)
    store, h = write.store, spec.hashes[0]
    with pytest.raises(TrialFailed):
        run_trial(TrialSpec("s", "t", spec.storage, [{**spec.members[0], "device": "cuda:99"}]))
    assert store.member_status("s", "t", [h])[h][0] == "failed"
    write({"member": 0, "step": 8, "member_done": True, "status": "failed"}, None)
    clear_leftovers(store, "s", "t")
    assert saved_state(store, spec)["runs"][h]["step"] == 8
    # the study's report says it goes on from there (and of a member with no file, nothing)
    (status, reason), = with_checkpoints(store, "s", "t", store.member_status(
        "s", "t", [h])).values()
    assert status == "failed" and reason.endswith(RESUMABLE)
    other = {"0123456789abcdef": ("missing", "no row file")}
    assert with_checkpoints(store, "s", "t", other) == other
    statuses, resumed, failure = run_with_store_checkpoints(spec)
    assert statuses == {h: "ok"} and resumed == {h: 8} and failure is None
    assert saved_state(store, spec) is None
    assert_same_rows(str(tmp_path / "whole"), spec.storage)


def test_a_member_whose_rows_could_not_be_written_keeps_its_checkpoint(tmp_path):
    """A storage fault reports the member done without rows: its file stays, so the next run
    goes on from it."""
    spec = TrialSpec("s", "t", str(tmp_path / "store"), members()[:1])
    store, h = Store(spec.storage), spec.hashes[0]
    report = StoreReporter(store, spec, min_s=0.0)
    report({"member": 0, "step": 4}, {"runs": {h: {"step": 4}}})
    report({"member": 0, "step": 12, "member_done": True, "status": "failed",
            "storage_error": "ENOSPC"}, None)
    assert saved_state(store, spec)["runs"][h]["step"] == 4


def test_the_code_digest_moves_with_a_source_edit_or_rename_and_not_otherwise(tmp_path):
    """What a checkpoint's origin names as its code: the same sources give the same digest;
    one changed byte, or a file renamed, another."""
    from icl_core.storage.provenance import code_digest

    def digest(files: dict) -> str:
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return code_digest(root)

    base = {"a.py": "x = 1\n", "sub/b.py": "y = 2\n"}
    assert digest(base) == digest(dict(base)) != digest({**base, "a.py": "x = 2\n"})
    assert digest(base) != digest({"c.py": "x = 1\n", "sub/b.py": "y = 2\n"})
    assert code_digest() == code_digest() and len(code_digest()) == 16


def test_a_studys_report_names_the_unfinished_members_that_go_on_from_a_checkpoint(tmp_path,
                                                                                   caplog):
    """After Ctrl-C or a kill, a grid study's report (icl_core.running.study_report) adds to
    each missing member with a file that the same command goes on from it; not to the
    others."""
    from icl.catalog import load_sweep
    from icl_core.running.plans import Plan
    from icl_core.running.study_report import report_study

    sweep = load_sweep("depth_scaling")
    study = sweep.study("least_squares")
    members = study.members("smoke")
    store = Store(str(tmp_path))
    store.write_bytes(checkpoint_path(store, sweep.name, study.name, members[0].hash), b"state")
    with caplog.at_level(logging.INFO):
        outcome = report_study(sweep, Plan(study, members), store)
    assert outcome.counts["missing"] == len(members)
    lines = [r.getMessage() for r in caplog.records if "  missing " in r.getMessage()]
    assert len(lines) == len(members)
    assert [line.endswith(RESUMABLE) for line in lines] == [
        members[0].hash in line for line in lines]
