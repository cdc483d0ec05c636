"""Compaction (icl_core.storage.compaction) on real Parquet files: every row kept exactly once, the
resume check unchanged, a compaction killed between its rename and its deletions (and two at
once) still read once and cleaned up by the next, a corrupt compacted file quarantined."""

from __future__ import annotations

import warnings
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from analysis.reading.store import read_rows, scan_rows
from icl_core.running.study_report import compact_study
from icl_core.storage import compaction
from icl_core.storage.compaction import compact, plan_compaction, write
from icl_core.storage.store import LAST_METRIC, Store, rows_table

SWEEP, STUDY = "width_scaling", "ls"


def write_member(store: Store, h: str, status: str = "ok", **config) -> None:
    rows = [{"metric": "train_loss", "value": 1.0 / (i + 1), "step": 10 * i} for i in range(3)]
    rows += [{"metric": "mse", "statistic": "median", "value": 0.5, "step": 20,
              "predictor": "model", "position": p} for p in range(4)]
    rows.append({"metric": LAST_METRIC, "value": 20.0, "step": 20})
    constants = {"sweep": SWEEP, "study": STUDY, "trial_id": f"t-{h}", "member": 0,
                 "config_hash": h, "status": status, "seed": 0,
                 "reason": None if status == "ok" else f"{status}: on purpose", **config}
    store.write_rows(store.rows_path(SWEEP, STUDY, h, status), rows_table(rows, constants))


@pytest.fixture
def store(tmp_path) -> Store:
    """20 members: widths of two types (int, then a float: promoted), a column only some
    have, an all-null one, a diverged and a failed member."""
    s = Store(str(tmp_path / "results"))
    for i in range(16):
        write_member(s, f"{i:016x}", **{"model.width": 8 * (i + 1), "train.eps": None})
    for i in range(16, 18):
        write_member(s, f"{i:016x}", **{"model.width": 2.5 * i, "train.eps": 1e-8,
                                       "task.extra": "x"})
    write_member(s, f"{18:016x}", "diverged", **{"model.width": 8})
    write_member(s, f"{19:016x}", "failed", **{"model.width": 8})
    return s


def frame(store: Store) -> pl.DataFrame:
    rows, _ = read_rows(store.uri, SWEEP, STUDY)
    return rows.select(sorted(rows.columns)).sort("config_hash", "metric", "step", "position")


def folder(store: Store, name: str) -> list[Path]:
    return sorted((Path(store.study_dir(SWEEP, STUDY)) / name).glob("*.parquet"))


def test_compaction_keeps_every_row_exactly_once_and_the_resume_check(store):
    before, statuses = frame(store), store.statuses(SWEEP, STUDY)
    loss = store.final_train_loss(SWEEP, STUDY, f"{3:016x}")
    result = compact(store, SWEEP, STUDY)
    assert result.merged == 19 and result.rows == 19 * 8 and result.removed == 19
    assert folder(store, "rows") == [] and len(folder(store, "compacted")) == 1
    assert len(folder(store, "failed")) == 1  # failed members stay member files (retrained)
    after = frame(store)
    assert after.equals(before) and after.height == 20 * 8
    assert after["model.width"].dtype == pl.Float64
    assert store.statuses(SWEEP, STUDY) == statuses and len(statuses) == 19
    assert statuses[f"{18:016x}"] == ("diverged", "diverged: on purpose")
    assert store.final_train_loss(SWEEP, STUDY, f"{3:016x}") == loss == (20, 1 / 3)
    everyone = [f"{i:016x}" for i in range(21)]
    status = store.member_status(SWEEP, STUDY, everyone)
    assert status[f"{5:016x}"] == ("ok", None)
    assert status[f"{19:016x}"] == ("failed", "failed: on purpose")
    assert status[f"{20:016x}"][0] == "missing"
    # a member finished after the compaction is a member file again; the next one merges it
    write_member(store, f"{20:016x}", **{"model.width": 8})
    assert len(store.finished(SWEEP, STUDY)) == 20
    assert compact(store, SWEEP, STUDY).merged == 1
    assert len(folder(store, "compacted")) == 2 and frame(store).height == 21 * 8
    lazy, coverage = scan_rows(store.uri, SWEEP, STUDY, columns=["value"])
    assert lazy.collect_schema().names() == ["config_hash", "status", "value"]
    assert coverage.read == {"rows": 0, "failed": 1, "compacted": 20}  # where they were read
    assert "21 read (0 rows/, 1 failed/, 20 compacted/)" in coverage.line("s")


