"""Compaction: a study's finished member row files merged into one Parquet file.

    result = compact(Store("results"), "depth_scaling", "least_squares")
    icl compact depth_scaling [--study S] [--storage P]          (icl.console)

Per-member files stay the write path (concurrent trials never write one file); once a study
is done (icl_core.running.study_report.report_study, from COMPACT_AT files on) or on demand they are merged
into <study>/compacted/compacted-<stamp>-<id>.parquet, sorted by config hash, its footer
naming every member with its (status, reason) (icl_core.storage.store.COMPACTED_KEY), so the resume
check reads one footer per compacted file instead of one file per member.

Steps, each safe to be killed after: (1) `plan`: the compacted files that verify (a bad one is
quarantined whole), the member files they already hold (duplicates of a killed compaction)
and those to merge; (2) `write`: the member files that verify, streamed row group by row group
into a temporary file renamed into place (one that does not verify is quarantined); (3)
`clean`: the merged and duplicate member files deleted, and a compacted file holding hashes an
older one holds (two compactions at once) rewritten without them. Between (2) and (3) a hash
has two copies; readers take the compacted one (icl_core.storage.store, analysis.reading.store), so each row
is seen once, and the next compaction deletes the duplicates.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icl_core.storage.store import (
    COMPACTED,
    COMPACTED_KEY,
    LAST_METRIC,
    STATUSES,
    Store,
    UntrustedRows,
    check_member,
)

logger = logging.getLogger(__name__)

COMPACT_AT = 64  # member files from which a sweep run compacts a study once it is done
BATCH = 1000  # members per row group (hash-sorted: a lookup by hash reads one group)
_FILE = "__icl_file"  # the source file's path, while a batch is read
STALE_TMP_S = 3600.0  # a compaction's temporary file this old is a killed run's, removed


@dataclass
class Plan:
    sweep: str
    study: str
    compacted: dict[str, tuple[str, str, str | None]]  # hash -> (file, status, reason)
    merge: dict[str, str]  # hash -> member file to merge
    duplicates: list[str]  # member files whose hash a compacted file already holds
    shadowed: dict[str, set[str]] = field(default_factory=dict)  # file -> hashes an older holds
    written: list[str] = field(default_factory=list)  # the new compacted files
    merged: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    rows: int = 0


@dataclass
class Result:
    sweep: str
    study: str
    merged: int  # member files merged
    rows: int
    paths: list[str]  # the compacted files written
    removed: int  # member files deleted (merged ones and duplicates)
    rewritten: int  # compacted files rewritten without another's hashes
    compacted: int  # members held by compacted files, now

    def line(self) -> str:
        where = f" into {', '.join(self.paths)}" if self.paths else ""
        return (f"[{self.sweep}/{self.study}] compacted {self.merged} member files "
                f"({self.rows} rows){where}; {self.removed} member files removed, "
                f"{self.rewritten} compacted files rewritten; {self.compacted} members "
                "in compacted files")


def compact(store: Store, sweep: str, study: str, min_files: int = 1) -> Result:
    """Merge the study's finished member files (when at least `min_files` are to merge; a
    killed compaction's duplicates are cleaned up either way)."""
    plan = plan_compaction(store, sweep, study)
    if len(plan.merge) >= max(1, min_files):
        write(store, plan)
    removed, rewritten = clean(store, plan)
    held = len(store.compacted(sweep, study)) if plan.written or rewritten else \
        len(plan.compacted)
    return Result(sweep, study, len(plan.merged), plan.rows, plan.written, removed, rewritten,
                  held)


def plan_compaction(store: Store, sweep: str, study: str) -> Plan:
    """Step 1: what is compacted (verified footers), what to merge, what is a duplicate."""
    files = store.compacted_files(sweep, study)
    held = store._map(lambda path: store.compacted_or_quarantined(sweep, study, path), files)
    compacted: dict[str, tuple[str, str, str | None]] = {}
    shadowed: dict[str, set[str]] = {}
    for path, members in zip(files, held, strict=True):
        for h, (status, reason) in (members or {}).items():
            if h in compacted:
                shadowed.setdefault(path, set()).add(h)
            else:
                compacted[h] = (path, status, reason)
    members = store.member_files(sweep, study)
    merge = {h: p for h, p in sorted(members.items()) if h not in compacted}
    duplicates = [p for h, p in sorted(members.items()) if h in compacted]
    return Plan(sweep, study, compacted, merge, duplicates, shadowed)


