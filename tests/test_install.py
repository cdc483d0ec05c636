"""The project as a user installs it: a wheel built from the tree, installed (not editable)
into a fresh virtual environment, and its `icl` command run from another folder.

The new environment sees this one's third-party packages (torch, Ray, ...) through a .pth
line, so nothing is downloaded; the project itself must come from the wheel: the test checks
that icl_core and sweeps import from the new environment, not from this source tree.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(cmd, cwd, timeout=600, env=None):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, f"{cmd}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv folder, an environment for its commands): the wheel built and installed."""
    # the wheel is built with this environment's setuptools (no download: --no-build-isolation)
    pytest.importorskip("setuptools", minversion="77", reason="building the wheel offline")
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"  # a copy: the build writes build/ and *.egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for name in ("icl", "icl_core", "analysis", "sweeps"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          src, "-w", tmp / "wheel"], cwd=tmp)
    wheel = next((tmp / "wheel").glob("icl_sweeps-*.whl"))
    import zipfile

    shipped = zipfile.ZipFile(wheel).namelist()
    for typed in ("icl/py.typed", "icl_core/py.typed", "analysis/py.typed"):  # type checkers read ours (PEP 561)
        assert typed in shipped, typed
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in shipped)
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
         cwd=tmp)
    python = venv / "bin" / "python"
    purelib = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                       "['purelib'])"], cwd=tmp).strip())
    # this environment's packages (torch, Ray, ...), after the new one's own site-packages;
    # its editable install of this project is a .pth there, which a .pth line never runs
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "_outer_env.pth").write_text("\n".join(ours) + "\n")
    # --ignore-installed: the outer environment holds this project (editable), never reuse it
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps",
          "--ignore-installed",
          "--no-index", "-q", wheel], cwd=tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, env, purelib


def test_wheel_installs_icl_and_ships_the_sweep_files(installed, tmp_path):
    venv, env, purelib = installed
    where = _run([venv / "bin" / "python", "-c",
                  "import icl_core, sweeps, analysis; print(icl_core.__file__); "
                  "print(sweeps.__file__); print(analysis.__file__)"], cwd=tmp_path, env=env)
    for line in where.split():
        assert Path(line).resolve().is_relative_to(purelib.resolve()), line  # not ROOT
    assert not Path(sysconfig.get_paths()["purelib"]).resolve().is_relative_to(
        purelib.resolve())
    out = _run([venv / "bin" / "icl", "list", "studies"], cwd=tmp_path, env=env)
    assert "depth_scaling/least_squares (grid): Liu et al. Fig 2" in out
    assert "hpo_lr/width_lr (search)" in out
    out = _run([venv / "bin" / "icl", "plan", "depth_scaling", "--preset", "smoke"],
               cwd=tmp_path, env=env)
    assert "depth_scaling/least_squares [smoke]: " in out and "total: " in out
    # the GPU rate model's constants ship as package data (the one-GPU estimates read them)
    out = _run([venv / "bin" / "icl", "cost"], cwd=tmp_path, env=env)
    from icl_core.planning import gpu_rates

    assert f"GPU rate model [NVIDIA H100 80GB HBM3], {len(gpu_rates.load().points)} measured " \
        "steps" in out  # the installed file is the repository's


@pytest.mark.slow
def test_installed_icl_runs_a_smoke_sweep(installed, tmp_path):
    """A real sweep through the installed command: its own embedded Ray, rows written."""
    venv, env, _ = installed
    out = _run([venv / "bin" / "icl", "run", "depth_scaling", "--preset", "smoke", "--study",
                "least_squares", "--num-samples", "1", "--storage", tmp_path / "results",
                "--figures", tmp_path / "figures"], cwd=tmp_path, env=env)
    assert "finished: 2 ok, 0 diverged, 0 failed, 0 missing" in out
    rows = list((tmp_path / "results" / "depth_scaling" / "least_squares" / "rows").glob(
        "*.parquet"))
    assert len(rows) == 2
    assert (tmp_path / "figures" / "depth_scaling" / "least_squares" / "depth.png").exists()
