"""Provenance columns: which code, packages and device produced a row."""

from __future__ import annotations

import functools
import hashlib
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "ray", "optuna", "polars", "numpy")


def code_version() -> str:
    """`git describe` of the checkout holding icl_core (+dirty), else the package version."""
    root = Path(__file__).resolve().parents[2]  # <root>/icl_core/storage/
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        try:
            return metadata.version("icl-sweeps")
        except metadata.PackageNotFoundError:
            return "unknown"


@functools.cache
def code_digest(root: Path | None = None) -> str:
    """A digest of the core's source files (icl_core/**/*.py, or those under `root`: names and
    contents): the code a trial runs, whether or not a git checkout says so (a lent machine's
    copy has no .git, and `git describe --dirty` is the same for every uncommitted edit)."""
    root = root or Path(__file__).resolve().parents[1]  # <root>/icl_core/
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def driver_provenance() -> dict:
    """Computed once on the driver (workers may not have the git checkout)."""
    info = {"code_version": code_version(), "python_version": platform.python_version()}
    for name in PACKAGES:
        try:
            info[f"{name}_version"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[f"{name}_version"] = None
    return info


def worker_provenance(device) -> dict:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"hostname": socket.gethostname(), "device_type": device.type, "device_name": name}
