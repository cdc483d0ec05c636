"""Primitives task (read / affine / multiply): layout, closed-form targets, fixed parameters."""

from __future__ import annotations

import pytest
import torch

from icl_core.spec.config import ConfigError, resolve_member
from icl_core.tasks import build_task
from icl_core.tasks.primitives import Primitives, PrimitivesConfig

CPU = torch.device("cpu")


def make(op: str, dim=6, n=5, task_seed=0, dtype=torch.float32) -> Primitives:
    cfg = PrimitivesConfig(op=op, dim=dim, n_points=n)
    return build_task(cfg, task_seed=task_seed, device=CPU, dtype=dtype)


def closed_form(op: str, u_BxNxD: torch.Tensor, task: Primitives) -> torch.Tensor:
    """Targets recomputed from the inputs alone (plus the task's fixed i, j, h)."""
    if op == "read":
        y = u_BxNxD.clone()
        y[:, task.read_to] = u_BxNxD[:, task.read_from]
        return y
    if op == "affine":
        return (u_BxNxD @ task.h).unsqueeze(-1)
    half = u_BxNxD.shape[-1] // 2
    return u_BxNxD[..., :half] * u_BxNxD[..., half:]


@pytest.mark.parametrize("op, d_out", [("read", 6), ("affine", 1), ("multiply", 3)])
def test_layout_and_closed_form_targets(op, d_out):
    task = make(op)
    batch = task.sample(4, torch.Generator().manual_seed(0))
    assert (task.d_in, task.d_out, task.seq_len, task.prompt_len) == (6, d_out, 5, 5)
    assert task.causal and task.pool_tokens
    assert batch.inputs.shape == (4, 5, 6) and batch.targets.shape == (4, 5, d_out)
    assert batch.mask.tolist() == [True] * 5
    assert task.positions.tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(batch.extras["u"], batch.inputs)
    assert torch.equal(batch.targets, closed_form(op, batch.inputs, task))


def test_read_copies_row_i_into_row_j_only():
    task = make("read", n=8)
    i, j = task.read_from, task.read_to
    assert 0 <= i < j < 8
    batch = task.sample(3, torch.Generator().manual_seed(1))
    changed = (batch.targets != batch.inputs).any(-1).any(0)  # (N,)
    assert changed.tolist() == [k == j for k in range(8)]


def test_parameters_depend_only_on_task_seed():
    a, b = make("affine", task_seed=3), make("read", task_seed=3)
    assert (a.read_from, a.read_to) == (b.read_from, b.read_to)
    assert torch.equal(a.h, b.h)
    assert not torch.equal(a.h, make("affine", task_seed=4).h)
    assert a.h.shape == (6,)
    pairs = {(t.read_from, t.read_to) for s in range(20) for t in [make("read", n=40, task_seed=s)]}
    assert len(pairs) > 1 and all(i < j for i, j in pairs)


def test_affine_h_has_the_configured_std():
    cfg = PrimitivesConfig(op="affine", dim=20000, affine_std=3.0)
    task = build_task(cfg, task_seed=0, device=CPU, dtype=torch.float64)
    assert abs(task.h.std().item() - 3.0) < 0.1


@pytest.mark.parametrize("op", ["read", "affine", "multiply"])
def test_sampling_is_deterministic(op):
    task = make(op)
    a = task.sample(3, torch.Generator().manual_seed(7))
    b = task.sample(3, torch.Generator().manual_seed(7))
    c = task.sample(3, torch.Generator().manual_seed(8))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, c.inputs)


@pytest.mark.parametrize("op", ["read", "affine", "multiply"])
def test_float64_end_to_end(op):
    task = make(op, dtype=torch.float64)
    batch = task.sample(2, torch.Generator().manual_seed(0))
    assert batch.inputs.dtype == batch.targets.dtype == task.h.dtype == torch.float64
    assert torch.equal(batch.targets, closed_form(op, batch.inputs, task))


def member(task: dict) -> dict:
    return {"task": {"name": "primitives", **task}, "model": {"name": "transformer"}}


def test_config_validation_through_the_registry():
    with pytest.raises(ConfigError, match=r"task\.dim"):
        resolve_member(member({"op": "multiply", "dim": 5}))
    with pytest.raises(ConfigError, match=r"task\.op.*read, affine, multiply"):
        resolve_member(member({"op": "divide"}))
    with pytest.raises(ConfigError, match=r"task\.n_points"):
        resolve_member(member({"op": "read", "n_points": 1}))
    with pytest.raises(ConfigError, match=r"task\.affine_std"):
        resolve_member(member({"op": "affine", "affine_std": 0.0}))
    resolve_member(member({"op": "affine", "dim": 5}))  # odd dim is fine outside multiply


def test_training_smoke_learns_affine():
    from icl_core.training.train import MemberRun

    cfg = resolve_member({
        "task": {"name": "primitives", "op": "affine", "dim": 4, "n_points": 6},
        "model": {"name": "transformer", "width": 16, "depth": 1},
        "train": {"steps": 40, "batch_size": 32, "report_every": 20, "checkpoint_every": 20,
                  "lr": 3e-3},
        "eval": {"n_prompts": 50},
    })
    run = MemberRun(cfg)
    first, last = run.train_until(20), run.train_until(40)
    assert run.step == 40 and run.diverged_at is None
    assert last < first, (first, last)


def test_evaluation_pools_the_error_over_all_tokens_and_outputs():
    """The paper's primitives metric: one MSE per prompt over all N x d_out entries."""
    from icl_core.models import build_model
    from icl_core.training.evaluate import eval_prompts, evaluate

    member = resolve_member({
        "task": {"name": "primitives", "op": "multiply", "dim": 4, "n_points": 5},
        "model": {"name": "transformer", "width": 8, "depth": 1},
        "eval": {"n_prompts": 30}, "dtype": "float64",
    })
    cpu = torch.device("cpu")
    model = build_model(member.model, d_in=4, d_out=2, max_len=5, causal=True, device=cpu,
                        dtype=torch.float64)
    rows = evaluate(model, member, cpu, torch.float64, step=0, baselines=True)
    assert {(r["position"], r["statistic"]) for r in rows} == {
        (None, s) for s in ("mean", "median", "q25", "q75")}
    ((_, _, batch),) = eval_prompts(member)
    with torch.no_grad():
        per_prompt = (model(batch.inputs) - batch.targets).pow(2).mean((1, 2))
    mean = next(r["value"] for r in rows if r["statistic"] == "mean")
    assert mean == pytest.approx(float(per_prompt.mean()), rel=1e-12)
