"""Fault injection (test-only tooling, on Ray private API) for the reliability tests and the soak
(benchmarks/soak.py): find this Ray session's trial workers and kill them for real (SIGKILL), as a
crash or pre-emption would."""

from __future__ import annotations

import glob
import os
import signal
from pathlib import Path


def raylet_pid() -> int:
    """PID of the raylet of the Ray session this process started or joined (private API:
    Ray is pinned)."""
    import ray

    return ray._private.worker._global_node.all_processes["raylet"][0].process.pid


def trial_workers(raylet: int | None = None) -> list[int]:
    """PIDs of this Ray session's workers running a Tune function trial (children of its
    raylet whose title is ray::ImplicitFunc...), read from /proc (Linux)."""
    raylet = raylet_pid() if raylet is None else raylet
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
            cmd = Path(stat).with_name("cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, IndexError, UnicodeDecodeError):
            continue
        if int(fields[1]) == raylet and cmd.startswith("ray::ImplicitFunc"):
            pids.append(int(Path(stat).parent.name))
    return pids


def kill(pid: int) -> bool:
    """SIGKILL `pid`; False if it had already exited."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
