"""Counter draws (train.draws = "counter", icl_core/tasks/draws.py): a member draws the same
batches alone or at any place in a stack and trains to the same numbers; draws are a pure
function of (key, step, call, element) with the right moments; a resumed run redraws its
batches without generator state; one stacked step dispatches as many aten operations at
K = 32 as at K = 2; bad configs are refused by name."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from conftest import tiny_member
from stack_scaling import OpCount  # the benchmark's counter: one way to count
from test_stacked import assert_same_numbers, rows_sorted

from icl_core.common.validation import ConfigError
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.running.tune_trainable import load_state, save_state
from icl_core.spec.config import resolve_member
from icl_core.tasks import TASKS, build_task
from icl_core.tasks.base import Batch, DrawsByCounter, TaskBase, TaskConfig
from icl_core.tasks.draws import CounterDraws
from icl_core.training.stack_rules import stack_groups
from icl_core.training.stacked import StackedRun
from icl_core.training.train import MemberRun, counter_keys, train_batch


def member(seed: int, draws: str = "counter", dtype: str = "float64", **over):
    return resolve_member({**tiny_member(train__draws=draws, **over), "seed": seed,
                           "dtype": dtype, "device": "cpu"})


# -- a member alone and stacked -------------------------------------------------------------


def test_a_member_draws_the_same_batches_alone_and_in_the_middle_of_a_stack():
    members = [member(seed) for seed in (5, 1, 9)]
    task = build_task(members[1].task, 0, torch.device("cpu"), torch.float64)
    keys = counter_keys(members, torch.device("cpu"))
    for step in (0, 3, 10_000):
        stack = train_batch(task, 8, keys, step)  # (K, B, ...), one call
        alone = train_batch(task, 8, keys[1:2], step)  # (1, B, ...)
        assert stack.inputs.shape == (3, *alone.inputs.shape[1:])
        assert torch.equal(stack.extras["xs"][1], alone.extras["xs"][0])  # the draws: exact
        assert torch.equal(stack.extras["w"][1], alone.extras["w"][0])
        torch.testing.assert_close(stack.inputs[1], alone.inputs[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(stack.targets[1], alone.targets[0], rtol=0, atol=1e-12)
        assert not torch.equal(stack.extras["xs"][0], stack.extras["xs"][1])  # keys differ


def test_a_member_trains_to_the_same_numbers_alone_and_stacked():
    alone = MemberRun(member(1))
    alone.train_until(20)
    stack = StackedRun([MemberRun(member(seed)) for seed in (5, 1, 9)])
    assert stack_groups([r.member for r in stack.runs], "always") == [[0, 1, 2]]
    stack.train_until(20)
    middle = stack.sync_member(1)
    assert [r["step"] for r in middle.rows] == [r["step"] for r in alone.rows] == [20]
    assert middle.rows[0]["value"] == pytest.approx(alone.rows[0]["value"], rel=1e-10)
    for p, q in zip(alone.model.parameters(), middle.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-10, atol=1e-12)
    generator = MemberRun(member(1, draws="generator"))  # the other scheme: other numbers
    generator.train_until(20)
    assert generator.rows[0]["value"] != pytest.approx(alone.rows[0]["value"], rel=1e-6)


def test_a_trial_writes_the_same_rows_stacked_and_alone(tmp_path):
    """The trial path (icl_core.running.trial): three counter-draw members with relu_teacher's
    curriculum (its step read from the draws) write the same float64 rows stacked as alone."""
    raw = tiny_member(task={"name": "relu_teacher", "dim": 4, "n_points": 6, "depth": 2,
                            "hidden": 8, "curriculum_dims_start": 2,
                            "curriculum_points_start": 3, "curriculum_every": 4},
                      eval__baselines=[], train__draws="counter", train__steps=12,
                      train__report_every=4, train__checkpoint_every=4)
    members = [resolve_member({**raw, "seed": s, "dtype": "float64", "device": "cpu"}).to_dict()
               for s in (0, 1, 2)]
    for stack in ("never", "always"):
        spec = TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack)
        assert set(run_trial(spec).values()) == {"ok"}
    alone, stacked = rows_sorted(tmp_path / "never"), rows_sorted(tmp_path / "always")
    assert set(stacked["stack_size"]) == {3} and set(alone["stack_size"]) == {1}
    assert_same_numbers(alone, stacked)


# -- the draws themselves -------------------------------------------------------------------


def draws(keys=(7, 2**62 + 3), step=0) -> CounterDraws:
    return CounterDraws(torch.tensor(keys, dtype=torch.int64), step)


def test_draws_are_a_pure_function_of_key_step_and_call():
    first = draws().normal((4, 5), torch.float64)
    assert torch.equal(first, draws().normal((4, 5), torch.float64))  # deterministic
    a, b = first[:4], first[4:]  # member-major: member 0's 4 prompts, then member 1's
    assert not torch.equal(a, b)  # keys differ
    assert not torch.equal(first, draws(step=1).normal((4, 5), torch.float64))  # steps differ
    d = draws()
    d.normal((4, 5), torch.float64)
    assert not torch.equal(first, d.normal((4, 5), torch.float64))  # call indices differ
    # an element's value depends on its index alone, not on the shape drawn around it
    words = draws().words(1000)
    assert torch.equal(draws().words(10), words[:, :10])
    assert torch.equal(draws(keys=(2**62 + 3,)).words(1000)[0], words[1])  # nor on K or place
    assert words.min() >= 0 and words.max() < 2**32


def test_a_calls_spread_is_read_from_a_few_kept_tables_a_device(monkeypatch):
    """Each call's index spread is the first n of a kept table (common.device.constant) whose
    size is a power of two: draws of every n from 1 to 300 (and of 1,000 to compare with) keep
    10 tables, sizes 2 to 1,024, not 301, and read the words of a longer draw's first n."""
    from icl_core.common import device

    monkeypatch.setattr(device, "_KEPT", {})  # a fresh cache (the kept one is never cleared)
    for n in range(1, 301):
        d = draws()
        assert torch.equal(d.words(n), draws().words(1000)[:, :n])
    sizes = sorted(t.numel() for (make, _), t in device._KEPT.items()
                   if make.__name__ == "_spread")
    assert sizes == [2 ** i for i in range(1, 11)], sizes  # 1000's table: 1024


