"""Storage faults for real (a full tmpfs, an unwritable folder): a member whose rows cannot be
stored is recorded failed with its errno after a few tries, the trial does not fail (Tune
does not train it again), no temporary file is left, a checkpoint is never half-written."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from conftest import tiny_member
from faults import full_tmpfs, unwritable_dir

from icl_core.running.ray_launch import run_tune
from icl_core.running.trial import TrialSpec, run_trial_results
from icl_core.running.tune_trainable import CHECKPOINT_FILE, load_state, save_state
from icl_core.spec.config import resolve_member
from icl_core.storage.member_store import WRITE_TRIES
from icl_core.storage.store import Store


def spec_at(storage: Path) -> TrialSpec:
    return TrialSpec("sw", "st", str(storage), [resolve_member(tiny_member()).to_dict()])


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp" in p.name]


def test_a_full_disk_records_the_member_failed_with_enospc_and_leaves_no_temporary_file(
        tmp_path, capsys):
    storage = tmp_path / "full"
    with full_tmpfs(storage) as filler:
        spec = spec_at(storage)
        t0 = time.monotonic()
        (result,) = run_trial_results(spec).values()  # does not raise
        assert time.monotonic() - t0 >= 0.5 * (2 ** (WRITE_TRIES - 1) - 1)  # backed off
        assert result.status == "failed" and "ENOSPC (errno 28)" in result.reason
        assert not leftovers(storage)
        assert Store(str(storage)).finished("sw", "st") == set()
        assert "ENOSPC" in capsys.readouterr().err
        filler.unlink()  # space again: the next run trains it
        (result,) = run_trial_results(spec).values()
        assert result.status == "ok" and Store(str(storage)).finished("sw", "st") == {
            spec.hashes[0]}


def test_a_checkpoint_is_never_half_written_on_a_full_disk(tmp_path):
    folder = tmp_path / "ckpt"
    with full_tmpfs(folder, "256k") as filler:
        filler.unlink()
        first = {"w": torch.arange(8.0)}
        save_state(str(folder), first)
        big = {"w": torch.zeros(1_000_000)}  # 4 MB: does not fit
        try:
            save_state(str(folder), big)
            raise AssertionError("a 4 MB checkpoint fitted in 256 kB")
        except (OSError, RuntimeError):
            pass
        assert sorted(p.name for p in folder.iterdir()) == [CHECKPOINT_FILE]  # no .tmp
        assert torch.equal(load_state(str(folder))["w"], first["w"])  # the previous one


def test_an_unwritable_study_folder_fails_the_member_not_the_trial_under_tune(
        ray_session, tmp_path):
    storage = tmp_path / "ro"
    spec = spec_at(storage)
    study = storage / "sw" / "st"
    with unwritable_dir(study):
        (result,) = run_trial_results(spec).values()
        assert result.status == "failed" and "(errno 1" in result.reason  # EPERM / EACCES
        progress = run_tune([spec], "ro", str(tmp_path / "tune"), None)
        assert progress.failed == 0 and progress.restarts == 0  # Tune did not retrain it
        assert not leftovers(study) and not (study / "rows").exists()
    from ray.tune import ExperimentAnalysis

    (experiment,) = (tmp_path / "tune").iterdir()
    (trial,) = ExperimentAnalysis(str(experiment)).trials  # what Tune got back
    last = trial.last_result
    assert last["status"] == "failed" and "storage fault" in last["storage_error"]
    assert Store(str(storage)).member_status("sw", "st", spec.hashes)[spec.hashes[0]][0] \
        == "missing"  # trained again by the next run
