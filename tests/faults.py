"""Fault injection (test-only tooling, on Ray private API) for the reliability tests and the soak
(benchmarks/soak.py): find this Ray session's trial workers and kill them for real (SIGKILL), as a
crash or pre-emption would; storage that refuses writes for real (an unwritable folder, a full
tmpfs); two drivers racing for the same configs (any storage: local or S3)."""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import signal
import subprocess
from pathlib import Path

import pytest


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


@contextlib.contextmanager
def unwritable_dir(path: Path):
    """`path` (a folder) made unwritable for real: chmod 0555, or, as root (whom chmod does
    not stop), `chattr +i` (writes fail with EPERM). Skips the test where neither works."""
    path.mkdir(parents=True, exist_ok=True)
    root = os.geteuid() == 0
    if root:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
        if done.returncode:
            pytest.skip(f"root, and chattr +i failed: {done.stderr.decode().strip()}")
    else:
        path.chmod(0o555)
    try:
        yield
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o755)


@contextlib.contextmanager
def full_tmpfs(path: Path, size: str = "512k"):
    """A real tmpfs of `size` mounted at `path` and filled up (writes fail with ENOSPC);
    yields the filler file (delete it to free the space). Skips the test where mounting is
    not permitted (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        filler = path / "filler"
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        yield filler
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


RACING_DRIVER = """
import json, sys, time
from conftest import tiny_member
from icl_core.storage.claims import plan_claims
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store
from icl_core.running.trial import TrialSpec, run_trial

storage, start = sys.argv[1], float(sys.argv[2])
members = [resolve_member(tiny_member(seed=s)) for s in range(6)]
store = Store(storage)
while time.time() < start:
    time.sleep(0.005)
claims, mine, others = plan_claims(store, "sw", "st", [m.hash for m in members])
trained = []
with claims.keep():
    for m in members:
        if m.hash in mine:
            spec = TrialSpec("sw", "st", storage, [m.to_dict()], driver=claims.owner.driver)
            trained += [h for h, s in run_trial(spec).items() if s == "ok"]
print(json.dumps({"trained": trained, "others": others}))
"""


def race_two_drivers(storage: str) -> list[dict]:
    """Two processes that claim the same six tiny configs (tests/conftest.tiny_member, seeds
    0-5, study sw/st) at the same instant, then train what they hold (no Ray: the claims race
    itself); each one's {"trained": [hashes], "others": {hash: holder}}."""
    import json
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'tests'}"}
    start = time.time() + 8  # both have imported torch by then
    procs = [subprocess.Popen([sys.executable, "-c", RACING_DRIVER, storage, str(start)],
                              stdout=subprocess.PIPE, env=env, cwd=root) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=240)[0].decode().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    return outs
