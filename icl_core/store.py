"""The results store: one Parquet file of tidy rows per member, keyed by config hash.

Layout under any storage URI pyarrow understands (a local path, s3://, gs://, a shared FS):

    <storage>/<sweep>/<study>/rows/<config_hash>.parquet      finished members (ok / diverged /
                                                              pruned by a search)
    <storage>/<sweep>/<study>/failed/<config_hash>.parquet    members whose trial raised
    <storage>/<sweep>/<study>/artifacts/<config_hash>/<name>.npz   arrays (see artifacts.py)
    <storage>/<sweep>/<study>/tune/                           Ray Tune's own experiment state
    <storage>/<sweep>/<study>/study.json                      the study's manifest: what
                                                              analysis needs of it (its
                                                              figure, grid axes, plan)

A member is *finished* when its file exists under rows/; re-running a sweep skips it. Files
are written to a temporary name and renamed, so a crash never leaves a half-written row file.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# Fixed row columns (the evaluator's and trainer's); every file has them with these types.
ROW_SCHEMA = pa.schema([
    ("sweep", pa.string()), ("study", pa.string()), ("trial_id", pa.string()),
    ("member", pa.int64()), ("config_hash", pa.string()), ("seed", pa.int64()),
    ("task_seed", pa.int64()), ("status", pa.string()), ("reason", pa.string()),
    ("step", pa.int64()), ("metric", pa.string()), ("value", pa.float64()),
    ("statistic", pa.string()), ("position", pa.int64()), ("prompt_len", pa.int64()),
    ("test_dist", pa.string()), ("loop_iter", pa.int64()), ("infer_iter", pa.int64()),
    ("predictor", pa.string()),
])
STATUSES = ("ok", "diverged", "pruned", "failed")
MANIFEST = "study.json"  # per study, written when it runs (icl_core.report.study_manifest)


def storage_uri(storage: str) -> str:
    """A local path becomes absolute (workers may run elsewhere); URIs pass through."""
    return storage if "://" in storage else str(Path(storage).expanduser().resolve())


class Store:
    def __init__(self, storage: str):
        self.uri = storage_uri(storage)
        self.fs, self.root = pafs.FileSystem.from_uri(self.uri)

    def study_dir(self, sweep: str, study: str) -> str:
        return f"{self.root}/{sweep}/{study}"

    def rows_path(self, sweep: str, study: str, config_hash: str, status: str = "ok") -> str:
        folder = "failed" if status == "failed" else "rows"
        return f"{self.study_dir(sweep, study)}/{folder}/{config_hash}.parquet"

    def finished(self, sweep: str, study: str) -> set[str]:
        """Config hashes with a finished (ok or diverged) row file."""
        selector = pafs.FileSelector(f"{self.study_dir(sweep, study)}/rows", allow_not_found=True)
        return {
            Path(info.path).name.removesuffix(".parquet")
            for info in self.fs.get_file_info(selector)
            if info.path.endswith(".parquet")
        }

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write then rename: readers never see a partial file."""
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, path)

    def write_rows(self, path: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.write_bytes(path, buf.getvalue())

    def delete(self, path: str) -> None:
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_file(path)

    def read_status(self, path: str) -> tuple[str, str | None]:
        with self.fs.open_input_file(path) as f:
            table = pq.read_table(f, columns=["status", "reason"])
        return table["status"][0].as_py(), table["reason"][0].as_py()

    def member_status(self, sweep: str, study: str, hashes: list[str]) -> dict:
        """{hash: (status, reason)}; 'missing' where no file exists (e.g. a killed trial)."""
        finished = self.finished(sweep, study)
        out = {}
        for h in hashes:
            failed = self.rows_path(sweep, study, h, "failed")
            if h in finished:
                out[h] = self.read_status(self.rows_path(sweep, study, h))
            elif self.fs.get_file_info(failed).type != pafs.FileType.NotFound:
                out[h] = self.read_status(failed)
            else:
                out[h] = ("missing", "no row file: the trial did not finish")
        return out

    def write_manifest(self, sweep: str, study: str, manifest: dict) -> None:
        """The study's manifest beside its rows (replaced on every run of the study)."""
        text = json.dumps(manifest, indent=1, sort_keys=True, default=str)
        self.write_bytes(f"{self.study_dir(sweep, study)}/{MANIFEST}", text.encode())

    def check_writable(self) -> None:
        """Fail before launch if the storage cannot be written."""
        probe = f"{self.root}/.write-probe-{uuid.uuid4().hex[:8]}"
        self.write_bytes(probe, b"ok")
        self.fs.delete_file(probe)


def read_manifest(fs: pafs.FileSystem, study_dir: str) -> dict | None:
    """A study folder's manifest (None when there is none: a store written before manifests
    existed, or rows written without a sweep run)."""
    path = f"{study_dir}/{MANIFEST}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())


def rows_table(rows: list[dict], constants: dict) -> pa.Table:
    """Tidy rows + constant columns (flattened config, provenance) -> an Arrow table."""
    fixed = {name: [row.get(name) for row in rows] for name in ROW_SCHEMA.names}
    for name, value in constants.items():
        if name in ROW_SCHEMA.names:
            fixed[name] = [value] * len(rows)
    table = pa.table(fixed, schema=ROW_SCHEMA)
    for name, value in sorted(constants.items()):
        if name in ROW_SCHEMA.names:
            continue
        if isinstance(value, (list, tuple, dict)):
            value = json.dumps(value, sort_keys=True)
        table = table.append_column(name, pa.array([value] * len(rows)))
    return table

