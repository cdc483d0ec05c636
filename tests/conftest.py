"""Shared fixtures: one real local Ray for the whole session, tiny member configs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the benchmark scripts' helpers (stack_scaling.member, run_without_ray.trials, ...) import by
# their module names, as the scripts import each other
sys.path.append(str(ROOT / "benchmarks"))


@pytest.fixture(scope="session", autouse=True)
def console_lines():
    """The run's lines on the console, as every command and the Python API set them up
    (icl_core.common.log.ensure_console), for tests that call the layers below them; the faces'
    own set-up is tested in tests/test_logging.py in a fresh interpreter."""
    from icl_core.common.log import ensure_console

    ensure_console()


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray (2 CPUs, 4 logical GPUs), started once for every test that needs it.

    The logical GPUs exercise the resource planner's GPU shares on a CPU-only machine; with
    a CPU build of torch, device "auto" still resolves to the CPU inside each trial. Its
    dashboard is on, on loopback, as a sweep's embedded Ray has it (a smoke run prints its
    address and a test opens it: tests/test_sweep_e2e.py).
    """
    import ray

    ray.init(num_cpus=2, num_gpus=4, include_dashboard=True, dashboard_host="127.0.0.1",
             log_to_driver=False)
    yield ray
    ray.shutdown()


def tiny_member(**over) -> dict:
    """A member config that trains in well under a second."""
    cfg = {
        "task": {"name": "linear_regression", "dim": 3, "n_points": 6},
        "model": {"name": "transformer", "width": 8, "depth": 2, "heads": 2},
        "train": {"steps": 20, "batch_size": 8, "report_every": 10, "checkpoint_every": 10},
        "eval": {"n_prompts": 50, "baselines": ["ols"]},
    }
    for key, value in over.items():
        section, _, name = key.partition("__")
        if name:
            cfg.setdefault(section, {})[name] = value
        else:
            cfg[section] = value
    return cfg


def assert_same_batch(a, b, tol: float = 0.0) -> None:
    """Two batches equal: inputs, targets and every extra bit for bit (tol = 0) or to `tol`
    (relative and absolute), the mask exactly."""
    import torch

    assert torch.equal(a.mask, b.mask)
    assert a.extras.keys() == b.extras.keys()
    for x, y in ((a.inputs, b.inputs), (a.targets, b.targets),
                 *((a.extras[k], b.extras[k]) for k in a.extras)):
        if tol:
            torch.testing.assert_close(x, y, rtol=tol, atol=tol)
        else:
            assert torch.equal(x, y)


@pytest.fixture
def kept_figures(monkeypatch):
    """The figures the figure functions close, kept open for inspection."""
    import matplotlib.pyplot as plt

    kept, close = [], plt.close  # the real close: the patch is still on at teardown
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for fig in kept:
        if fig is not None:
            close(fig)