@pytest.mark.parametrize("step, first, total, second_call", [
    (0, [[4265985104, 3630132386, 2219006393], [1359483506, 60387228, 387734718]],
     4308888715824, [[3313167720, 2014062671, 2237605250], [1581047821, 1663280296, 3501593891]]),
    (2**40 + 5, [[2308762696, 2880784272, 3126834178], [700900, 4124951177, 195265382]],
     4275363922460, [[1192421029, 3771093354, 1797545395], [3466301060, 210134550, 1568152614]]),
])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_the_stream_is_pinned(step, first, total, second_call, as_tensor):
    """The words are a format: counter-draw rows are reproduced from them, so a faster hash
    must give these numbers (recorded from the first implementation) to the bit."""
    d = CounterDraws(torch.tensor([1, 2**62 + 3]), torch.tensor(step) if as_tensor else step)
    words = d.words(1000)
    assert words[:, :3].tolist() == first and int(words.sum()) == total
    assert d.words(3).tolist() == second_call


def test_a_call_mixes_both_stream_words_in_one_chain():
    """A graph replays every operation of a call: the two stream words are hashed together
    ((2, K) tensors), not one after the other (129 operations with a tensor step, the draws
    object's making included, 132 where the call first makes its spread table; 253 each word
    apart)."""
    with OpCount() as counter:
        CounterDraws(torch.tensor([1, 2, 3]), torch.tensor(5)).words(100)
    assert sum(counter.ops.values()) < 160


def normal_cdf(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(z / math.sqrt(2)))


