"""The store reader on real Parquet files: lazy scan, schema check, truncated and corrupt
files skipped with a warning naming them, coverage against the plan, URIs (file://, fsspec
memory://), failed/diverged members kept with their reason, the artifact loader re-export."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import icl_core.storage.artifacts
from analysis.reading import store as astore
from analysis.reading.store import (
    MissingResults,
    check_schema,
    load_artifact,
    read_rows,
    scan_rows,
)
from icl_core.storage.artifacts import save_artifacts
from icl_core.storage.store import ROW_SCHEMA, Store, rows_table

SWEEP, STUDY = "width_scaling", "ls"
ROW = {"metric": "mse", "statistic": "median", "value": 0.5, "step": 10, "predictor": "model"}


def member_table(h: str, status: str = "ok", n: int = 3, **config) -> pa.Table:
    constants = {"sweep": SWEEP, "study": STUDY, "trial_id": h, "member": 0, "config_hash": h,
                 "status": status, "reason": None if status == "ok" else f"{status}: on purpose",
                 "seed": 0, **config}
    rows = [{**ROW, "value": 0.5 + i} for i in range(n)]
    return rows_table(rows, constants)


def write(store: Store, h: str, status: str = "ok", **config) -> str:
    path = store.rows_path(SWEEP, STUDY, h, status)
    store.write_rows(path, member_table(h, status, **config))
    return path


@pytest.fixture
def store(tmp_path) -> Store:
    s = Store(str(tmp_path))
    write(s, "h1", **{"model.width": 8})
    write(s, "h2", **{"model.width": 16, "train.eps": 1e-8})
    write(s, "h3", "diverged", **{"model.width": 32})
    write(s, "h4", "failed", **{"model.width": 64})
    return s


def test_scan_is_lazy_and_matches_read(store):
    lazy, coverage = scan_rows(store.uri, SWEEP)
    assert isinstance(lazy, pl.LazyFrame)
    assert coverage.n_read == 4 and coverage.read == {"rows": 3, "failed": 1}
    rows, _ = read_rows(store.uri, SWEEP)
    assert lazy.collect().sort("config_hash", "value").equals(rows.sort("config_hash", "value"))
    assert rows.height == 12 and rows.schema["model.width"] == pl.Int64


def test_failed_and_diverged_members_are_kept_with_their_reason(store):
    rows, coverage = read_rows(store.uri, SWEEP, STUDY)
    reasons = dict(rows.group_by("config_hash").agg(pl.col("reason").first()).iter_rows())
    assert reasons["h3"] == "diverged: on purpose" and reasons["h4"] == "failed: on purpose"
    assert reasons["h1"] is None
    assert coverage.statuses == {"ok": 2, "diverged": 1, "failed": 1}


def test_bad_files_are_skipped_with_a_warning_naming_them(store, capsys):
    folder = Path(store.rows_path(SWEEP, STUDY, "x")).parent
    good = (folder / "h1.parquet").read_bytes()
    (folder / "truncated.parquet").write_bytes(good[: len(good) // 2])
    (folder / "garbage.parquet").write_bytes(b"PAR1 not parquet at all" * 20)
    # a valid footer over corrupt pages: only found when the data are read
    buf = io.BytesIO()
    table = member_table("pages", n=500, **{"model.width": 8})
    pq.write_table(table, buf)
    data = bytearray(buf.getvalue())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for i in range(8, len(data) - footer, 5):
        data[i] ^= 0xFF
    assert pq.read_metadata(io.BytesIO(bytes(data))).num_rows == 500  # the footer is fine
    (folder / "pages.parquet").write_bytes(bytes(data))
    # fixed columns: one missing, one of the wrong type
    pq.write_table(member_table("nocol").drop_columns(["metric"]), folder / "nocol.parquet")
    wrong = member_table("wrongtype")
    wrong = wrong.set_column(wrong.schema.get_field_index("value"), "value",
                             pa.array(["0.5"] * wrong.num_rows))
    pq.write_table(wrong, folder / "wrongtype.parquet")

    with pytest.warns(UserWarning) as caught:
        rows, coverage = read_rows(store.uri, SWEEP, STUDY, expected=10)
    messages = " ".join(str(w.message) for w in caught)
    for name in ("truncated", "garbage", "pages", "nocol", "wrongtype"):
        assert f"{name}.parquet" in messages
    assert "lacks columns ['metric']" in messages and "value is string, expected double" in messages
    assert sorted(rows["config_hash"].unique()) == ["h1", "h2", "h3", "h4"]
    assert coverage.found == 9 and coverage.n_read == 4 and len(coverage.skipped) == 5
    line = coverage.line("x")
    assert "10 expected (in the plan)" in line and "4 read" in line and "5 skipped" in line
    assert "1 without a row file" in line

    # the lazy scan checks footers and schemas up front (corrupt pages fail only on collect)
    with pytest.warns(UserWarning) as caught:
        _, lazy_coverage = scan_rows(store.uri, SWEEP, STUDY)
    assert len(lazy_coverage.skipped) == len(caught) == 4
    assert "pages.parquet" not in " ".join(str(w.message) for w in caught)

    with pytest.warns(UserWarning):
        astore.load_rows(store.uri, SWEEP, STUDY)
    assert "5 skipped" in capsys.readouterr().out


def test_coverage_against_planned_config_hashes(store):
    rows, coverage = read_rows(store.uri, SWEEP, expected=["h1", "h2", "h3", "h4", "h5", "h6"])
    assert coverage.n_expected == 6 and coverage.missing == ["h5", "h6"]
    assert "6 expected (in the plan)" in coverage.line("x") and "2 without" in coverage.line("x")
    _, plain = read_rows(store.uri, SWEEP)
    assert plain.n_expected == 4 and "4 expected (files found)" in plain.line("x")


def test_nothing_readable_raises_missing_results_naming_the_command(tmp_path):
    with pytest.raises(MissingResults, match=r"python sweeps/width_scaling\.py --study ls"):
        read_rows(str(tmp_path), SWEEP, STUDY)
    folder = tmp_path / SWEEP / STUDY / "rows"
    folder.mkdir(parents=True)
    (folder / "bad.parquet").write_bytes(b"junk")
    with pytest.warns(UserWarning, match="bad.parquet"), \
            pytest.raises(MissingResults, match="1 unreadable files skipped"):
        read_rows(str(tmp_path), SWEEP)


def test_config_columns_with_clashing_types_become_strings(tmp_path):
    s = Store(str(tmp_path))
    write(s, "a", **{"model.act": "gelu"})
    write(s, "b", **{"model.act": 3})
    rows, _ = read_rows(str(tmp_path), SWEEP)
    assert rows.schema["model.act"] == pl.String
    assert sorted(rows["model.act"].unique()) == ["3", "gelu"]


def test_file_uri_and_fsspec_memory_uri(store, tmp_path):
    rows, _ = read_rows(f"file://{tmp_path}", SWEEP)
    assert rows.height == 12

    import fsspec

    memory = fsspec.filesystem("memory")
    root = "/analysis-test-store"
    try:
        for folder in ("rows", "failed"):
            local = Path(store.rows_path(SWEEP, STUDY, "x", folder if folder == "failed" else "ok"))
            for path in local.parent.glob("*.parquet"):
                memory.pipe(f"{root}/{SWEEP}/{STUDY}/{folder}/{path.name}", path.read_bytes())
        memory.pipe(f"{root}/{SWEEP}/{STUDY}/rows/cut.parquet", b"PAR1")
        with pytest.warns(UserWarning, match="cut.parquet"):
            from_memory, coverage = read_rows(f"memory://{root}", SWEEP)
        assert coverage.n_read == 4 and len(coverage.skipped) == 1
        assert from_memory.sort("config_hash", "value").equals(rows.sort("config_hash", "value"))
    finally:
        memory.rm(root, recursive=True)


def test_schema_check_accepts_only_row_files():
    assert check_schema(ROW_SCHEMA) is None
    assert check_schema(ROW_SCHEMA.append(pa.field("model.depth", pa.int64()))) is None
    null_reason = ROW_SCHEMA.set(ROW_SCHEMA.get_field_index("reason"), pa.field("reason", pa.null()))
    assert check_schema(null_reason) is None  # an all-null fixed column is fine
    step32 = ROW_SCHEMA.set(ROW_SCHEMA.get_field_index("step"), pa.field("step", pa.int32()))
    assert "step is int32, expected int64" in check_schema(step32)


def test_load_artifact_is_the_core_loader(tmp_path):
    assert load_artifact is icl_core.storage.artifacts.load_artifact
    s = Store(str(tmp_path))
    series = {"attn": [(10, np.ones((2, 2))), (20, np.zeros((2, 2)))]}
    save_artifacts(s, SWEEP, STUDY, "h1", series)
    steps, values = load_artifact(str(tmp_path), SWEEP, STUDY, "h1", "attn")
    assert steps.tolist() == [10, 20] and values.shape == (2, 2, 2)


def test_rows_carry_the_samples_seen_at_their_step(tmp_path):
    """Issue 21: `samples` = step x train.batch_size in every row file, equal to what
    analysis.fitting.sample_complexity derives."""
    from conftest import tiny_member

    from analysis.fitting.sample_complexity import samples_seen
    from analysis.reading.store import read_rows
    from icl_core.running.trial import TrialSpec, run_trial
    from icl_core.spec.config import resolve_member

    member = resolve_member(tiny_member(train__batch_size=8, train__steps=20))
    run_trial(TrialSpec("s", "st", str(tmp_path), [member.to_dict()], hashes=[member.hash]))
    rows, _ = read_rows(str(tmp_path), "s", "st")
    stepped = rows.filter(rows["step"].is_not_null())
    assert stepped["samples"].to_list() == [s * 8 for s in stepped["step"].to_list()]
    assert stepped["samples"].max() == 160
    derived = samples_seen(stepped.drop("samples"))
    assert derived["samples"].to_list() == stepped["samples"].to_list()


def test_compact_read_narrows_integers_that_fit_and_never_wraps_one_that_does_not(store,
                                                                                   tmp_path):
    rows, _ = read_rows(store.uri, SWEEP)
    compact, _ = read_rows(store.uri, SWEEP, categorical=True)
    assert rows.schema["step"] == rows.schema["model.width"] == pl.Int64
    assert compact.schema["step"] == compact.schema["model.width"] == pl.Int32
    assert compact.schema["metric"] == pl.Categorical
    key = ["config_hash", "value"]
    assert compact.sort(key).select(["step", "model.width"]).cast(pl.Int64).equals(
        rows.sort(key).select(["step", "model.width"]))
    big = Store(str(tmp_path / "big"))
    write(big, "h1", **{"model.width": 8})
    write(big, "h2", **{"model.width": 2**40})  # past Int32: read as Int64, exactly
    wide, _ = read_rows(big.uri, SWEEP, categorical=True)
    assert wide.schema["model.width"] == pl.Int64 and wide.schema["metric"] == pl.Categorical
    assert sorted(set(wide["model.width"])) == [8, 2**40]
    # beside a file with corrupt pages (read file by file): skipped alone, the big value kept
    buf = io.BytesIO()
    pq.write_table(member_table("pages", n=500, **{"model.width": 8}), buf)
    data = bytearray(buf.getvalue())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    for i in range(8, len(data) - footer, 5):
        data[i] ^= 0xFF
    (Path(big.rows_path(SWEEP, STUDY, "x")).parent / "pages.parquet").write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="pages.parquet"):
        kept, coverage = read_rows(big.uri, SWEEP, categorical=True)
    assert sorted(set(kept["model.width"])) == [8, 2**40] and len(coverage.skipped) == 1


def test_best_settings_breaks_an_exact_tie_by_config_hash_whatever_the_read_order(tmp_path):
    """Two search trials at one width with the same final loss: the pick is the same on every
    read (the lower config hash), not whichever polars' grouping put first."""
    from analysis.reading.best import best_settings

    store = Store(str(tmp_path))
    for h, lr in (("b7", 1e-3), ("a3", 3e-3), ("c1", 1e-2)):
        constants = {"sweep": SWEEP, "study": STUDY, "trial_id": h, "member": 0,
                     "config_hash": h, "status": "ok", "reason": None, "seed": 0,
                     "model.width": 8, "train.lr": lr}
        rows = [{**ROW, "metric": "train_loss", "statistic": "mean", "step": s,
                 "value": 0.25 if h != "c1" else 0.5} for s in (5, 10)]
        store.write_rows(store.rows_path(SWEEP, STUDY, h), rows_table(rows, constants))
    picks = {best_settings(str(tmp_path), SWEEP, STUDY, by="model.width",
                           params=["train.lr"])[8]["train.lr"] for _ in range(40)}
    assert picks == {3e-3}  # a3's, the lower hash of the two tied at 0.25
