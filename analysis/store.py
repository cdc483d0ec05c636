"""Read a sweep's row files (see icl_core/store.py for the layout) into one Polars frame.

Every finished (`rows/`) and failed (`failed/`) member file of a sweep is read, from a local
path or any URI pyarrow understands. Files differ in their config columns, and a column may
be all-null in one file and typed in another, so frames are concatenated diagonally with
relaxed types. A truncated or corrupt file is skipped with a warning, never a crash.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import polars as pl
import pyarrow.fs as pafs

from icl_core.store import ROW_SCHEMA, Store

FOLDERS = ("rows", "failed")  # finished (ok / diverged) and failed members
DEFAULT_STORAGE = "results"


class MissingResults(FileNotFoundError):
    """No row file of the requested sweep/study exists (or none could be read)."""


@dataclass
class Coverage:
    """What `read_rows` found: files read per folder and files skipped (path, error)."""

    read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FOLDERS, 0))
    skipped: list[tuple[str, str]] = field(default_factory=list)
    n_rows: int = 0

    def line(self, label: str) -> str:
        total = sum(self.read.values())
        parts = ", ".join(f"{n} {folder}/" for folder, n in self.read.items())
        return (f"[{label}] rows: {total} files read ({parts}), {len(self.skipped)} skipped, "
                f"{self.n_rows} rows")


def produce_command(sweep: str, study: str | None = None, preset: str | None = None,
                    storage: str | None = None) -> str:
    """The command that writes the rows of `sweep` (and `study`) to `storage`."""
    cmd = f"python sweeps/{sweep}.py"
    if study:
        cmd += f" --study {study}"
    cmd += f" --preset {preset}" if preset else ""
    if storage and storage != DEFAULT_STORAGE:
        cmd += f" --storage {storage}"
    return cmd


def missing_message(sweep: str, study: str | None, uri: str, preset: str | None = None,
                    storage: str | None = None, detail: str = "") -> str:
    label = f"{sweep}/{study}" if study else sweep
    hint = "" if preset else "  (choose --preset smoke | cpu | paper; the default is cpu)"
    return (f"no result rows for {label} under {uri}{detail}. Produce them with:\n"
            f"  {produce_command(sweep, study, preset, storage)}{hint}")


def _list(fs: pafs.FileSystem, folder: str, kind: pafs.FileType) -> list[str]:
    """Paths of the direct children of `folder` of one kind (sorted; [] if it is missing)."""
    selector = pafs.FileSelector(folder, allow_not_found=True)
    return sorted(info.path for info in fs.get_file_info(selector) if info.type == kind)


def row_files(store: Store, sweep: str, study: str | None = None) -> list[tuple[str, str]]:
    """(folder, path) of every row file of the sweep (one study, or all of them)."""
    if study is None:
        studies = [p.rsplit("/", 1)[-1]
                   for p in _list(store.fs, f"{store.root}/{sweep}", pafs.FileType.Directory)]
    else:
        studies = [study]
    out = []
    for name in studies:
        for folder in FOLDERS:
            paths = _list(store.fs, f"{store.study_dir(sweep, name)}/{folder}", pafs.FileType.File)
            out += [(folder, p) for p in paths if p.endswith(".parquet")]
    return out


def _read_one(store: Store, path: str) -> pl.DataFrame:
    with store.fs.open_input_file(path) as f:
        frame = pl.read_parquet(f.read())
    missing = [name for name in ROW_SCHEMA.names if name not in frame.columns]
    if missing:
        raise ValueError(f"not a row file: lacks columns {missing}")
    return frame


def concat_rows(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Diagonal concat with relaxed types; columns whose types still clash become strings."""
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except pl.exceptions.PolarsError:
        types: dict[str, set] = {}
        for frame in frames:
            for name, dtype in frame.schema.items():
                if dtype != pl.Null:
                    types.setdefault(name, set()).add(dtype)
        clash = [name for name, kinds in types.items() if len(kinds) > 1]
        frames = [f.with_columns([pl.col(c).cast(pl.String) for c in clash if c in f.columns])
                  for f in frames]
        return pl.concat(frames, how="diagonal_relaxed")


def read_rows(storage: str, sweep: str, study: str | None = None) -> tuple[pl.DataFrame, Coverage]:
    """All rows of the sweep (or one study) and what was read; raises MissingResults."""
    store = Store(storage)
    coverage = Coverage()
    frames = []
    for folder, path in row_files(store, sweep, study):
        try:
            frames.append(_read_one(store, path))
        except Exception as exc:  # any unreadable file: skipped and named, never a crash
            coverage.skipped.append((path, f"{type(exc).__name__}: {exc}"))
            warnings.warn(f"skipping unreadable row file {path}: {type(exc).__name__}: {exc}",
                          stacklevel=3)
            continue
        coverage.read[folder] += 1
    if not frames:
        detail = f" ({len(coverage.skipped)} unreadable files skipped)" if coverage.skipped else ""
        raise MissingResults(missing_message(sweep, study, store.uri, storage=storage,
                                             detail=detail))
    rows = concat_rows(frames)
    coverage.n_rows = rows.height
    return rows, coverage


def load_rows(storage: str, sweep: str, study: str | None = None) -> pl.DataFrame:
    """All rows (ok, diverged and failed members) of a sweep; prints a coverage line."""
    rows, coverage = read_rows(storage, sweep, study)
    print(coverage.line(f"{sweep}/{study}" if study else sweep), flush=True)
    return rows
