"""Read a sweep's row files (see icl_core/storage/store.py for the layout) as one Polars frame.

    frame = scan_rows("results", "depth_scaling")[0]       # a LazyFrame over every row file
    rows, coverage = read_rows("results", "depth_scaling", expected=plan_size)
    rows = load_rows("results", "depth_scaling")           # read_rows + a printed coverage line

Every finished (`rows/`) and failed (`failed/`) member file of a sweep (one study, or all of
them), and every compacted file (`compacted/`: many finished members in one file, its footer
naming them; icl_core.storage.compaction; or evidence/'s one file of a study's members,
EVIDENCE_FILE, its members read from its config_hash column), is found under a local path, any URI pyarrow understands (s3://, gs://, hdfs://, ...),
or any fsspec URI (memory://, ...). Local files are scanned lazily in place; remote ones are
fetched through that filesystem (the one the sweep wrote with) and scanned from memory.

Checks, never a crash: each file's Parquet footer is read first, and a file that is truncated
or corrupt, or whose fixed row columns (`ROW_SCHEMA`) are missing or of another type, is
skipped with a warning naming it. A file whose pages turn out corrupt while the data are read
is found by re-reading file by file, and skipped the same way. `Coverage` says how many trials
were expected (the size of the sweep's plan when the caller passes it, else the files found),
read and skipped. Failed and diverged members are kept, with their `status` and `reason`.

A hash is read once: from its oldest compacted file (a member file beside it is a killed
compaction's leftover, skipped; a newer compacted file holding it again is read without it).
`columns=` reads only those columns (projection pushdown), `categorical=True` reads strings as
Categorical; footers are read in threads.

Files differ in their config columns, and a column may be all-null in one file and typed in
another, so files are concatenated diagonally with relaxed types; config columns whose types
still clash become strings.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections import Counter
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from analysis.reading.coverage import (  # noqa: F401  (re-exported)
    DEFAULT_STORAGE,
    FOLDERS,
    Coverage,
    MissingResults,
    missing_message,
    produce_command,
)
from icl_core.storage.artifacts import (  # noqa: F401  (re-exported: arrays per member)
    MissingArtifact,
    load_artifact,
)
from icl_core.storage.store import (
    COMPACTED,
    COMPACTED_KEY,
    LAST_METRIC,
    ROW_SCHEMA,
    Store,
    redacted,
)

logger = logging.getLogger(__name__)

__all__ = ["EVIDENCE_FILE", "FOLDERS", "Coverage", "Location", "MissingArtifact", "MissingResults", "concat_rows",
           "load_artifact", "load_rows", "locate", "member_statuses", "missing_message", "produce_command", "read_rows", "row_files",
           "scan_rows"]


# ------------------------------------------------------------------------------ locations


@dataclass
class Location:
    """A storage root on a pyarrow filesystem (fsspec ones wrapped); local: scan in place."""

    fs: pafs.FileSystem
    root: str
    uri: str
    local: bool

    @property
    def redacted(self) -> str:
        """The URI as printed (no secret)."""
        return redacted(self.uri)

    def study_dir(self, sweep: str, study: str) -> str:
        return f"{self.root}/{sweep}/{study}"


def locate(storage: str) -> Location:
    """The filesystem of a local path, a pyarrow URI or (failing that) an fsspec URI."""
    try:
        store = Store(storage)
        fs, root, uri = store.fs, store.root, store.uri
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as arrow_error:
        try:
            import fsspec
        except ImportError:
            raise arrow_error from None
        try:
            fs_, root = fsspec.core.url_to_fs(storage)
        except (ValueError, ImportError) as exc:
            raise ValueError(f"storage: cannot open {storage!r}: {exc}") from arrow_error
        fs, uri = pafs.PyFileSystem(pafs.FSSpecHandler(fs_)), storage
        root = root.rstrip("/")
    return Location(fs, root, uri, isinstance(fs, pafs.LocalFileSystem))


def _list(fs: pafs.FileSystem, folder: str, kind: pafs.FileType) -> list[str]:
    """Paths of the direct children of `folder` of one kind (sorted; [] if it is missing)."""
    selector = pafs.FileSelector(folder, allow_not_found=True)
    try:
        infos = fs.get_file_info(selector)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(info.path for info in infos if info.type == kind)


def row_files(store: Store | Location, sweep: str, study: str | None = None
              ) -> list[tuple[str, str]]:
    """(folder, path) of every row file of the sweep (one study, or all of them): member
    files under rows/ and failed/, and compacted files (folder "compacted")."""
    if study is None:
        studies = [p.rstrip("/").rsplit("/", 1)[-1]
                   for p in _list(store.fs, f"{store.root}/{sweep}", pafs.FileType.Directory)]
    else:
        studies = [study]
    out = []
    for name in studies:
        for folder in (COMPACTED, *FOLDERS):
            paths = _list(store.fs, f"{store.study_dir(sweep, name)}/{folder}", pafs.FileType.File)
            out += [(folder, p) for p in paths if p.endswith(".parquet")]
    return out


# -------------------------------------------------------------------------------- checks


EVIDENCE_FILE = "rows.parquet"  # a study's members in one file (analysis.claims.evidence)
_SAME = {pa.string(): (pa.string(), pa.large_string(), pa.string_view())}


def check_schema(schema: pa.Schema) -> str | None:
    """Why a file's schema is not a row file's (missing or mistyped fixed columns), or None.
    An all-null fixed column (null type) is accepted."""
    names = set(schema.names)
    missing = [f.name for f in ROW_SCHEMA if f.name not in names]
    if missing:
        return f"not a row file: lacks columns {missing}"
    wrong = []
    for expected in ROW_SCHEMA:
        actual = schema.field(expected.name).type
        if actual != expected.type and actual != pa.null() and actual not in _SAME.get(
                expected.type, ()):
            wrong.append(f"{expected.name} is {actual}, expected {expected.type}")
    return f"not a row file: {'; '.join(wrong)}" if wrong else None


def _inspect(loc: Location, path: str) -> tuple[pa.Schema, dict | list | None]:
    """The file's Arrow schema and its members where it holds many (None for a member file):
    a compacted file's footer names them; an evidence file (EVIDENCE_FILE) holds the config
    hashes in its column (raises if unreadable)."""
    with loc.fs.open_input_file(path) as f:
        meta = pq.read_metadata(f)
        held = (meta.metadata or {}).get(COMPACTED_KEY)
        members = json.loads(held)["members"] if held is not None else None
        if held is None and "config_hash" in meta.schema.names and \
                path.rsplit("/", 1)[-1] == EVIDENCE_FILE:
            members = sorted(set(pq.read_table(f, columns=["config_hash"]).column(0).to_pylist()))
    return meta.schema.to_arrow_schema(), members


def _source(loc: Location, path: str):
    if loc.local:
        return path
    with loc.fs.open_input_file(path) as f:
        return f.read()


def _scan(sources: list) -> pl.LazyFrame:
    return pl.scan_parquet(sources, glob=False) if sources and isinstance(sources[0], str) \
        else pl.scan_parquet(sources)


def _clashes(schemas: list[pl.Schema]) -> list[str]:
    """Columns whose types have no common supertype across files."""
    empties = [pl.DataFrame(schema=s) for s in schemas]
    try:
        pl.concat(empties, how="diagonal_relaxed")
        return []
    except pl.exceptions.PolarsError:
        types: dict[str, set] = {}
        for schema in schemas:
            for name, dtype in schema.items():
                if dtype != pl.Null:
                    types.setdefault(name, set()).add(dtype)
        return [name for name, kinds in types.items() if len(kinds) > 1]


def concat_rows(frames: list):
    """Diagonal concat (eager or lazy) with relaxed types; clashing columns become strings."""
    lazy = isinstance(frames[0], pl.LazyFrame)
    schemas = [f.collect_schema() if lazy else f.schema for f in frames]
    clash = _clashes(schemas)
    if clash:
        frames = [f.with_columns([pl.col(c).cast(pl.String) for c in clash if c in s])
                  for f, s in zip(frames, schemas, strict=True)]
    return pl.concat(frames, how="diagonal_relaxed")


# -------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _File:
    folder: str  # rows, failed or compacted
    path: str
    members: int = 1
    drop: frozenset = frozenset()  # hashes an older compacted file holds: not read from here

    def scan(self, source) -> pl.LazyFrame:
        frame = _scan([source])
        return frame.filter(~pl.col("config_hash").is_in(sorted(self.drop))) if self.drop \
            else frame


@dataclass
class _Plan:
    loc: Location
    groups: dict[tuple, list[_File]]  # schema key (and a file's own drops) -> files
    frames: dict[tuple, pl.LazyFrame]
    coverage: Coverage


def _skip(coverage: Coverage, path: str, reason: str) -> None:
    coverage.skipped.append((path, reason))
    warnings.warn(f"skipping unreadable row file {path}: {reason}", stacklevel=4)


def _inspect_all(loc: Location, files: list[tuple[str, str]]) -> list:
    """_inspect of each file (or the exception it raised), footers read in threads."""
    def one(item):
        try:
            return _inspect(loc, item[1])
        except Exception as exc:  # truncated, corrupt, unreadable: skipped, never a crash
            return exc

    if len(files) < 8:
        return list(map(one, files))
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, files))


def _plan(storage: str, sweep: str, study: str | None, expected) -> _Plan:
    loc = locate(storage)
    coverage = Coverage()
    if expected is not None and not isinstance(expected, int):
        expected = set(expected)
    coverage.expected = len(expected) if isinstance(expected, set) else expected
    files = row_files(loc, sweep, study)
    claimed: dict[str, set[str]] = {}  # study folder -> hashes its compacted files hold
    present: set[str] = set()
    groups: dict[tuple, list[_File]] = {}
    for (folder, path), found in zip(files, _inspect_all(loc, files), strict=True):
        study_dir, name = path.rsplit("/", 2)[0], path.rsplit("/", 1)[-1]
        if isinstance(found, Exception):
            coverage.found += 1
            _skip(coverage, path, f"{type(found).__name__}: {found}")
            continue
        schema, members = found
        held = claimed.setdefault(study_dir, set())
        if folder == COMPACTED and members is None:
            coverage.found += 1
            _skip(coverage, path, "a compacted file without its members in the footer")
            continue
        if folder == "rows" and name.removesuffix(".parquet") in held:
            continue  # a killed compaction's duplicate: its compacted copy is read
        coverage.found += 1 if members is None else len(members)
        problem = check_schema(schema)
        if problem:
            _skip(coverage, path, problem)
            continue
        key = tuple((f.name, str(f.type)) for f in schema)
        if members is None:
            present.add(name.removesuffix(".parquet"))
            groups.setdefault(key, []).append(_File(folder, path))
            continue
        drop = frozenset(held.intersection(members))  # an older compacted file holds these
        held.update(members)
        present.update(members)
        entry = _File(folder, path, len(members) - len(drop), drop)
        groups.setdefault((key, path) if drop else key, []).append(entry)
    if isinstance(expected, set):
        coverage.missing = sorted(expected - present)
    frames = {}
    for key, members in list(groups.items()):
        sources = []
        for entry in list(members):
            try:
                sources.append(_source(loc, entry.path))
            except Exception as exc:
                _skip(coverage, entry.path, f"{type(exc).__name__}: {exc}")
                members.remove(entry)
        if members:
            frames[key] = members[0].scan(sources[0]) if members[0].drop else _scan(sources)
        else:
            del groups[key]
    return _Plan(loc, groups, frames, coverage)


def _count(plan: _Plan) -> None:
    read = plan.coverage.read  # members by where their rows were: rows/, failed/, compacted/
    for entry in (m for members in plan.groups.values() for m in members):
        read[entry.folder] = read.get(entry.folder, 0) + entry.members


def _missing(plan: _Plan, storage: str, sweep: str, study: str | None) -> MissingResults:
    skipped = plan.coverage.skipped
    detail = f" ({len(skipped)} unreadable files skipped)" if skipped else ""
    return MissingResults(missing_message(sweep, study, plan.loc.uri, storage=storage,
                                          detail=detail))


def _narrow(frame: pl.LazyFrame, columns, categorical: bool = False, ints: bool = True
            ) -> pl.LazyFrame:
    """Only `columns` (those the frame has; always config_hash and status): read no others.
    categorical: string columns as Categorical (4 bytes a row; they repeat: a config's value
    on each of its rows, a metric's name on each of its rows) and, unless not `ints`, Int64
    columns as Int32."""
    if columns is None and not categorical:
        return frame
    schema = frame.collect_schema()
    if columns is not None:
        wanted = dict.fromkeys(["config_hash", "status", *columns])
        frame = frame.select([c for c in wanted if c in schema])
        schema = frame.collect_schema()
    if categorical:
        frame = frame.with_columns(pl.col(n).cast(pl.Categorical) for n, t in schema.items()
                                   if t == pl.String)
    if categorical and ints:
        # integers (steps, positions, seeds, config values) as Int32: half the bytes; a
        # strict cast, so a value that does not fit fails the read (read_rows then reads
        # again with Int64), never wraps
        frame = frame.with_columns(pl.col(n).cast(pl.Int32, strict=True)
                                   for n, t in schema.items() if t == pl.Int64)
    return frame


def scan_rows(storage: str, sweep: str, study: str | None = None,
              expected: int | Collection[str] | None = None, columns=None
              ) -> tuple[pl.LazyFrame, Coverage]:
    """A lazy frame over every readable row file of the sweep (or one study) and what was
    found; raises MissingResults when there is none. Footers are checked here; pages are only
    read on collect (use `read_rows` for a collect that skips files with corrupt pages).
    Filters and column selections on the frame are pushed down into the Parquet scans.

    expected: the plan's size, or its config hashes (then `Coverage.missing` names those with
    no row file). columns: read only these (and config_hash, status)."""
    plan = _plan(storage, sweep, study, expected)
    if not plan.frames:
        raise _missing(plan, storage, sweep, study)
    _count(plan)
    return concat_rows([_narrow(f, columns) for f in plan.frames.values()]), plan.coverage


def _collect_group(plan: _Plan, key: tuple, columns=None, categorical: bool = False
                   ) -> list[pl.DataFrame]:
    """One schema group's rows; on a read error, file by file, skipping the bad ones.
    Integers stay Int64 here (a value past Int32 must not pass for a corrupt file)."""
    try:
        return [_narrow(plan.frames[key], columns, categorical, ints=False).collect()]
    except Exception:  # some file's pages are corrupt: find it
        out = []
        for entry in list(plan.groups[key]):
            try:
                out.append(_narrow(entry.scan(_source(plan.loc, entry.path)), columns,
                                   categorical, ints=False).collect())
            except Exception as exc:
                _skip(plan.coverage, entry.path, f"{type(exc).__name__}: {exc}")
                plan.groups[key].remove(entry)
        return out


def _collect_all(plan: _Plan, columns, categorical: bool) -> pl.DataFrame | None:
    """Every file of the plan in one streaming collect; None when there is none. Narrowed
    integers that do not fit Int32 (pl.exceptions.InvalidOperationError) are read as they are."""
    if not plan.frames:
        return None
    frames = list(plan.frames.values())
    try:
        return concat_rows([_narrow(f, columns, categorical) for f in frames]
                           ).collect(engine="streaming")
    except pl.exceptions.InvalidOperationError:
        if not categorical:
            raise
        return concat_rows([_narrow(f, columns, True, ints=False) for f in frames]).collect(
            engine="streaming")


def read_rows(storage: str, sweep: str, study: str | None = None,
              expected: int | Collection[str] | None = None, columns=None,
              categorical: bool = False) -> tuple[pl.DataFrame, Coverage]:
    """All rows of the sweep (or one study) and what was read; raises MissingResults.

    expected: the plan's size, or its config hashes (see `Coverage`). columns: read only
    these (and config_hash, status; projection pushdown: the others are never decoded).
    categorical: string columns as Categorical and integers as Int32 when they fit (what
    regenerate reads at scale)."""
    plan = _plan(storage, sweep, study, expected)
    try:
        rows = _collect_all(plan, columns, categorical)
    except Exception:  # a corrupt page somewhere: collect group by group, file by file
        frames = [f for key in list(plan.frames)
                  for f in _collect_group(plan, key, columns, categorical)]
        rows = concat_rows(frames) if frames else None
    if rows is None:
        raise _missing(plan, storage, sweep, study)
    coverage = plan.coverage
    _count(plan)
    coverage.n_rows = rows.height
    if rows.height:
        status = member_statuses(rows)
        coverage.statuses = dict(sorted(Counter(status.fill_null("?").to_list()).items()))
    return rows, coverage


def member_statuses(rows: pl.DataFrame) -> pl.Series:
    """One status per member (config_hash) of `rows`: its last row's (LAST_METRIC, one per
    member: a filter) when every member has exactly one, else by a group-by (which, over
    100,000 members' rows, took half a GB)."""
    if "metric" in rows.columns:
        last = rows.filter(pl.col("metric") == LAST_METRIC).select("config_hash", "status")
        if last.height and last.height == last["config_hash"].n_unique() \
                == rows["config_hash"].n_unique():
            return last["status"]
    return rows.group_by("config_hash").agg(pl.col("status").first())["status"]


def load_rows(storage: str, sweep: str, study: str | None = None,
              expected: int | Collection[str] | None = None) -> pl.DataFrame:
    """All rows (ok, diverged and failed members) of a sweep; prints a coverage line."""
    rows, coverage = read_rows(storage, sweep, study, expected)
    logger.info(coverage.line(f"{sweep}/{study}" if study else sweep))
    return rows
