"""The planner's peak-memory estimate (icl_core.planning.memory) and the refusal of a member that fits
no node's memory, before Ray starts; a member that fails its calibration, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_member

from icl_core.common.validation import ConfigError
from icl_core.planning.memory import member_memory
from icl_core.spec.config import resolve_member

ROOT = Path(__file__).resolve().parent.parent


def member(**over):
    return resolve_member({**tiny_member(**over), "device": "cpu"})


def test_the_estimate_grows_with_what_a_member_holds():
    small = member_memory(member())
    # the task's d x d covariance (float64) and the ridge predictor's Gram per test prompt
    wide = member_memory(member(task={"name": "linear_regression", "dim": 300, "n_points": 6}))
    assert wide.task == 300 * 300 * 8 and wide.evaluation > 50 * 300 * 300 * 8
    # activations: linear in the batch; attention's T^2 scores per head
    batch = member_memory(member(train__batch_size=80))
    assert batch.activations > 9 * small.activations
    long = member(task={"name": "linear_regression", "dim": 3, "n_points": 200})
    conv = member(task={"name": "linear_regression", "dim": 3, "n_points": 200},
                  model={"name": "transformer", "mixer": "baseconv", "width": 8, "depth": 2,
                         "heads": 2})
    assert member_memory(long).activations > 2 * member_memory(conv).activations
    # weights, gradients and Adam's two moments: 4 copies of the parameters; a stack K of them
    wide_model = member(model__width=64)
    assert member_memory(wide_model, stack=4).weights == 4 * member_memory(wide_model).weights
    # skip_grad_norm: a stack's MaskedAdam gathers the gradients once more (5 copies); a lone
    # member keeps torch's Adam
    skipping = member(model__width=64, train__skip_grad_norm=1e3)
    assert member_memory(skipping, stack=2).weights == \
        member_memory(wide_model, stack=2).weights * 5 / 4
    assert member_memory(skipping).weights == member_memory(wide_model).weights
    # L-BFGS: weights, gradients, a history of 2 x 5 and 2 more alone (14 copies); a stack's
    # two-loop gathers each member's pairs, with 1/ys folded in (4 x 5), and each member holds
    # its own history from a checkpoint on (2 x 5): 44
    lbfgs = member(model__width=64, train__optimizer="lbfgs", train__lbfgs_history=5)
    assert member_memory(lbfgs).weights == member_memory(wide_model).weights * 14 / 4
    assert member_memory(lbfgs, stack=2).weights == \
        member_memory(wide_model, stack=2).weights * 44 / 4
    assert str(small).startswith(f"{small.total / 1e6:.3g} MB (runtime")


@pytest.mark.slow
def test_the_estimate_is_within_2x_of_a_measured_peak():
    """One real member on the CPU in a fresh process: ru_maxrss at the end minus the RSS after
    imports, against the estimate (benchmarks/memory_check.py does three)."""
    from memory_check import CHILD, MEMBERS

    cfg = MEMBERS["transformer w256 d4 T41 batch 64"]
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], check=True,
                          capture_output=True, text=True, cwd=ROOT)
    measured = json.loads(done.stdout.strip().splitlines()[-1])["measured"]
    estimate = member_memory(resolve_member({**cfg, "device": "cpu"})).total
    assert 0.5 < estimate / measured < 2.0, (estimate, measured)


@pytest.mark.parametrize("extra", [["--dry-run"], [], ["--dry-run", "--plan-gpus", "8"]])
def test_a_member_that_fits_no_memory_is_refused_before_ray(extra, tmp_path, capsys):
    """The issue's `--set task.dim=1e9`: a d x d covariance of 8e18 bytes. Refused in one line
    with the estimate and the limit, exit 2, on the dry run (for this machine and for a GPU
    cluster) and on the launch, before Ray starts or anything is written."""
    import ray

    from sweeps.depth_scaling import SWEEP

    ray_before = ray.is_initialized()
    storage = tmp_path / "results"
    code = SWEEP.main(["--preset", "smoke", "--study", "least_squares", "--set", "task.dim=1e9",
                       "--storage", str(storage), "--no-figures", *extra])
    out = capsys.readouterr()
    (line,) = out.err.strip().splitlines()
    assert code == 2 and not out.out
    assert line.startswith("error: depth_scaling/least_squares@") and " EB (runtime " in line
    limit = "80 GB (an H100's 80 GB, assumed)" if "--plan-gpus" in extra else "(this machine's RAM)"
    assert "task buffers 8 EB" in line and limit in line
    assert not storage.exists() and ray.is_initialized() == ray_before


def test_a_member_that_fits_is_planned_with_its_memory(tmp_path, capsys):
    from sweeps.depth_scaling import SWEEP

    assert SWEEP.main(["--preset", "smoke", "--study", "least_squares", "--dry-run",
                       "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "  memory: ~" in out and "at peak, largest member " in out and "this machine's RAM" in out


def test_a_member_that_fails_its_calibration_is_one_line_naming_it():
    """device cuda:99 passes validation (a config may name a device) and fails when the member
    is built: the calibration says which member, in one line, and nothing is trained."""
    from icl_core.running.trial_pool import cost_model

    bad = resolve_member({**tiny_member(train__steps=400_000), "device": "cuda:99"})
    with pytest.raises(ConfigError) as caught:
        cost_model(0, 1, None, [("sweep", "study", [bad])], calibrate=True)
    text = str(caught.value)
    assert text.startswith(f"[sweep/study@{bad.hash[:8]}] calibration failed: ")
    assert "\n" not in text and "nothing was trained" in text


@pytest.mark.slow  # a fresh process starting its own Ray: ~10-25 s
def test_a_launch_whose_calibration_fails_exits_2_without_a_traceback(tmp_path):
    """The real launch (its own Ray, in a fresh process): one error line, exit status 2, and
    the driver's claims on the study's members released."""
    storage = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "sweeps/depth_scaling.py", "--preset", "smoke", "--study",
         "least_squares", "--set", "device=cuda:99", "--set", "train.steps=400000",
         "--storage", str(storage), "--no-figures"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "RAY_AUTH_MODE": "token", "ICL_CACHE": str(tmp_path)})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(errors) == 1
    assert errors[0].startswith("error: [depth_scaling/least_squares@")
    assert "calibration failed: " in errors[0]
    claims = storage / "depth_scaling" / "least_squares" / "claims"
    assert not claims.exists() or not any(claims.iterdir())