def test_a_compaction_killed_before_its_deletions_reads_each_row_once_and_is_cleaned_up(store):
    before, statuses = frame(store), store.statuses(SWEEP, STUDY)
    plan = plan_compaction(store, SWEEP, STUDY)
    # batches of 8: two of one schema (read at once through Polars), then one bringing a new
    # column and a float width (read file by file, and written to a second compacted file)
    written = write(store, plan, batch=8)  # renamed into place; killed before the deletions
    assert len(written) == 2 and len(folder(store, "rows")) == 19
    assert sorted(len(store.read_compacted(p)) for p in written) == [3, 16]
    assert frame(store).equals(before)
    assert store.statuses(SWEEP, STUDY) == statuses
    _, coverage = read_rows(store.uri, SWEEP, STUDY, expected=20)
    assert coverage.found == 20 and coverage.n_read == 20
    result = compact(store, SWEEP, STUDY)
    assert result.merged == 0 and result.removed == 19 and result.paths == []
    assert folder(store, "rows") == [] and frame(store).equals(before)


def test_two_compactions_at_once_read_each_row_once_and_the_next_rewrites_one(store):
    before = frame(store)
    first, second = plan_compaction(store, SWEEP, STUDY), plan_compaction(store, SWEEP, STUDY)
    write(store, first)
    write_member(store, f"{20:016x}", **{"model.width": 8})
    second.merge[f"{20:016x}"] = store.rows_path(SWEEP, STUDY, f"{20:016x}")
    write(store, second)  # holds the first's 19 members again, and one more
    assert len(folder(store, "compacted")) == 2
    assert frame(store).height == before.height + 8
    assert frame(store).filter(pl.col("config_hash") != f"{20:016x}").equals(before)
    result = compact(store, SWEEP, STUDY)
    assert result.rewritten == 1 and result.compacted == 20  # the newer by name
    assert folder(store, "rows") == []
    held = [Store(store.uri).read_compacted(str(p)) for p in folder(store, "compacted")]
    assert sum(map(len, held)) == len(set().union(*held)) == 20  # each hash in one file
    assert frame(store).height == before.height + 8


def test_a_corrupt_compacted_file_is_quarantined_whole_and_its_members_unfinished(store):
    compact(store, SWEEP, STUDY)
    (path,) = folder(store, "compacted")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows, coverage = read_rows(store.uri, SWEEP, STUDY)
    assert rows["config_hash"].unique().to_list() == [f"{19:016x}"]  # the failed/ one only
    assert any(path.name in str(w.message) for w in caught) and len(coverage.skipped) == 1
    assert store.finished(SWEEP, STUDY) == set()
    quarantined = sorted((Path(store.study_dir(SWEEP, STUDY)) / "quarantine").iterdir())
    assert [p.name.endswith(path.name) for p in quarantined] == [True, False]
    assert "unreadable compacted file" in quarantined[1].read_text()
    assert folder(store, "compacted") == []


def test_a_compacted_file_whose_footer_lies_is_quarantined(store):
    plan = plan_compaction(store, SWEEP, STUDY)
    plan.merge = dict(list(plan.merge.items())[:2])
    (path,) = write(store, plan)
    table = pq.read_table(path)
    meta = dict(pq.read_metadata(path).metadata)
    meta[b"icl.compacted"] = meta[b"icl.compacted"].replace(b'"rows": 16', b'"rows": 99')
    pq.write_table(table.replace_schema_metadata(meta), path)
    assert store.finished(SWEEP, STUDY) == {f"{i:016x}" for i in range(19)}  # member files
    assert folder(store, "compacted") == []


def test_a_study_is_compacted_at_its_end_from_compact_at_files(store, monkeypatch, capsys):
    compact_study(store, SWEEP, STUDY)  # 19 < COMPACT_AT: left alone
    assert len(folder(store, "rows")) == 19 and capsys.readouterr().out == ""
    monkeypatch.setattr(compaction, "COMPACT_AT", 10)
    compact_study(store, SWEEP, STUDY)
    assert folder(store, "rows") == []
    assert f"[{SWEEP}/{STUDY}] compacted 19 member files (152 rows)" in capsys.readouterr().out


def test_icl_compact_names_what_it_merged_and_refuses_unknown_names(store, capsys):
    from icl import console
    assert console.main(["compact", SWEEP, "--study", STUDY, "--storage", store.uri]) == 0
    assert f"[{SWEEP}/{STUDY}] compacted 19 member files (152 rows) into " in \
        capsys.readouterr().out
    assert console.main(["compact", "width_scalin", "--storage", store.uri]) == 2
    assert "unknown sweep 'width_scalin'; did you mean 'width_scaling'? valid choices: " \
        "width_scaling" in capsys.readouterr().err
    assert console.main(["compact", SWEEP, "--study", "nope", "--storage", store.uri]) == 2
    assert "unknown study 'nope'; valid choices: ls" in capsys.readouterr().err
