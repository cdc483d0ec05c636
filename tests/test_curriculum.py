"""Garg et al.'s training curriculum on relu_teacher (ReLUTeacher.train_sample): truncated
dims and a loss mask over the first pairs at the start, the full task once grown, nothing
changed with it off (batches bit for bit, config hashes), the masked loss equal to a really
shorter prompt for a causal model, resume and stacking still exact."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_same_batch

from icl_core.algorithms.teacher_baseline import network_forward
from icl_core.models import build_model
from icl_core.spec.config import ConfigError, resolve_member
from icl_core.tasks import build_task, masked_mse
from icl_core.tasks.base import SamplesTrainingBatches
from icl_core.training.stacked import StackedRun
from icl_core.training.train import MemberRun, train_batch

CPU, F64 = torch.device("cpu"), torch.float64
GARG = {"curriculum_dims_start": 2, "curriculum_dims_inc": 1, "curriculum_points_start": 2,
        "curriculum_points_inc": 2, "curriculum_every": 3}  # full at step 3 * 3 = 9


def member(seed=0, steps=12, **task):
    return resolve_member({
        "task": {"name": "relu_teacher", "dim": 5, "n_points": 8, "hidden": 6, **task},
        "model": {"name": "transformer", "width": 8, "depth": 2, "heads": 2,
                  "mixer": "relu_attention"},
        "train": {"steps": steps, "batch_size": 4, "lr": 1e-3, "report_every": 4,
                  "checkpoint_every": 4},
        "eval": {"n_prompts": 16},
        "seed": seed, "dtype": "float64", "device": "cpu"})


def task(**fields):
    return build_task(member(**fields).task, 0, CPU, F64)


def draw(t, step=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return t.sample(4, gen) if step is None else t.train_sample(4, gen, step)


def test_step_zero_truncates_dims_and_the_teacher_sees_the_truncated_x():
    t, full = task(**GARG), draw(task())
    batch = draw(t, step=0)
    xs = batch.extras["xs"]
    assert torch.all(xs[..., 2:] == 0) and torch.all(xs[..., :2] != 0)
    assert torch.equal(xs[..., :2], full.extras["xs"][..., :2])  # the same random draws
    assert torch.equal(batch.extras["ys"], network_forward(t.teacher(batch), xs))
    assert torch.all(batch.inputs[:, 0::2, 2:] == 0)
    assert torch.equal(batch.targets[:, 0::2, 0], batch.extras["ys"])


def test_the_loss_mask_covers_the_first_pairs_only():
    t = task(**GARG)
    assert t.curriculum(0) == (2, 2) and t.curriculum(3) == (3, 4) and t.curriculum(8) == (4, 6)
    mask = draw(t, step=0).mask
    assert torch.equal(mask, (t.positions >= 0) & (t.positions <= 2))
    assert mask.nonzero().flatten().tolist() == [0, 2, 4]  # x-tokens after 0, 1, 2 pairs


@pytest.mark.parametrize("step", [9, 10, 1000])
def test_grown_curriculum_is_the_full_task(step):
    t = task(**GARG)
    assert t.curriculum(step) == (5, 8)
    assert_same_batch(draw(t, step=step), draw(task()))
    assert_same_batch(draw(t), draw(task()))  # evaluation's `sample`: always the full task


@pytest.mark.parametrize("step", [0, 5, 10_000])
def test_curriculum_off_is_bit_identical_to_sample(step):
    t = task()
    assert not t.has_curriculum
    assert_same_batch(train_batch(t, 4, torch.Generator().manual_seed(0), step), draw(t))
    lr = build_task(resolve_member({"task": {"name": "linear_regression", "dim": 3,
                                             "n_points": 4},
                                    "model": {"name": "transformer"}}).task, 0, CPU, F64)
    assert not isinstance(lr, SamplesTrainingBatches)  # other tasks: `sample`, untouched
    assert_same_batch(train_batch(lr, 4, torch.Generator().manual_seed(0), step), draw(lr))


def test_only_points_or_only_dims():
    assert task(curriculum_points_start=3).curriculum(0) == (5, 3)
    assert task(curriculum_dims_start=3).curriculum(0) == (3, 8)


def test_config_hash_unchanged_without_the_curriculum():
    # hashes written by the code before the curriculum fields existed
    plain = resolve_member({"task": {"name": "relu_teacher"}, "model": {"name": "transformer"}})
    assert plain.hash == "2473757797a0a146"
    cpu = resolve_member({
        "task": {"name": "relu_teacher", "dim": 8, "n_points": 20, "hidden": 32},
        "model": {"name": "transformer", "width": 32, "depth": 4, "heads": 4,
                  "mixer": "relu_attention"},
        "train": {"lr": 1e-3, "warmup_steps": 200, "steps": 2000}})
    assert cpu.hash == "348599a69a7b636a"
    assert member(**GARG).hash != member().hash


def test_bad_curriculum_settings_are_refused():
    for bad in ({"curriculum_dims_start": 6}, {"curriculum_points_start": 9},
                {"curriculum_every": 0}, {"curriculum_points_inc": 0}):
        with pytest.raises(ConfigError, match="curriculum_"):
            member(**bad)
    for train in ({"optimizer": "lbfgs", "steps": 2}, {"dataset_size": 64}):
        with pytest.raises(ConfigError, match="online batches"):  # refused before launch
            resolve_member({**member(**GARG).to_dict(), "train": train})


def test_masked_loss_equals_a_really_shorter_prompt():
    """Garg trains on n + 1 points; the full-length tensors with the loss masked beyond
    position n give the same loss and gradients (causal model)."""
    t = task(**GARG)
    batch = draw(t, step=0)
    torch.manual_seed(0)
    model = build_model(member().model, d_in=5, d_out=1, max_len=17, causal=True,
                        device=CPU, dtype=F64)
    masked = masked_mse(model(batch.inputs), batch)
    g_masked = torch.autograd.grad(masked, list(model.parameters()))
    short = type(batch)(batch.inputs[:, :5], batch.targets[:, :5], t.mask[:5])
    shorter = masked_mse(model(short.inputs), short)
    g_short = torch.autograd.grad(shorter, list(model.parameters()))
    torch.testing.assert_close(masked, shorter, rtol=1e-12, atol=0)
    for a, b in zip(g_masked, g_short, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_resume_across_curriculum_steps_is_exact():
    cfg = member(**GARG)
    straight = MemberRun(cfg)
    straight.train_until(5)  # mid-interval: the resumed run must know the step
    straight.train_until(12)
    first = MemberRun(cfg)
    first.train_until(5)
    resumed = MemberRun(cfg)
    resumed.load_state_dict(first.state_dict())
    resumed.train_until(12)
    assert resumed.rows == straight.rows
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)
    off = MemberRun(member())
    off.train_until(5)
    assert off.rows != first.rows  # the curriculum changed training


def test_stacked_curriculum_equals_one_after_another():
    members = [member(seed=s, **GARG) for s in (0, 1)]
    stack = StackedRun([MemberRun(m) for m in members])
    stack.train_until(6)
    stack.train_until(12)
    for k, m in enumerate(members):
        alone = MemberRun(m)
        alone.train_until(6)
        alone.train_until(12)
        torch.testing.assert_close([r["value"] for r in stack.runs[k].rows],
                                   [r["value"] for r in alone.rows], rtol=1e-10, atol=0)
        stack.sync_member(k, optimizer=False)
        for p, q in zip(stack.runs[k].model.parameters(), alone.model.parameters(),
                        strict=True):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
