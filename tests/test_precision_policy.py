"""train.precision: a study that does not measure precision may train in TF32 or under bf16
autocast; Liu et al.'s studies (Study.measures_precision) refuse both before anything runs;
evaluation and the next member are never touched by it."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_member

from icl.catalog import load_sweep
from icl_core.common.device import precision_scope
from icl_core.spec.config import ConfigError, resolve_member
from icl_core.training.train import MemberRun


def trained(precision: str, steps: int = 30) -> MemberRun:
    run = MemberRun(resolve_member(tiny_member(train__steps=steps, train__precision=precision)))
    run.train_until(steps)
    return run


def test_bad_precisions_are_one_line_naming_the_choices():
    with pytest.raises(ConfigError, match=r"train\.precision: 'fp16' is not valid; did you mean 'bf16'\? valid "
                                          r"choices: fp32, tf32, bf16"):
        resolve_member(tiny_member(train__precision="fp16"))
    with pytest.raises(ConfigError, match=r"train\.precision: 'tf32' speeds up float32 training; "
                                          r"dtype 'float64'"):
        resolve_member(tiny_member(train__precision="tf32", dtype="float64"))
    default = resolve_member(tiny_member())
    explicit = resolve_member(tiny_member(train__precision="fp32"))
    assert default.hash == explicit.hash  # a new field at its default: every hash unchanged
    assert resolve_member(tiny_member(train__precision="tf32")).hash != default.hash


def test_liu_studies_refuse_a_faster_precision_and_others_take_it():
    liu = load_sweep("depth_scaling").study("ls_mixer_depth")
    assert liu.measures_precision
    with pytest.raises(ConfigError, match=r"study 'ls_mixer_depth' measures precision .* "
                                          r"valid choices: fp32"):
        liu.members("smoke", {"train.precision": "tf32"})
    assert liu.members("smoke")  # fp32, as declared
    wu = load_sweep("deep_optimizers").study("scaleup")
    assert not wu.measures_precision
    members = wu.members("smoke", {"train.precision": "bf16"})
    assert {m.train.precision for m in members} == {"bf16"}


def test_the_command_line_refuses_it_in_one_line_before_ray(capsys):
    from icl.cli import main

    sweep = load_sweep("width_scaling")
    assert main(sweep, ["--preset", "smoke", "--set", "train.precision=bf16", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "measures precision" in err[0]


def test_tf32_is_a_no_op_on_a_cpu_and_the_flags_come_back():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    assert not before[0]  # torch's default: float32 matmuls in full float32
    fp32, tf32 = trained("fp32"), trained("tf32")
    assert fp32.rows[-1]["value"] == tf32.rows[-1]["value"]  # the same arithmetic on a CPU
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(RuntimeError), precision_scope("tf32", torch.device("cpu")):
        assert torch.backends.cuda.matmul.allow_tf32
        raise RuntimeError("a failing step")
    assert not torch.backends.cuda.matmul.allow_tf32  # restored after a failure too


def test_bf16_autocast_changes_training_only():
    fp32, bf16 = trained("fp32"), trained("bf16")
    loss32, loss16 = fp32.rows[-1]["value"], bf16.rows[-1]["value"]
    assert loss16 != loss32 and abs(loss16 - loss32) < 0.5 * abs(loss32)  # close, not equal
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # weights stay fp32
    assert not torch.is_autocast_enabled("cpu")  # evaluation afterwards runs in float32
    x = torch.randn(2, 7, 4)
    assert bf16.model(x).dtype == torch.float32


def test_bf16_steps_read_the_weights_of_their_own_step():
    """Under bf16 autocast each step casts the weights as they are then: one call of 8 steps
    trains exactly as 8 calls of one (autocast's weight cache would keep the first step's
    bf16 copy for every step of a call, so a lone member's result hung on report_every)."""
    once, stepwise = (MemberRun(resolve_member(tiny_member(train__steps=8,
                                                           train__precision="bf16")))
                      for _ in range(2))
    once.train_until(8)
    for step in range(1, 9):
        stepwise.train_until(step)
    for a, b in zip(once.model.parameters(), stepwise.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_fp32_and_evaluation_turn_cudnns_tf32_off_and_restore_it():
    """torch leaves cuDNN's TF32 on for convolutions (BaseConv's): fp32 training and every
    evaluation compute in full float32 all the same, and the flags come back after."""
    from icl_core.common.device import full_float32

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    cuda = torch.device("cuda")  # the switches are plain settings: no GPU needed to read them
    try:
        torch.backends.cudnn.allow_tf32 = True  # torch's default
        with precision_scope("fp32", cuda):
            assert not torch.backends.cudnn.allow_tf32
            assert not torch.backends.cuda.matmul.allow_tf32
        with full_float32(cuda):
            assert not torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.allow_tf32
        with full_float32(torch.device("cpu")):  # nothing to switch on a CPU
            assert torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
