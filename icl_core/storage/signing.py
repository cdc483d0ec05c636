"""No code from storage: the pickles of a Ray Tune experiment are signed by the driver that
wrote them and checked before `--resume` unpickles them.

Ray Tune restores a search from pickles in its experiment folder (tuner.pkl, trainable.pkl,
searcher-state-*.pkl, trial state inside experiment_state-*.json, trials' error.pkl, ...):
unpickling runs code, so whoever can write the shared store could otherwise run code in the
driver. The driver signs them with an HMAC-SHA256 keyed by a secret that never leaves its
home (`key_path`: ~/.config/icl_core/state_key, mode 0600, made on first use) into
`<experiment>/icl-signature.json`; `verify` refuses a folder where any such file is unsigned
or does not match. Signed: every file at the experiment's top level and every *.pkl below
it (trial checkpoints are weights only, loaded with weights_only=True: they run no code).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

import pyarrow.fs as pafs

from icl_core.storage.store import redacted

SIGNATURE = "icl-signature.json"


class UntrustedState(Exception):
    """An experiment folder whose pickles this driver did not sign (or that changed since)."""


def key_path() -> Path:
    return Path.home() / ".config" / "icl_core" / "state_key"


def secret_key() -> bytes:
    """The driver's signing key: made once (32 random bytes, mode 0600, folder 0700)."""
    path = key_path()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    if path.stat().st_mode & 0o077:
        raise UntrustedState(f"{path}: the signing key is readable by others (chmod 600 it)")
    return path.read_bytes()


def _covered(fs, root: str) -> list[str]:
    """Paths (relative to root) of the files the signature covers."""
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    out = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(root.rstrip("/")) + 1:]
        if not rel.startswith(SIGNATURE) and ("/" not in rel or rel.endswith(".pkl")):
            out.append(rel)
    return sorted(out)


def _mac(key: bytes, rel: str, data: bytes) -> str:
    return hmac.new(key, rel.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def _read(fs, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def sign(uri: str) -> None:
    """Sign the experiment folder at `uri` (a local path or a pyarrow URI)."""
    fs, root = pafs.FileSystem.from_uri(uri)
    if fs.get_file_info(root).type != pafs.FileType.Directory:
        return  # Tune has written nothing yet
    key = secret_key()
    macs = {rel: _mac(key, rel, _read(fs, f"{root}/{rel}")) for rel in _covered(fs, root)}
    tmp = f"{root}/{SIGNATURE}.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps({"files": macs}, indent=1, sort_keys=True).encode())
    fs.move(tmp, f"{root}/{SIGNATURE}")


def verify(uri: str) -> None:
    """UntrustedState (naming the files) unless every covered file carries this driver's
    signature; reads nothing but bytes."""
    fs, root = pafs.FileSystem.from_uri(uri)
    why = (f"refusing to restore {redacted(uri)}: Ray Tune would unpickle its state, and this driver did "
           "not sign ")
    try:
        signed = json.loads(_read(fs, f"{root}/{SIGNATURE}").decode())["files"]
    except FileNotFoundError:
        raise UntrustedState(f"{why}it (no {SIGNATURE}: written elsewhere, by another user, or "
                             "before signing existed); start the search afresh under another "
                             "--storage or delete that folder") from None
    key = secret_key()
    bad = [rel for rel in _covered(fs, root)
           if not hmac.compare_digest(signed.get(rel, ""), _mac(key, rel, _read(fs, f"{root}/{rel}")))]
    if bad:
        raise UntrustedState(f"{why}{', '.join(bad)} as it is now (planted or changed after "
                             f"the driver last signed it, or signed with another key than "
                             f"{key_path()}); inspect them, or start the search afresh")


@contextlib.contextmanager
def keep_signed(uri: str, every_s: float = 1.0):
    """Sign the experiment folder every `every_s` while the block runs (Ray Tune saves its
    state as it goes: a driver killed mid-search leaves state signed to within `every_s`), and
    once more at its end."""
    stop = threading.Event()

    def signer():
        while not stop.wait(every_s):
            with contextlib.suppress(OSError, ValueError):  # a file mid-write: next round
                sign(uri)

    thread = threading.Thread(target=signer, name="sign-state", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sign(uri)
