"""Writing a finished member's files: artifacts, then its row file (last: it marks the member
finished), retried with backoff; a storage fault that outlasts the tries is returned with its
errno and message, never raised (icl_core.running.trial.finish_member records the member failed)."""

from __future__ import annotations

import errno
import logging
import re
import time

import pyarrow as pa

from icl_core.storage.artifacts import save_artifacts
from icl_core.storage.store import Store, rows_table

logger = logging.getLogger(__name__)

WRITE_TRIES = 3
WRITE_BACKOFF_S = 0.5  # waits 0.5 s, then 1 s, between tries


def store_member(store: Store, spec, h: str, status: str, rows: list,
                 constants: dict, artifacts) -> str | None:
    """Artifacts, then the row file (last: it marks the member finished), tried
    `WRITE_TRIES` times with backoff; None when stored, else the storage fault (errno and
    message), after one try to leave a failed/ record saying so."""
    path = store.rows_path(spec.sweep, spec.study, h, status)
    failed = store.rows_path(spec.sweep, spec.study, h, "failed")
    for attempt in range(WRITE_TRIES):
        try:
            if status != "failed" and artifacts:
                save_artifacts(store, spec.sweep, spec.study, h, artifacts)
            store.write_rows(path, rows_table(rows, constants))
            if status != "failed":
                store.delete(failed)
            return None
        except (OSError, pa.ArrowException) as exc:
            fault = storage_fault(exc)
            if attempt + 1 < WRITE_TRIES:
                time.sleep(WRITE_BACKOFF_S * 2 ** attempt)
    logger.warning(f"[{spec.sweep}/{spec.study}] member {h}: {fault}, after {WRITE_TRIES} tries; recorded "
                   "failed, to be trained again by the next run")
    try:
        store.write_rows(failed, rows_table(rows, {**constants, "status": "failed",
                                                   "reason": fault}))
    except (OSError, pa.ArrowException):
        pass  # the store takes nothing: Tune's result and this log hold the reason
    return fault


def storage_fault(exc: BaseException) -> str:
    """'storage fault: ENOSPC (errno 28): <message>' (pyarrow's errors carry the errno in
    their message only)."""
    code = getattr(exc, "errno", None)
    if code is None:
        found = re.search(r"\[errno (\d+)\]", str(exc), re.IGNORECASE)
        code = int(found.group(1)) if found else None
    name = f"{errno.errorcode.get(code, 'errno')} (errno {code})" if code else "no errno"
    return f"storage fault: {name}: {type(exc).__name__}: {exc}"
