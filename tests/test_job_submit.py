"""`ray start --head` (own temp dir, loopback dashboard, token auth) + `ray job submit`.

The cluster runs in its own process group, which the test ends; no other Ray is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from icl_core.storage.store import Store

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head node in its own session group; yields the dashboard (job server) address.

    Its temp dir is short on purpose: Ray's AF_UNIX socket paths must stay under 108 bytes,
    which pytest's own tmp paths can exceed.
    """
    temp = Path(tempfile.mkdtemp(prefix="icl-ray-", dir="/tmp"))
    ray_bin = str(Path(sys.executable).parent / "ray")
    # the job's `python` is this interpreter, even when the venv is not activated
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PATH": path}
    subprocess.run([ray_bin, "get-auth-token", "--generate"], env=env, check=True,
                   capture_output=True)
    dash = free_port()
    log = open(temp / "head.log", "w")  # noqa: SIM115 - closed below
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--num-cpus=2", f"--port={free_port()}",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--include-dashboard=true",
         # its own job-agent port: another Ray on this host (a default 52365) must not leave
         # the head without a job agent ("No available agent to submit job")
         f"--dashboard-agent-listen-port={free_port()}",
         f"--temp-dir={temp}/ray"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    address = f"http://127.0.0.1:{dash}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            probe = subprocess.run([ray_bin, "job", "list", "--address", address], env=env,
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                break
            assert head.poll() is None, (temp / "head.log").read_text()[-3000:]
            time.sleep(2)
        else:
            pytest.fail("Ray head did not come up:\n" + (temp / "head.log").read_text()[-3000:])
        yield address, env
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:  # `ray start --block` took over 10 s to leave on SIGTERM: then its group is killed
            head.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()
        try:  # stragglers of that group only
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)


def test_job_submit_runs_the_depth_sweep_on_a_cluster(ray_head, tmp_path):
    address, env = ray_head
    storage = tmp_path / "store"
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    for _ in range(30):  # the head's job agent can come up after its API on a loaded host
        job = subprocess.run(
            [ray_bin, "job", "submit", "--address", address, "--working-dir", str(ROOT), "--",
             "python", "sweeps/depth_scaling.py", "--preset", "smoke", "--study",
             "least_squares", "--storage", str(storage), "--no-figures"],
            env=env, capture_output=True, text=True, timeout=400,
        )
        if "No available agent to submit job" not in job.stderr:
            break
        time.sleep(3)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    assert "finished: 4 ok" in job.stdout
    assert len(Store(str(storage)).finished("depth_scaling", "least_squares")) == 4
