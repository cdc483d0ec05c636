"""train.compile in a worker that trains many shapes one after another (a packed trial, a Ray
worker reused by later trials): icl_core.common.compiled. torch.compile takes seconds a shape
on a CPU: those that compile run with `pytest -m slow`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch._dynamo.utils
from conftest import tiny_member

from icl_core.common import compiled
from icl_core.common.compiled import own_code
from icl_core.spec.config import resolve_member
from icl_core.training.evaluate import evaluate
from icl_core.training.stack_rules import shape_key
from icl_core.training.stacked import StackedRun
from icl_core.training.train import MemberRun


@pytest.fixture(autouse=True)
def fresh_codes(monkeypatch):
    """Each test's own code copies: the process keeps them (and dynamo their compiled
    variants), so a member of one of these shapes compiled by an earlier test would be met."""
    monkeypatch.setattr(compiled, "_CODES", {})


def graphs() -> int:
    """The graphs dynamo compiled so far in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def member(depth: int, seed: int = 0, compiling: bool = True):
    return resolve_member({**tiny_member(model={"name": "transformer", "width": 8,
                                                "depth": depth, "heads": 2},
                                         train__compile=compiling, train__draws="counter"),
                           "seed": seed, "dtype": "float64", "device": "cpu"})


@pytest.mark.slow
def test_every_shape_a_worker_trains_is_compiled_and_one_shapes_members_share_it():
    """dynamo keeps at most `recompile_limit` variants of a code object (8) and runs the rest
    eagerly: every member shared its class's forward, so past 4 shapes (a training and an
    evaluation variant each) a worker trained and evaluated eagerly. Each shape has its own
    now. With the limit at 2 the second shape already ran eagerly before."""
    compiled_now, runs = [], {}
    with torch._dynamo.config.patch(cache_size_limit=2):  # recompile_limit's older name
        for depth, seed in ((1, 0), (2, 0), (1, 1), (3, 0)):
            before = graphs()
            run = MemberRun(member(depth, seed))
            run.train_until(4)
            runs[depth, seed] = run, evaluate(run.model, run.member, run.device, run.dtype, 4,
                                              baselines=False)
            compiled_now.append(graphs() - before)
    # a new shape compiles its training and its evaluation graph; a known one, none
    assert compiled_now == [2, 2, 0, 2]
    # the depth-1 graphs, compiled for seed 0, run seed 1's weights: its eager numbers
    run, rows = runs[1, 1]
    eager = MemberRun(member(1, 1, compiling=False))
    eager.train_until(4)
    np.testing.assert_allclose([r["value"] for r in run.rows],
                               [r["value"] for r in eager.rows], rtol=1e-9)
    again = evaluate(eager.model, eager.member, eager.device, eager.dtype, 4, baselines=False)
    np.testing.assert_allclose([r["value"] for r in rows], [r["value"] for r in again],
                               rtol=1e-9)


@pytest.mark.slow
def test_a_stack_of_another_size_is_compiled_for_its_own_static_shapes():
    """Every stack shared StackedRun._vmapped: a second stack of another size recompiled for
    symbolic sizes (automatic dynamic shapes), and past the limit ran eagerly. Each stack
    size has its own code now, compiled for static shapes; stacks of one size share it."""
    compiled_now, losses = [], []
    with torch._dynamo.config.patch(cache_size_limit=1):
        for k in (2, 3, 2):
            before = graphs()
            stack = StackedRun([MemberRun(member(2, seed)) for seed in range(k)])
            losses.append(stack.train_until(3))
            compiled_now.append(graphs() - before)
            assert stack.compiled is not None
    assert compiled_now == [1, 1, 0]
    assert losses[0] == losses[2]  # the shared graph trains the same members alike
    eager = StackedRun([MemberRun(member(2, seed)) for seed in range(3)])
    eager.why_eager = "the reference: the same stack, its loss eager"
    np.testing.assert_allclose(losses[1], eager.train_until(3), rtol=1e-9)


def test_a_functions_code_is_copied_once_per_shape():
    """The dynamo cache a compile lands in is its code object's: one copy per (code, shape).
    A shape is the model's and the task's config (heads and sequence length change no weight
    of some models; the label noise changes no shape), the weights and the training batch."""
    def key(**over):
        m = member(1)
        m = resolve_member({**m.to_dict(), **{k: {**m.to_dict()[k], **v} for k, v in
                                                over.items()}})
        return shape_key(m, MemberRun(m).model.named_parameters(), (m.train.batch_size,))

    base = key()
    assert own_code(graphs, base) is own_code(graphs, key()) is not graphs.__code__
    assert key(task={"noise_std": 0.5}) == base
    for other in (key(model={"heads": 4}), key(task={"n_points": 9}),
                  key(train={"batch_size": 16})):
        assert other != base and own_code(graphs, other) is not own_code(graphs, base)
    assert shape_key(member(1), [("w", torch.zeros(2))], (8,)) != \
        shape_key(member(1), [("w", torch.zeros(2, dtype=torch.float64))], (8,))


@pytest.mark.slow
def test_what_dynamo_keeps_for_a_shape_holds_no_stack_nor_model_once_compiled():
    """The code copies and their compiled variants live as long as the process; what they hold
    is guards and graphs, not the stack (passed in) nor the model (a weak reference): a stack
    and its members' models, compiled and trained, go at `del` with the collector off."""
    import gc
    import weakref

    before = graphs()  # the process's count: the file's other tests compile too
    stack = StackedRun([MemberRun(member(1, seed)) for seed in (0, 1)])
    stack.train_until(2)
    for run in stack.runs:  # each member's own compiled model too, as its evaluation runs it
        evaluate(run.model, run.member, run.device, run.dtype, 2, baselines=False)
    assert graphs() > before and stack.compiled is not None  # compiled here, not only wrapped
    gc.collect()
    gc.disable()
    try:
        freed = [weakref.ref(stack), *(weakref.ref(r.model) for r in stack.runs)]
        del stack, run  # the loop's last member too
        assert [ref() is None for ref in freed] == [True] * 3
    finally:
        gc.enable()
