"""cluster/slurm.sbatch on a real single-node Slurm: Debian's slurm-wlm + munge, installed with
apt when missing and started in a temporary folder by cluster/slurm_local_setup.sh (slurmd in
its own PID namespace, so that symmetric-run's closing `ray stop` reaches only the job's Ray).
A smoke sweep goes in with `sbatch`, is waited for with `squeue`, and its rows are read back;
a second submission with the same storage resumes: it trains nothing and rewrites no row.

    python -m pytest -m slow tests/test_slurm.py     # ~3-3.5 min on 2 cores (+ ~30 s for apt the first time)

Skips, saying why, where Slurm cannot be installed or started (not root, no apt, no PID
namespaces). The script's checks of its inputs run without Slurm, in the default suite.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from analysis.reading.store import read_rows

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "cluster" / "slurm_local_setup.sh"
SBATCH = ROOT / "cluster" / "slurm.sbatch"
JOB_TIMEOUT_S = 480


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture
def slurm():
    """A running single-node Slurm; yields the environment its commands need. Stopped after."""
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root (apt-get install slurm-wlm munge; slurmd)")
    # short: the munge socket path must stay under 108 bytes
    folder = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
    env = {**os.environ, "SLURM_CTLD_PORT": str(free_port()), "SLURM_D_PORT": str(free_port())}
    started = subprocess.run(["bash", str(SETUP), "start", str(folder)], env=env,
                             capture_output=True, text=True, timeout=600)
    try:
        if started.returncode != 0:
            lines = (started.stderr or started.stdout).strip().splitlines()
            pytest.skip(f"no local Slurm: {lines[-1] if lines else started.returncode}")
        env["SLURM_CONF"] = str(folder / "slurm.conf")
        yield env, folder
    finally:
        subprocess.run(["bash", str(SETUP), "stop", str(folder)], timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def submit(env: dict, *args: str) -> str:
    done = subprocess.run(["sbatch", "--parsable", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip().split(";")[0]


def wait_for(env: dict, job: str) -> dict:
    """Wait until squeue no longer lists the job; its final JobState and ExitCode (from
    scontrol: this Slurm has no accounting database, so no sacct)."""
    deadline = time.time() + JOB_TIMEOUT_S
    while time.time() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                                capture_output=True, text=True, timeout=30)
        if not queued.stdout.strip():
            break
        time.sleep(3)
    else:
        subprocess.run(["scancel", job], env=env, timeout=30)
        pytest.fail(f"job {job} still queued or running after {JOB_TIMEOUT_S} s")
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], env=env,
                           capture_output=True, text=True, timeout=30, check=True).stdout
    return dict(re.findall(r"(JobState|ExitCode)=(\S+)", shown))


def ray_processes_of(job: str) -> list[str]:
    """Command lines of the processes that use the job's Ray temp dir (none once it stopped)."""
    marker = f"/tmp/ray-icl-{job}"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.parametrize("setting, line", [
    ({"ICL_SWEEP": "bases"}, "error: ICL_SWEEP: no runnable sweep file .*sweeps/bases.py "
     "\\(valid: adaptive_depth,.*,depth_scaling,.*width_scaling\\)"),
    ({"ICL_PYTHON": "/nowhere/python"}, "error: ICL_PYTHON: no Python at '/nowhere/python'"),
    ({"ICL_RAY_TOKEN": "TOKEN"}, "error: ICL_RAY_TOKEN: .*/token has mode 644, not 600"),
])
def test_the_sbatch_script_refuses_bad_settings_before_starting_anything(tmp_path, setting, line):
    token = tmp_path / "token"
    token.write_text("not-secret\n")
    token.chmod(0o644)
    setting = {k: v.replace("TOKEN", str(token)) for k, v in setting.items()}
    env = {**os.environ, "ICL_PYTHON": sys.executable, "ICL_REPO": str(ROOT),
           "ICL_STORAGE": str(tmp_path / "store"), "HOME": str(tmp_path), **setting}
    done = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr  # one line
    assert re.match(line, done.stderr), done.stderr
    assert not (tmp_path / "store").exists() and not (tmp_path / ".ray").exists()


@pytest.mark.slow
def test_a_smoke_sweep_submitted_with_sbatch_writes_its_rows_and_resumes(slurm, tmp_path):
    env, folder = slurm
    store, token = tmp_path / "store", tmp_path / "shared" / "ray_token"
    env = {**env, "ICL_PYTHON": sys.executable, "ICL_SWEEP": "depth_scaling",
           "ICL_PRESET": "smoke", "ICL_STUDY": "least_squares", "ICL_STORAGE": str(store),
           "ICL_RAY_TOKEN": str(token), "ICL_RAY_PORT": str(free_port()),
           "ICL_DASHBOARD_PORT": str(free_port()), "ICL_RAY_CLIENT_PORT": str(free_port()),
           "ICL_DASHBOARD_AGENT_PORT": str(free_port())}
    sweep_args = ["--figures", str(tmp_path / "figures")]

    job = submit(env, f"--output={tmp_path}/job-%j.out", str(SBATCH), *sweep_args)
    state = wait_for(env, job)
    log = (tmp_path / f"job-{job}.out").read_text()
    assert state == {"JobState": "COMPLETED", "ExitCode": "0:0"}, log[-4000:]
    assert "On head node. Starting Ray cluster head..." in log
    assert "[depth_scaling/least_squares] finished: 4 ok, 0 diverged, 0 failed" in log, log[-4000:]
    assert stat.S_IMODE(token.stat().st_mode) == 0o600  # made by the script, owner-only
    assert ray_processes_of(job) == []  # symmetric-run stopped its Ray when the sweep ended

    rows, coverage = read_rows(str(store), "depth_scaling", "least_squares", expected=4)
    assert coverage.statuses == {"ok": 4} and rows["config_hash"].n_unique() == 4
    assert (tmp_path / "figures" / "depth_scaling" / "least_squares" / "depth.png").exists()

    files = sorted((store / "depth_scaling" / "least_squares" / "rows").glob("*.parquet"))
    written = {path.name: path.stat().st_mtime_ns for path in files}
    again = submit(env, f"--output={tmp_path}/job-%j.out", str(SBATCH), *sweep_args)
    state = wait_for(env, again)
    log = (tmp_path / f"job-{again}.out").read_text()
    assert state == {"JobState": "COMPLETED", "ExitCode": "0:0"}, log[-4000:]
    assert "[depth_scaling/least_squares] 4 configs, 4 already finished, running 0" in log, \
        log[-4000:]
    assert {path.name: path.stat().st_mtime_ns for path in files} == written