def ks_statistic(sample: torch.Tensor, cdf) -> float:
    x, _ = sample.double().flatten().sort()
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max(float((i / n - f).max()), float((f - (i - 1) / n).max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normals_and_uniforms_have_the_right_law(dtype):
    n = 200_000
    d = draws(keys=(11,), step=4)
    z, u = d.normal((n,), dtype), d.uniform((n,), dtype)
    assert z.dtype == u.dtype == dtype and z.shape == u.shape == (n,)
    assert abs(float(z.double().mean())) < 5 / math.sqrt(n)
    assert abs(float(z.double().var()) - 1) < 5 * math.sqrt(2 / n)
    assert abs(float(u.double().mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(float(u.double().var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / n)
    assert 0 <= float(u.min()) and float(u.max()) < 1
    bound = 1.95 / math.sqrt(n)  # Kolmogorov-Smirnov at the 0.1% level
    assert ks_statistic(z, normal_cdf) < bound
    assert ks_statistic(u, lambda x: x) < bound
    # successive pairs are uncorrelated (Box-Muller's two outputs, neighbouring words)
    assert abs(float(torch.corrcoef(z.double().view(-1, 2).T)[0, 1])) < 5 / math.sqrt(n / 2)
    ints = d.integers(7, (n,))
    counts = torch.bincount(ints, minlength=7).double()
    assert ints.min() >= 0 and ints.max() < 7
    assert float(((counts - n / 7) ** 2 / (n / 7)).sum()) < 22.5  # chi-square, 6 dof, 0.1%


def test_float64_uniforms_carry_more_than_24_bits():
    u64 = draws().uniform((10_000,), torch.float64)
    u32 = draws().uniform((10_000,), torch.float32).double()
    assert torch.equal(u32 * 2**24, (u32 * 2**24).floor())  # float32: 24-bit grid
    off_grid = (u64 * 2**24 != (u64 * 2**24).floor()).double().mean()
    assert off_grid > 0.99
    assert torch.equal(u64 * 2**53, (u64 * 2**53).floor())  # 53 bits, no more


# -- resume ---------------------------------------------------------------------------------


def test_resume_redraws_the_same_batches_without_generator_state(tmp_path):
    straight = MemberRun(member(3, train__schedule="step", train__step_size=7))
    straight.train_until(10)
    straight.train_until(20)

    first = MemberRun(member(3, train__schedule="step", train__step_size=7))
    first.train_until(10)
    save_state(str(tmp_path), {"run": first.state_dict()})
    resumed = MemberRun(member(3, train__schedule="step", train__step_size=7))
    resumed.load_state_dict(load_state(str(tmp_path))["run"])
    resumed.data_gen.manual_seed(12345)  # the generator's state plays no part
    resumed.train_until(20)
    assert resumed.rows == straight.rows
    for p, q in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_stack_resumes_to_the_numbers_of_an_uninterrupted_stack():
    seeds = (0, 4)
    straight = StackedRun([MemberRun(member(s)) for s in seeds])
    straight.train_until(10)
    straight.train_until(20)

    first = StackedRun([MemberRun(member(s)) for s in seeds])
    first.train_until(10)
    states = [first.sync_member(k).state_dict() for k in range(len(seeds))]
    runs = [MemberRun(member(s)) for s in seeds]
    for run, state in zip(runs, states, strict=True):
        run.load_state_dict(state)
    resumed = StackedRun(runs)
    resumed.train_until(20)
    for k in range(len(seeds)):
        a, b = straight.sync_member(k), resumed.sync_member(k)
        assert a.rows == b.rows
        for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
            assert torch.equal(p, q)


# -- aten operations per stacked step -------------------------------------------------------


def ops_per_step(k: int, draws_: str, **over) -> int:
    stack = StackedRun([MemberRun(member(s, draws_, dtype="float32", train__grad_clip=1.0,
                                         **over)) for s in range(k)])
    stack.train_until(1)  # Adam's state exists
    stack.train_mode()
    with OpCount() as counter:
        stack.take_step(stack.step)
    return sum(counter.ops.values())


def test_a_stacked_step_dispatches_as_many_operations_at_k32_as_at_k2():
    assert ops_per_step(32, "counter") == ops_per_step(2, "counter")
    # generator draws: each member's own two draws (xs, w), and nothing else a member
    assert ops_per_step(32, "generator") == ops_per_step(2, "generator") + 30 * 2


def test_a_stack_that_skips_steps_dispatches_as_many_operations_at_k32_as_at_k2():
    """skip_grad_norm's mask and MaskedAdam's step work on (K, ...) tensors: no operation per
    member, and fewer per weight tensor than torch's CPU Adam (one loop over the tensors)."""
    skipping = ops_per_step(2, "counter", train__skip_grad_norm=1e3)
    assert ops_per_step(32, "counter", train__skip_grad_norm=1e3) == skipping
    assert skipping < ops_per_step(2, "counter")


# -- configs --------------------------------------------------------------------------------


def test_bad_draws_configs_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"train\.draws: 'bogus' is not valid; valid "
                                          r"choices: generator, counter"):
        member(0, draws="bogus")
    with pytest.raises(ConfigError, match=r"train\.draws: 'counter' draws online batches"):
        member(0, train__dataset_size=32)
    with pytest.raises(ConfigError, match=r"train\.draws: 'counter' draws online batches"):
        member(0, train__optimizer="lbfgs")
    able = [n for n in TASKS.names() if issubclass(TASKS.builder(n), DrawsByCounter)]
    assert "linear_regression" in able


@dataclass(frozen=True)
class PlainConfig(TaskConfig):
    name: str = "test_plain"


class PlainTask(TaskBase):
    """A task with `sample` only: it cannot draw by counter."""

    causal = True

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError  # never built: validation refuses the config first


@pytest.fixture
def plain_task():
    TASKS.register("test_plain", PlainConfig)(PlainTask)
    try:
        yield
    finally:
        del TASKS._entries["test_plain"]


def test_counter_draws_on_a_task_without_them_are_refused_naming_those_with_them(plain_task):
    able = [n for n in TASKS.names() if issubclass(TASKS.builder(n), DrawsByCounter)]
    assert "test_plain" not in able and len(able) == len(TASKS.names()) - 1
    resolve_member(tiny_member(task={"name": "test_plain"}, eval__baselines=[]))  # generator: ok
    with pytest.raises(ConfigError, match=rf"train\.draws: task 'test_plain' cannot draw by "
                                          rf"counter; tasks that can: {', '.join(able)} \(or "
                                          r"use train\.draws='generator'\)"):
        resolve_member(tiny_member(task={"name": "test_plain"}, eval__baselines=[],
                                   train__draws="counter"))


@pytest.mark.parametrize("name", [n for n in TASKS.names()
                                  if issubclass(TASKS.builder(n), DrawsByCounter)])
def test_every_counter_task_draws_a_member_alike_alone_and_stacked(name):
    cfg = TASKS.resolve({"name": name}, "task")
    task = build_task(cfg, 0, torch.device("cpu"), torch.float64)
    keys = torch.tensor([3, 8, 5], dtype=torch.int64)
    stack, alone = (train_batch(task, 2, k, 7) for k in (keys, keys[1:2]))
    reference = task.sample(2, torch.Generator().manual_seed(0))  # the generator's shapes
    assert stack.inputs.shape == (3, *reference.inputs.shape)
    assert stack.targets.shape == (3, *reference.targets.shape)
    assert set(stack.extras) == set(reference.extras)
    assert torch.equal(stack.mask, reference.mask)
    torch.testing.assert_close(stack.inputs[1], alone.inputs[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(stack.targets[1], alone.targets[0], rtol=0, atol=1e-12)
    assert not torch.equal(stack.inputs[0], stack.inputs[1])


def test_the_default_keeps_every_config_hash():
    plain = resolve_member(tiny_member())
    assert resolve_member(tiny_member(train__draws="generator")).hash == plain.hash
    assert resolve_member(tiny_member(train__draws="counter")).hash != plain.hash
    # a captured step is a speed, as the device is: the same member either way
    assert resolve_member(tiny_member(train__cuda_graph=True)).hash == plain.hash