def _read_member(store: Store, plan: Plan, h: str, path: str) -> pa.Table | None:
    """A member file's rows when it verifies; quarantined (and None) when it does not; None
    when it is gone."""
    try:
        with store.fs.open_input_file(path) as f:
            table = pq.ParquetFile(f).read()
        store._check_schema(path, table.schema)
        check_member(path, table, h)
        return table
    except FileNotFoundError:
        return None
    except (UntrustedRows, OSError, ValueError, pa.ArrowException) as exc:
        reason = str(exc) if isinstance(exc, UntrustedRows) else \
            f"{path}: unreadable ({type(exc).__name__}: {exc})"
        dest = store.quarantine(plan.sweep, plan.study, path, reason)
        logger.warning(f"[{plan.sweep}/{plan.study}] untrusted row file {reason}; moved to {dest}; "
                       f"config {h} will be trained again")
        return None


def _read_batch(store: Store, plan: Plan, chunk: list[str]
                ) -> tuple[pa.Table | None, dict[str, tuple[str, str | None]]]:
    """The rows of the member files of `chunk` that verify (in that order) and their
    {hash: (status, reason)}: on a local store all at once through Polars when every file
    reads with the first one's schema and verifies; else file by file (a file that does not
    verify is quarantined)."""
    if isinstance(store.fs, pafs.LocalFileSystem):
        fast = _read_batch_at_once([plan.merge[h] for h in chunk], chunk)
        if fast is not None:
            return fast
    good = [(h, t) for h, t in store._map(
        lambda h: (h, _read_member(store, plan, h, plan.merge[h])), chunk) if t is not None]
    if not good:
        return None, {}
    schema = _schema([t.schema for _, t in good])
    table = pa.concat_tables([_conform(t, schema) for _, t in good])
    return table, {h: (t["status"][0].as_py(), t["reason"][0].as_py()) for h, t in good}


def _read_batch_at_once(paths: list[str], hashes: list[str]):
    """(table, {hash: (status, reason)}) of these member files read in one Polars call
    (many times faster than one pyarrow read per small file), or None when any file is
    unreadable, gone, of another schema or does not verify (`check_member`'s rules)."""
    import polars as pl

    try:
        schema = pq.read_schema(paths[0]).remove_metadata()
        Store._check_schema(paths[0], schema)
        frame = pl.read_parquet(paths, include_file_paths=_FILE)
        check = frame.group_by(_FILE, maintain_order=True).agg(
            pl.col("config_hash").n_unique().alias("hashes"),
            pl.col("config_hash").first().alias("hash"),
            pl.col("status").n_unique().alias("statuses"), pl.col("status").first(),
            pl.col("reason").first(), (pl.col("metric") == LAST_METRIC).any().alias("last"))
        table = frame.drop(_FILE).rechunk().to_arrow().cast(schema)  # one chunk a column
    except Exception:  # noqa: BLE001 - any failure: the careful path decides, file by file
        return None
    ok = (check.height == len(paths) and check[_FILE].to_list() == paths
          and check["hash"].to_list() == hashes and check["hashes"].max() == 1
          and check["statuses"].max() == 1 and check["last"].all()
          and set(check["status"].to_list()) <= set(STATUSES))
    if not ok:
        return None
    return table, {h: (s, r) for h, s, r in zip(hashes, check["status"].to_list(),
                                                check["reason"].to_list(), strict=True)}


def _schema(schemas: list[pa.Schema]) -> pa.Schema:
    """The union of schemas, in order of first appearance (types promoted: null -> int ->
    float; clashing types -> string)."""
    fields: dict[str, pa.DataType] = {}
    for schema in schemas:
        for f in schema.remove_metadata():
            seen = fields.get(f.name)
            if seen is None or seen == f.type or pa.types.is_null(f.type):
                fields.setdefault(f.name, f.type)
            elif pa.types.is_null(seen):
                fields[f.name] = f.type
            else:
                try:
                    fields[f.name] = pa.unify_schemas(
                        [pa.schema([(f.name, seen)]), pa.schema([(f.name, f.type)])],
                        promote_options="permissive").field(f.name).type
                except (pa.ArrowTypeError, pa.ArrowInvalid):
                    fields[f.name] = pa.string()
    return pa.schema(list(fields.items()))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.schema.remove_metadata() == schema:
        return table.replace_schema_metadata(None)
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        column = table[f.name]
        if column.type != f.type:
            if pa.types.is_string(f.type) and not pa.types.is_string(column.type):
                column = pa.chunked_array([pa.array([None if v is None else json.dumps(v)
                                                     if not isinstance(v, str) else v
                                                     for v in column.to_pylist()],
                                                    pa.string())])
            else:
                column = column.cast(f.type)
        columns.append(column)
    return pa.table(columns, schema=schema)


