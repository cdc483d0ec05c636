"""A search's Optuna journal on any store: Optuna's JournalFileBackend on a local path; on a URI
(s3://, gs://, ...) the same file, mirrored.

A mirrored journal is a local working copy, downloaded when this process first opens it, and
uploaded whole (written, then renamed: never a partial file) after appends: at most every
`EVERY_S` seconds while a search runs, and at the end (`flush_journals`, also at exit). So
`<storage>/<sweep>/<search>/optuna.journal` is a plain Optuna journal file wherever the rows
are; download it to open it with `optuna-dashboard`, or `journal_storage(uri)` opens it in
place. A driver killed mid-search loses at most the last `EVERY_S` seconds of its journal.
One driver writes a search's journal at a time (Ray Tune's searcher runs in the driver): the
driver holds the search's lease (icl_core.running.search.search_lease) from before it reads the
journal (`reopen`) until after its last upload, so a second driver is refused, not merged.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
import time

import pyarrow.fs as pafs
from optuna.storages.journal import JournalFileBackend

from icl_core.storage.store import Store, credential_free

EVERY_S = 5.0
_OPEN: dict[str, MirroredJournal] = {}  # one working copy per journal URI in this process
_LOCK = threading.Lock()


def journal_storage(path: str):
    """An Optuna JournalStorage over a local journal file or a journal on a URI."""
    from optuna.storages import JournalStorage

    if "://" not in path:
        return JournalStorage(JournalFileBackend(path))
    return JournalStorage(mirrored(credential_free(path)))  # pickled with a searcher: no keys


def journal_exists(path: str | None) -> bool:
    if path is None:
        return False
    if "://" not in path:
        return os.path.exists(path)
    path = credential_free(path)
    if path in _OPEN:
        return True
    fs, remote = pafs.FileSystem.from_uri(path)
    return fs.get_file_info(remote).type == pafs.FileType.File


def mirrored(uri: str) -> MirroredJournal:
    """This process's working copy of the journal at `uri` (opened once)."""
    with _LOCK:
        if uri not in _OPEN:
            _OPEN[uri] = MirroredJournal(uri)
        return _OPEN[uri]


def reopen(path: str) -> None:
    """Read the journal at `path` from the store again at its next open (its working copy here
    uploaded first, where it has appends): a driver that has just taken its search's lease
    goes on from what the driver before it wrote, not from the copy it read before."""
    if "://" not in path:
        return
    with _LOCK:
        journal = _OPEN.pop(credential_free(path), None)
    if journal is not None:
        journal.flush()


def flush_journals() -> None:
    """Upload every journal this process appended to since its last upload."""
    for journal in list(_OPEN.values()):
        journal.flush()


atexit.register(flush_journals)


class MirroredJournal(JournalFileBackend):
    """An Optuna journal file on a URI, through a local working copy."""

    def __init__(self, uri: str, every_s: float = EVERY_S):
        self.uri, self.every_s = uri, every_s
        self.store = Store(uri)
        local = os.path.join(tempfile.mkdtemp(prefix="icl-journal-"), "optuna.journal")
        try:
            with self.store.fs.open_input_stream(self.store.root) as f, open(local, "wb") as out:
                out.write(f.read())
        except FileNotFoundError:
            pass
        super().__init__(local)
        self.local, self.dirty, self.uploaded = local, False, 0.0
        self.upload_lock = threading.Lock()

    def append_logs(self, logs) -> None:
        super().append_logs(logs)
        self.dirty = True
        if time.monotonic() - self.uploaded >= self.every_s:
            self.flush()

    def flush(self) -> None:
        with self.upload_lock:
            if not self.dirty:
                return
            self.dirty = False
            with open(self.local, "rb") as f:
                data = f.read()
            try:
                self.store.write_bytes(self.store.root, data)
            except BaseException:
                self.dirty = True
                raise
            self.uploaded = time.monotonic()

    def __reduce__(self):  # pickled with a Tune searcher: reopened from the URI
        return mirrored, (self.uri,)
