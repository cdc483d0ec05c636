"""Checks of the command line's places before anything starts: the storage URI, the Ray address
and the figures folder (and --logger's needs). Each failure is a ConfigError (one line, exit status 2), raised
before Ray is started or joined and before anything is written.

Storage: a local path, or a URI of a filesystem pyarrow.fs builds (`FileSystem.from_uri`),
which is what the row store writes through: `file://`, `s3://`, `gs://` / `gcs://`, `hdfs://` /
`viewfs://` (needs a JVM and libhdfs) and `abfs://` / `abfss://` (Azure), each where this
pyarrow build has that filesystem (`storage_schemes()`). Reading rows back
(analysis.reading.store) also takes fsspec URIs; writing them does not. Keys in an s3:// URI
(`s3://KEY:SECRET@bucket/...`) get a one-line warning; the store moves them to the environment
(icl_core.storage.store.credential_free), so no config, state or message carries them.

Ray address: `HOST:PORT` (the GCS port, 6379 by default) or `ray://HOST:PORT` (Ray Client) is
probed with a plain TCP connection for ADDRESS_TIMEOUT_S before `ray.init`, which would
otherwise retry for a minute or more, then asked once (gRPC, unauthenticated) whether it wants
a token: a token-auth cluster joined without RAY_AUTH_MODE=token is one line, not ~20 s of
retries; `auto` and `local` are left to Ray.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path

from icl_core.common.validation import ConfigError, did_you_mean, shown
from icl_core.storage.store import redacted

logger = logging.getLogger(__name__)

ADDRESS_TIMEOUT_S = 5.0
KEYS_IN_URI = ("warning: --storage carries its keys (s3://KEY:SECRET@...); they are used from "
               "this process's environment and written nowhere in the store, but pass them as "
               "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or ~/.aws, an instance role) and "
               "give --storage s3://BUCKET/... instead: a command line is seen in ps and "
               "shell history")

# scheme -> the pyarrow.fs class that serves it (FileSystem.from_uri)
_FILESYSTEMS = {
    "file": "LocalFileSystem", "s3": "S3FileSystem", "gs": "GcsFileSystem",
    "gcs": "GcsFileSystem", "hdfs": "HadoopFileSystem", "viewfs": "HadoopFileSystem",
    "abfs": "AzureFileSystem", "abfss": "AzureFileSystem",
}


def storage_schemes() -> list[str]:
    """The URI schemes this pyarrow build can write rows to."""
    import pyarrow.fs as pafs

    return [scheme for scheme, cls in _FILESYSTEMS.items() if hasattr(pafs, cls)]


def check_storage(storage: str) -> None:
    """A local path, or a URI whose scheme pyarrow.fs serves here."""
    if "://" not in storage:
        return
    scheme = storage.split("://", 1)[0].lower()
    schemes = storage_schemes()
    if scheme not in schemes:
        raise ConfigError(
            f"--storage: unsupported URI scheme {shown(scheme + '://')}; "
            f"{did_you_mean(scheme, schemes)}use a local path or one of "
            f"{', '.join(s + '://' for s in schemes)} (pyarrow.fs)")


def open_store(storage: str):
    """The row store at `storage`, or a one-line ConfigError (an unknown scheme, a bucket
    pyarrow cannot reach, a filesystem it cannot load)."""
    from icl_core.storage.store import Store, split_credentials

    check_storage(storage)
    if split_credentials(storage)[1]:
        logger.warning(KEYS_IN_URI)
    try:
        return Store(storage)  # the keys of the URI, if any, move to the environment
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--storage: cannot open {redacted(storage)!r} ({first})") from None


def parse_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a `HOST:PORT` or `ray://HOST:PORT` address; None for `auto` / `local`
    (Ray finds those itself)."""
    if address in ("auto", "local"):
        return None
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--address: expected HOST:PORT (e.g. 10.0.0.1:6379), "
                          f"ray://HOST:PORT, auto or local; got {shown(address)}")
    return host.strip("[]"), int(port)


def probe_address(address: str | None, timeout_s: float = ADDRESS_TIMEOUT_S) -> None:
    """Something answers at the Ray address within `timeout_s` (a TCP connection, then
    closed), or a one-line ConfigError."""
    target = parse_address(address) if address else None
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(f"--address: no Ray cluster answers at {host}:{port} within "
                          f"{timeout_s:g} s ({why}); start one with `ray start --head` or "
                          "fix the address") from None
    if not address.startswith("ray://") and os.environ.get("RAY_AUTH_MODE") != "token":
        check_token_auth(host, port, timeout_s)


def check_token_auth(host: str, port: int, timeout_s: float) -> None:
    """A cluster with token authentication (Ray >= 2.59; what `ray start` and ray.init
    start by default) refuses a driver without RAY_AUTH_MODE=token, and ray.init retries for
    ~20 s before a ConnectionError: one unauthenticated GCS call (GetClusterId) says so
    first. Any other answer is left to ray.init."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                raise ConfigError(
                    f"--address: the Ray cluster at {host}:{port} uses token authentication; "
                    "run this with RAY_AUTH_MODE=token (and its token in ~/.ray/auth_token or "
                    "RAY_AUTH_TOKEN: `ray get-auth-token`)") from None


def check_writable_dir(flag: str, path: str) -> None:
    """`path` is a folder we may create and write in: its nearest existing ancestor is a
    folder that takes a file (a temporary one, removed at once: nothing is left behind;
    a probe rather than permission bits, which root ignores)."""
    target = Path(path).expanduser().absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"--{flag}: cannot write to {path!r} ({existing} is not a folder)")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise ConfigError(f"--{flag}: cannot write to {path!r} ({existing}: "
                          f"{exc.strerror or exc})") from None


def check_loggers(loggers, storage_uri: str) -> None:
    """--logger: each can start (package installed, credentials or a tracking store;
    icl_core.running.wandb_mlflow)."""
    if loggers:
        from icl_core.running.wandb_mlflow import check_loggers as check

        check(loggers, storage_uri)
