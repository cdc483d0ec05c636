"""A store nobody loses work in: row files are trusted only when they verify; the others are
quarantined (kept, with their reason) and their configs trained again."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import tiny_member

from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store, UntrustedRows, rows_table


def two_members():
    return [resolve_member(tiny_member(seed=s)).to_dict() for s in (0, 1)]


def test_truncated_and_garbage_row_files_are_quarantined_and_their_configs_retrained(
        tmp_path, capsys):
    spec = TrialSpec("sw", "st", str(tmp_path), two_members())
    assert set(run_trial(spec).values()) == {"ok"}
    store = Store(str(tmp_path))
    truncated, garbage = (Path(store.rows_path("sw", "st", h)) for h in spec.hashes)
    good = truncated.read_bytes()
    truncated.write_bytes(good[: len(good) // 2])
    garbage.write_bytes(b"PAR1 not parquet at all" * 20)
    capsys.readouterr()

    assert store.finished("sw", "st") == set()  # neither is trusted
    err = capsys.readouterr().err
    assert str(truncated) in err and str(garbage) in err and "quarantine" in err
    quarantined = sorted((tmp_path / "sw" / "st" / "quarantine").glob("*.parquet"))
    assert len(quarantined) == 2
    assert {q.read_bytes() for q in quarantined} == {good[: len(good) // 2],
                                                      b"PAR1 not parquet at all" * 20}
    for q in quarantined:  # the reason beside each, naming the file it came from
        reason = Path(f"{q}.reason.txt").read_text()
        assert "unreadable" in reason and str(tmp_path / "sw" / "st" / "rows") in reason

    assert set(run_trial(spec).values()) == {"ok"}  # both trained again
    assert store.finished("sw", "st") == set(spec.hashes)
    for h in spec.hashes:
        assert pq.read_table(store.rows_path("sw", "st", h)).num_rows > 10


def test_a_row_file_without_the_members_last_row_or_of_another_config_is_not_finished(
        tmp_path, capsys):
    spec = TrialSpec("sw", "st", str(tmp_path), two_members())
    store = Store(str(tmp_path))
    partial, other = spec.hashes
    # a member's rows written without its final steps_completed row (an old or foreign writer)
    rows = [{"metric": "mse", "statistic": "mean", "predictor": "model", "value": 1.0, "step": 20}]
    store.write_rows(store.rows_path("sw", "st", partial),
                     rows_table(rows, {"config_hash": partial, "status": "ok"}))
    # a complete file stored under the other config's name
    done = [*rows, {"metric": "steps_completed", "statistic": "value", "value": 20.0, "step": 20}]
    store.write_rows(store.rows_path("sw", "st", other),
                     rows_table(done, {"config_hash": partial, "status": "ok"}))
    with pytest.raises(UntrustedRows, match="no steps_completed row"):
        store.read_status(store.rows_path("sw", "st", partial))
    statuses = store.member_status("sw", "st", spec.hashes)
    assert {s for s, _ in statuses.values()} == {"missing"}
    err = capsys.readouterr().err
    assert "no steps_completed row" in err and f"not {other}" in err
    assert len(list((tmp_path / "sw" / "st" / "quarantine").glob("*.reason.txt"))) == 2


def test_a_garbage_failed_record_reads_as_missing_not_a_crash(tmp_path, capsys):
    store = Store(str(tmp_path))
    path = Path(store.rows_path("sw", "st", "abc", "failed"))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"junk")
    assert store.member_status("sw", "st", ["abc"])["abc"][0] == "missing"
    assert str(path) in capsys.readouterr().err and not path.exists()
