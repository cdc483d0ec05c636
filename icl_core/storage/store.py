"""The results store: one Parquet file of tidy rows per member, keyed by config hash.

Layout under any storage URI pyarrow understands (a local path, s3://, gs://, a shared FS):

    <storage>/<sweep>/<study>/rows/<config_hash>.parquet      finished members (ok / diverged /
                                                              pruned by a search)
    <storage>/<sweep>/<study>/failed/<config_hash>.parquet    members whose trial raised
    <storage>/<sweep>/<study>/compacted/compacted-<stamp>-<id>.parquet   finished members'
                                                              row files merged (icl_core.
                                                              compaction); the footer names
                                                              each member and its status
    <storage>/<sweep>/<study>/artifacts/<config_hash>/<name>.npz   arrays (see artifacts.py)
    <storage>/<sweep>/tune/                                   Ray Tune's own experiment state
                                                              of a sweep file's grid pool
                                                              (several files: _pool/tune; a
                                                              search: <sweep>/<search>/tune)
    <storage>/<sweep>/<study>/study.json                      the study's manifest: what
                                                              analysis needs of it (its
                                                              figure, grid axes, plan)
    <storage>/<sweep>/<study>/quarantine/<stamp>-<config_hash>.parquet   row files that did
                                                              not verify, each with a
                                                              .reason.txt beside it
    <storage>/<sweep>/<study>/claims/<config_hash>.claim     which driver trains a config
                                                              (icl_core.storage.claims)

A member is *finished* when its file under rows/ verifies (`read_verified`): its footer and
schema read, its rows are that config's with one status, and the member's last row
(`steps_completed`, which icl_core.running.trial.finish_member writes last) is there; re-running a
sweep skips it. A file that does not verify is moved to quarantine/ with its reason (never
deleted) and the config is trained again. Files are written to a temporary name and renamed,
so a crash never leaves a half-written row file; the temporary file is removed when a write
fails.

Compaction (icl_core.storage.compaction, `icl compact`) merges finished members' files into one file
under compacted/, renamed into place before the member files are deleted. A hash is read from
its compacted copy: a member file beside it (a compaction killed before its deletions) and a
later compacted file holding it again (two compactions at once) are duplicates readers skip.
A compacted file verifies by its footer alone (schema, and its `icl.compacted` metadata:
{hash: [status, reason]} and the row count); one that does not is quarantined whole and its
members count as unfinished.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

logger = logging.getLogger(__name__)

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
LAST_METRIC = "steps_completed"  # the last row finish_member writes of every member
QUARANTINE = "quarantine"
COMPACTED = "compacted"  # per study: merged row files of finished members
COMPACTED_KEY = b"icl.compacted"  # footer metadata: {"members": {hash: [status, reason]}, "rows": n}


class UntrustedRows(Exception):
    """A row file that does not verify (unreadable, wrong schema, not its config's, or
    without the member's last row); the message names the file and why."""


MANIFEST = "study.json"  # per study, written when it runs (icl_core.running.study_report.study_manifest)


def storage_uri(storage: str) -> str:
    """A local path becomes absolute (workers may run elsewhere); URIs pass through."""
    return storage if "://" in storage else str(Path(storage).expanduser().resolve())


# The environment variables a storage URI's keys move to (`credential_free`): where pyarrow,
# boto3 and Ray Tune (which hands them to every trial's worker) read them
KEY_ENV, SECRET_ENV = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
SESSION_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")  # belong to the keys they came with


def split_credentials(uri: str) -> tuple[str, dict[str, str]]:
    """(`uri` without the keys it carries, {environment variable: key}) of an
    `s3://KEY:SECRET@bucket/...` URI (percent-encoded, as pyarrow reads it); any other URI or
    path comes back as it is, with {}."""
    head, sep, rest = uri.partition("://")
    if head.lower() != "s3" or not sep:
        return uri, {}
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    user, at, host = rest[:end].rpartition("@")
    if not at:
        return uri, {}
    key, _, secret = user.partition(":")
    keys = {KEY_ENV: unquote(key), SECRET_ENV: unquote(secret)}
    return f"{head}{sep}{host}{rest[end:]}", {k: v for k, v in keys.items() if v}


def credential_free(uri: str) -> str:
    """`uri` without its keys, which move to this process's environment (AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY; a session token there, of other keys, is dropped): so the URI
    that goes on into trial configs, Tune's state, journals and messages carries no secret,
    and pyarrow, boto3 and Ray Tune's trial workers (to which Tune hands these variables) read
    the keys from the environment."""
    clean, keys = split_credentials(uri)
    if keys:
        if any(os.environ.get(k) != v for k, v in keys.items()):
            for name in SESSION_ENV:
                os.environ.pop(name, None)
        os.environ.update(keys)
    return clean


def redacted(uri: str) -> str:
    """`uri` as printed: a secret in it (`s3://KEY:SECRET@bucket/...`) replaced by `***`."""
    head, sep, rest = uri.partition("://")
    netloc, slash, path = rest.partition("/")
    user, at, host = netloc.rpartition("@")
    if not (sep and at and ":" in user):
        return uri
    return f"{head}{sep}{user.split(':', 1)[0]}:***@{host}{slash}{path}"


def uri_join(uri: str, *parts: str) -> str:
    """`uri`/part/... with the URI's query options (pyarrow's `?endpoint_override=...&scheme=`)
    kept at the end: `s3://b/r?scheme=http` + `sw/tune` -> `s3://b/r/sw/tune?scheme=http`."""
    head, sep, query = uri.partition("?")
    return "/".join([head.rstrip("/"), *parts]) + sep + query


class Store:
    """The row store at a path or URI; `uri` is the URI without keys (`credential_free`): the
    one every trial, Tune run and message is given."""

    def __init__(self, storage: str):
        self.uri = storage_uri(credential_free(storage))  # its keys, if any: in the environment
        self.fs, self.root = pafs.FileSystem.from_uri(self.uri)

    @property
    def redacted(self) -> str:
        """The URI as printed in messages (no secret)."""
        return redacted(self.uri)

    def study_dir(self, sweep: str, study: str) -> str:
        return f"{self.root}/{sweep}/{study}"

    def rows_path(self, sweep: str, study: str, config_hash: str, status: str = "ok") -> str:
        folder = "failed" if status == "failed" else "rows"
        return f"{self.study_dir(sweep, study)}/{folder}/{config_hash}.parquet"

    def final_train_loss(self, sweep: str, study: str, config_hash: str) -> tuple[int, float]:
        """(step, value) of a finished member's last train_loss row ((0, nan) without one):
        what a search reports for a config an earlier trial finished (its member file, else
        its compacted copy)."""
        columns = ["metric", "value", "step"]
        try:
            with self.fs.open_input_file(self.rows_path(sweep, study, config_hash)) as f:
                rows = pq.read_table(f, columns=columns).to_pylist()
        except FileNotFoundError:
            where = self.compacted(sweep, study).get(config_hash)
            if where is None:
                raise
            rows = self.compacted_rows(where[0], config_hash, columns).to_pylist()
        losses = sorted((r["step"], r["value"]) for r in rows if r["metric"] == "train_loss")
        return losses[-1] if losses else (0, float("nan"))

    def finished(self, sweep: str, study: str, hashes=None) -> set[str]:
        """Config hashes (of `hashes` only, when given) whose row file under rows/ verifies,
        or that a compacted file holds; files that do not verify are quarantined."""
        return set(self.statuses(sweep, study, hashes))

    def statuses(self, sweep: str, study: str, hashes=None) -> dict:
        """{hash: (status, reason)} of the finished members (of `hashes` only, when given):
        those in compacted files (one footer read per file) and the row files under rows/
        that verify, each read once; files that do not verify are quarantined."""
        compacted = self.compacted(sweep, study)
        names = set(self.member_files(sweep, study)) - set(compacted)  # the rest: duplicates
        wanted = None if hashes is None else set(hashes)
        if wanted is not None:
            names &= wanted
        out = {h: (status, reason) for h, (_, status, reason) in compacted.items()
               if wanted is None or h in wanted}
        checked = self._verify_all(sweep, study, sorted(names))
        out.update((h, status) for h, status in checked.items() if status is not None)
        return out

    def member_files(self, sweep: str, study: str, folder: str = "rows") -> dict[str, str]:
        """{config hash: path} of the member row files under rows/ (or failed/)."""
        selector = pafs.FileSelector(f"{self.study_dir(sweep, study)}/{folder}",
                                     allow_not_found=True)
        return {Path(info.path).name.removesuffix(".parquet"): info.path
                for info in self.fs.get_file_info(selector) if info.path.endswith(".parquet")}

    # --------------------------------------------------------------- compacted files

    def compacted_files(self, sweep: str, study: str) -> list[str]:
        """The study's compacted files, oldest first (their names start with a stamp)."""
        selector = pafs.FileSelector(f"{self.study_dir(sweep, study)}/{COMPACTED}",
                                     allow_not_found=True)
        return sorted(info.path for info in self.fs.get_file_info(selector)
                      if info.path.endswith(".parquet"))

    def read_compacted(self, path: str) -> dict[str, tuple[str, str | None]]:
        """{hash: (status, reason)} from a compacted file's footer, which must verify (its
        schema is a row file's, its metadata names members with one valid status each and
        its row count); else UntrustedRows (FileNotFoundError when it is gone)."""
        try:
            with self.fs.open_input_file(path) as f:
                meta = pq.read_metadata(f)
            self._check_schema(path, meta.schema.to_arrow_schema())
            held = json.loads((meta.metadata or {})[COMPACTED_KEY])
            members = {str(h): (s, r) for h, (s, r) in held["members"].items()}
            rows = int(held["rows"])
        except (FileNotFoundError, UntrustedRows):
            raise
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            raise UntrustedRows(f"{path}: unreadable compacted file ({type(exc).__name__}: "
                                f"{exc})") from None
        if rows != meta.num_rows or not members:
            raise UntrustedRows(f"{path}: footer says {rows} rows of {len(members)} members, "
                                f"the file holds {meta.num_rows} rows")
        bad = sorted({str(s) for s, _ in members.values()} - set(STATUSES))
        if bad:
            raise UntrustedRows(f"{path}: statuses {bad}, expected one of {', '.join(STATUSES)}")
        return members

    def compacted(self, sweep: str, study: str) -> dict[str, tuple[str, str, str | None]]:
        """{hash: (compacted file, status, reason)} of the study's compacted files that
        verify (one footer read each; the oldest file holding a hash is its copy); files
        that do not are quarantined and their members count as unfinished."""
        files = self.compacted_files(sweep, study)
        out: dict[str, tuple[str, str, str | None]] = {}
        held = self._map(lambda path: self.compacted_or_quarantined(sweep, study, path), files)
        for path, members in zip(files, held, strict=True):
            for h, (status, reason) in (members or {}).items():
                out.setdefault(h, (path, status, reason))
        return out

    def compacted_or_quarantined(self, sweep: str, study: str, path: str) -> dict | None:
        """`read_compacted`, or None when the file is gone or did not verify (then moved to
        quarantine/ whole, and said)."""
        try:
            return self.read_compacted(path)
        except FileNotFoundError:
            return None
        except UntrustedRows as exc:
            dest = self.quarantine(sweep, study, path, str(exc))
            logger.warning(f"[{sweep}/{study}] untrusted compacted file {exc}; moved to {dest}; its "
                           "configs will be trained again")
            return None

    def compacted_rows(self, path: str, config_hash: str, columns=None) -> pa.Table:
        """One member's rows from a compacted file (sorted by hash: row groups whose
        statistics exclude it are not read)."""
        with self.fs.open_input_file(path) as f:
            return pq.read_table(f, columns=columns, filters=[("config_hash", "=", config_hash)])

    @staticmethod
    def _map(fn, items: list) -> list:
        """fn over items, in threads when there are many (a remote store answers each read
        in tens of milliseconds)."""
        if len(items) < 8:
            return list(map(fn, items))
        with ThreadPoolExecutor(max_workers=16) as pool:
            return list(pool.map(fn, items))

    def _verify_all(self, sweep: str, study: str, hashes: list[str], folder: str = "ok") -> dict:
        """{hash: (status, reason) or None (quarantined or gone)}, read in parallel."""
        return dict(self._map(
            lambda h: (h, self.verified_or_quarantined(sweep, study, h, folder)), hashes))

    @staticmethod
    def _check_schema(path: str, schema: pa.Schema) -> None:
        wrong = [n for n in ROW_SCHEMA.names if n not in schema.names
                 or schema.field(n).type != ROW_SCHEMA.field(n).type]
        if wrong:
            raise UntrustedRows(f"{path}: columns missing or of another type: {', '.join(wrong)}")

    def read_verified(self, path: str, config_hash: str) -> tuple[str, str | None]:
        """(status, reason) of a row file that verifies; else UntrustedRows naming the file
        and why (FileNotFoundError when it is gone)."""
        try:
            with self.fs.open_input_file(path) as f:
                parquet = pq.ParquetFile(f)
                self._check_schema(path, parquet.schema_arrow)
                table = parquet.read(columns=["config_hash", "status", "reason", "metric"])
        except (FileNotFoundError, UntrustedRows):
            raise
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise UntrustedRows(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
        return check_member(path, table, config_hash)

    def verified_or_quarantined(self, sweep: str, study: str, config_hash: str,
                                status: str = "ok") -> tuple[str, str | None] | None:
        """(status, reason) of a member's row file (rows/, or failed/ for status "failed");
        None when it is missing or did not verify (then moved to quarantine/, and said)."""
        path = self.rows_path(sweep, study, config_hash, status)
        try:
            return self.read_verified(path, config_hash)
        except FileNotFoundError:
            return None
        except UntrustedRows as exc:
            dest = self.quarantine(sweep, study, path, str(exc))
            logger.warning(f"[{sweep}/{study}] untrusted row file {exc}; moved to {dest}; config "
                           f"{config_hash} will be trained again")
            return None

    def quarantine(self, sweep: str, study: str, path: str, reason: str) -> str:
        """Move a file to <study>/quarantine/ (never deleted) with a .reason.txt beside it;
        returns where it went (the path itself if another process moved it first)."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        dest = (f"{self.study_dir(sweep, study)}/{QUARANTINE}/"
                f"{stamp}-{uuid.uuid4().hex[:6]}-{path.rsplit('/', 1)[-1]}")
        self.fs.create_dir(dest.rsplit("/", 1)[0], recursive=True)
        try:
            self.fs.move(path, dest)
        except FileNotFoundError:
            return path
        self.write_bytes(f"{dest}.reason.txt", f"{path}\n{reason}\n".encode())
        return dest

    def write_bytes(self, path: str, data: bytes | memoryview) -> None:
        """Write then rename: readers never see a partial file."""
        self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, path)
        except BaseException:
            self.discard(tmp)
            raise

    def discard(self, path: str) -> None:
        """Remove a file if it is there; never raises (cleanup on a failing store)."""
        try:
            self.fs.delete_file(path)
        except (OSError, pa.ArrowException):
            pass

    def write_rows(self, path: str, table: pa.Table) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf)
        self.write_bytes(path, buf.getvalue())

    def delete(self, path: str) -> None:
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_file(path)

    def read_status(self, path: str) -> tuple[str, str | None]:
        """(status, reason) of a row file; UntrustedRows (naming it) when it does not verify."""
        return self.read_verified(path, Path(path).name.removesuffix(".parquet"))

    def member_status(self, sweep: str, study: str, hashes: list[str]) -> dict:
        """{hash: (status, reason)}; 'missing' where no file verifies (e.g. a killed trial;
        a file that did not verify is quarantined, and the reason says where it went).
        Member files are read first; compacted files only for hashes without one."""
        out = self._verify_all(sweep, study, list(hashes))
        left = [h for h, status in out.items() if status is None]
        if left:
            compacted = self.compacted(sweep, study)
            out.update((h, compacted[h][1:]) for h in left if h in compacted)
            left = [h for h in left if out[h] is None]
        out.update((h, s) for h, s in self._verify_all(sweep, study, left, "failed").items()
                   if s is not None)
        return {h: out[h] or ("missing", "no row file: the trial did not finish") for h in hashes}

    def write_manifest(self, sweep: str, study: str, manifest: dict) -> None:
        """The study's manifest beside its rows (replaced on every run of the study)."""
        text = json.dumps(manifest, indent=1, sort_keys=True, default=str)
        self.write_bytes(f"{self.study_dir(sweep, study)}/{MANIFEST}", text.encode())

    def check_writable(self, folder: str = "") -> None:
        """Fail before launch if the storage (its `folder`, e.g. a sweep's) cannot be written;
        a folder the probe made is removed with it (the storage's own is kept)."""
        where = f"{self.root}/{folder}" if folder else self.root
        made = bool(folder) and self.fs.get_file_info(where).type == pafs.FileType.NotFound
        probe = f"{where}/.write-probe-{uuid.uuid4().hex[:8]}"
        self.write_bytes(probe, b"ok")
        self.fs.delete_file(probe)
        if made:
            self.fs.delete_dir(where)


def check_member(path: str, table: pa.Table, config_hash: str) -> tuple[str, str | None]:
    """(status, reason) of one member's rows (columns config_hash, status, reason and metric
    at least) when they are that config's, with one status and the member's last row; else
    UntrustedRows naming the file and why."""
    hashes, statuses = set(table["config_hash"].to_pylist()), set(table["status"].to_pylist())
    if hashes != {config_hash}:
        raise UntrustedRows(f"{path}: rows of {sorted(map(str, hashes))}, not {config_hash}")
    if len(statuses) != 1 or not statuses <= set(STATUSES):
        raise UntrustedRows(f"{path}: statuses {sorted(map(str, statuses))}, expected one "
                            f"of {', '.join(STATUSES)}")
    if LAST_METRIC not in set(table["metric"].to_pylist()):
        raise UntrustedRows(f"{path}: no {LAST_METRIC} row: the member's rows are incomplete")
    return table["status"][0].as_py(), table["reason"][0].as_py()


def read_manifest(fs: pafs.FileSystem, study_dir: str) -> dict | None:
    """A study folder's manifest (None when there is none: a store written before manifests
    existed, or rows written without a sweep run)."""
    path = f"{study_dir}/{MANIFEST}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())


def rows_table(rows: list[dict], constants: dict) -> pa.Table:
    """Tidy rows + constant columns (flattened config, provenance) -> an Arrow table; with the
    batch size among the constants, also `samples` = step x train.batch_size (the training
    samples seen at that row's step, what sample-complexity curves are drawn against)."""
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
    batch = constants.get("train.batch_size")
    if batch is not None and "samples" not in constants:  # training samples seen at each step
        steps = [row.get("step") for row in rows]
        table = table.append_column("samples", pa.array(
            [None if step is None else step * batch for step in steps], pa.int64()))
    return table