class _Output:
    """One compacted file being written: a temporary file renamed into place by `finish`."""

    def __init__(self, store: Store, folder: str, schema: pa.Schema):
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.store, self.schema = store, schema
        self.path = f"{folder}/compacted-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
        self.tmp = f"{self.path}.tmp-{os.getpid()}"
        self.stream = store.fs.open_output_stream(self.tmp)
        self.writer = pq.ParquetWriter(self.stream, schema)
        self.members: dict[str, list] = {}
        self.rows = 0

    def add(self, table: pa.Table, members: dict[str, tuple[str, str | None]]) -> None:
        table = _conform(table, self.schema)
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.rows += table.num_rows
        self.members.update((h, list(s)) for h, s in members.items())

    def finish(self) -> str:
        self.writer.add_key_value_metadata({COMPACTED_KEY: json.dumps(
            {"members": self.members, "rows": self.rows})})
        self.writer.close()
        self.stream.close()
        self.store.fs.move(self.tmp, self.path)
        return self.path

    def abandon(self) -> None:
        try:
            self.writer.close()
            self.stream.close()
        finally:
            self.store.discard(self.tmp)


def write(store: Store, plan: Plan, batch: int = BATCH) -> list[str]:
    """Step 2: the member files to merge that verify, streamed (hash order, a row group per
    `batch` members) into a compacted file (temporary name, renamed into place); a batch
    bringing new columns or types starts another file. The files written."""
    folder = f"{store.study_dir(plan.sweep, plan.study)}/{COMPACTED}"
    store.fs.create_dir(folder, recursive=True)
    _remove_stale(store, folder)
    hashes = list(plan.merge)
    out: _Output | None = None
    try:
        for start in range(0, len(hashes), batch):
            chunk = hashes[start:start + batch]
            table, members = _read_batch(store, plan, chunk)
            if not members:
                continue
            schema = _schema(([out.schema] if out else []) + [table.schema])
            if out is not None and schema != out.schema:
                plan.written.append(out.finish())
                out = None
            if out is None:
                out = _Output(store, folder, schema)
            out.add(table, members)
            plan.merged.update(members)
            plan.rows += table.num_rows
        if out is not None:
            plan.written.append(out.finish())
            out = None
    finally:
        if out is not None:
            out.abandon()
    return plan.written


def clean(store: Store, plan: Plan) -> tuple[int, int]:
    """Step 3: delete the merged member files and the duplicates (their hashes are in a
    compacted file now), and rewrite compacted files holding hashes an older one holds.
    (member files removed, compacted files rewritten)."""
    gone = [plan.merge[h] for h in plan.merged] + plan.duplicates
    store._map(store.discard, gone)  # in threads: a remote store answers each in ~10s of ms
    for path, hashes in plan.shadowed.items():
        _rewrite_without(store, path, hashes)
    return len(gone), len(plan.shadowed)


def _rewrite_without(store: Store, path: str, hashes: set[str]) -> None:
    """A compacted file without `hashes` (held by an older file), replaced in place (atomic
    rename); removed when nothing is left."""
    import pyarrow.compute as pc

    with store.fs.open_input_file(path) as f:
        parquet = pq.ParquetFile(f)
        held = json.loads(parquet.metadata.metadata[COMPACTED_KEY])
        table = parquet.read()
    keep = table.filter(pc.invert(pc.is_in(table["config_hash"], pa.array(sorted(hashes)))))
    members = {h: s for h, s in held["members"].items() if h not in hashes}
    if not members:
        store.discard(path)
        return
    meta = {**(table.schema.metadata or {}),
            COMPACTED_KEY: json.dumps({"members": members, "rows": keep.num_rows})}
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with store.fs.open_output_stream(tmp) as out:
            pq.write_table(keep.replace_schema_metadata(meta), out, row_group_size=BATCH * 64)
        store.fs.move(tmp, path)
    except BaseException:
        store.discard(tmp)
        raise


def _remove_stale(store: Store, folder: str) -> None:
    """Temporary files of compactions killed over STALE_TMP_S ago."""
    now = time.time()
    for info in store.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
        mtime = info.mtime.timestamp() if info.mtime else now
        if ".tmp-" in info.path and now - mtime > STALE_TMP_S:
            store.discard(info.path)


def studies(store: Store, sweep: str = "") -> list[str]:
    """The study folders of a sweep in the store, those with rows/ or compacted/ (its sweeps
    when `sweep` is "")."""
    folder = f"{store.root}/{sweep}" if sweep else store.root
    infos = store.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    names = sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos
                   if i.type == pafs.FileType.Directory)
    if not sweep:
        return names
    kinds = [pafs.FileType.Directory]
    return [n for n in names if any(
        store.fs.get_file_info(f"{folder}/{n}/{sub}").type in kinds for sub in ("rows", COMPACTED))]
