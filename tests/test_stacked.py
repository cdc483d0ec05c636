"""Stacked packing (icl_core.training.stacked): members trained at once with stacked weights write the
same numbers as members trained alone (float64, rtol 1e-10), for every model the sweep files
use; a diverging member is masked while the others go on; a stacked checkpoint resumes
stacked or unstacked to the same numbers; the grouping rule."""

from __future__ import annotations

import gc
import math
import warnings
import weakref

import numpy as np
import polars as pl
import pytest
import torch
from conftest import assert_same_batch, tiny_member
from stack_scaling import OpCount  # the benchmark's counter: one way to count

from analysis.reading.store import read_rows
from icl import catalog
from icl_core.common.batch import Batch
from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import ConfigError, resolve_member, set_path
from icl_core.spec.search import Search
from icl_core.tasks.draws import member_batch
from icl_core.training.stack_rules import stack_groups, stack_key
from icl_core.training.stacked import StackedRun
from icl_core.training.train import MemberRun, train_batch

KEY = ["config_hash", "metric", "predictor", "statistic", "step", "test_dist", "position",
       "prompt_len", "loop_iter", "infer_iter"]


def float64_seeds(raw: dict, seeds=(0, 1), steps: int = 12) -> list[dict]:
    out = []
    for seed in seeds:
        member = resolve_member(raw).to_dict()
        member.update(seed=seed, dtype="float64", device="cpu")
        set_path(member, "train.steps", min(member["train"]["steps"], steps))
        set_path(member, "train.report_every", 4)
        set_path(member, "train.checkpoint_every", 4)
        for key, value in (("eval.every", member["eval"]["every"]),
                           ("train.artifact_every", member["train"]["artifact_every"])):
            if value:
                set_path(member, key, 4)
        out.append(resolve_member(member).to_dict())
    return out


def rows_sorted(storage, sweep="s", study="t") -> pl.DataFrame:
    rows, _ = read_rows(str(storage), sweep, study)
    cols = [c for c in KEY if c in rows.columns]
    return rows.sort(cols, nulls_last=True)


def assert_same_numbers(a: pl.DataFrame, b: pl.DataFrame, rtol: float = 1e-10) -> None:
    assert a.height == b.height > 0
    assert a["metric"].to_list() == b["metric"].to_list()
    va = np.array(a["value"].to_list(), dtype=float)
    vb = np.array(b["value"].to_list(), dtype=float)
    np.testing.assert_allclose(vb, va, rtol=rtol, atol=1e-300, equal_nan=True)


def smoke_members():
    """Every smoke member of the sweep files' grid studies, in order."""
    for name in catalog.sweep_names():
        for study in catalog.load_sweep(name).studies:
            if not isinstance(study, Search):
                yield from study.members("smoke")


def one_member_per_model() -> dict[str, dict]:
    """The first stackable smoke member of each model the sweep files train."""
    found: dict[str, dict] = {}
    for member in smoke_members():
        label = member.model.name + "/" + getattr(member.model, "mixer", "")
        if label not in found and member.train.steps and stack_key(member):
            found[label] = member.to_dict()
        elif member.model.name == "lsa" and "lsa/adam" not in found:
            lsa = member.to_dict()  # the sweeps train it with L-BFGS (lsa/ above)
            lsa["train"].update(optimizer="adam", lr=1e-3)
            found["lsa/adam"] = lsa
    return found


MODELS = one_member_per_model()


def lsa_member(**train) -> dict:
    """The sweeps' L-BFGS member (preconditioned_gd's LSA, smoke scale), with `train`."""
    raw = MODELS["lsa/"]
    return {**raw, "train": {**raw["train"], **train}}


def test_the_sweeps_models_are_covered():
    names = {label.split("/")[0] for label in MODELS}
    assert {"transformer", "lsa", "attention_mlp", "mha_mlp", "ffn", "looped",
            "algoformer"} <= names
    assert {"transformer/attention", "transformer/baseconv",
            "transformer/relu_attention"} <= set(MODELS)


@pytest.mark.parametrize("label", sorted(MODELS))
def test_stacked_equals_one_after_another(label, tmp_path):
    """A stack writes each member's rows alone; and vmap batches every operation of the
    model, not looping the members (torch warns where an operation has no batching rule, as
    nn.MultiheadAttention's SDPA kernels had in mha_mlp)."""
    members = float64_seeds(MODELS[label])
    for stack in ("never", "always"):
        spec = TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert set(run_trial(spec).values()) == {"ok"}
        looped = [str(w.message) for w in caught if "batching rule" in str(w.message)]
        assert not looped, looped
    alone, stacked = rows_sorted(tmp_path / "never"), rows_sorted(tmp_path / "always")
    assert set(stacked["stack_size"]) == {2} and set(alone["stack_size"]) == {1}
    assert_same_numbers(alone, stacked)


@pytest.mark.parametrize("label", sorted(MODELS))
def test_a_stack_of_one_trains_as_its_member_alone(label):
    """A stack of one (a lone member with train.cuda_graph) runs its member's views without
    vmap and its layers' own paths (SDPA attention, not the vmap-friendly matmuls): every
    model trains there to its numbers alone, bit for bit (float64; L-BFGS, whose stacked
    algorithm is the project's own, to rounding)."""
    from icl_core.spec.config import on_graph_path

    # as a trial builds it: with train.cuda_graph where the config allows (the static body,
    # its tensor learning rate); L-BFGS's stack of one takes the ordinary step
    member, _ = on_graph_path(resolve_member(float64_seeds(MODELS[label], seeds=(1,))[0]))
    steps = min(12, member.train.steps)
    one, alone = StackedRun([MemberRun(member)]), MemberRun(member)
    assert one.train_until(steps) == pytest.approx([alone.train_until(steps)], rel=1e-13)
    for p, q in zip(one.params.values(), alone.model.parameters(), strict=True):
        if member.train.optimizer == "lbfgs":
            torch.testing.assert_close(p[0], q.detach(), rtol=0, atol=1e-13)
        else:
            assert torch.equal(p[0], q.detach())


@pytest.mark.parametrize("kind", ["adam", "cuda_graph", "compile", "skip_grad_norm", "lbfgs"])
def test_a_finished_stack_is_freed_when_dropped_without_the_cycle_collector(kind):
    """A trial drops a stack when its members are written; its weights, optimizer state and
    (on CUDA) its captured graph's memory pool go then, and its members' models with theirs,
    not at Python's next cyclic garbage collection, which can come long after the next stack
    took its memory: no reference cycle. There were: through the stack's StepGraph
    (train.cuda_graph; the graph's body runs eagerly here), its compiled loss (a bound method)
    and each member's compiled model (nn.Module.compile's bound method; train.compile, the
    compiled functions made here, not compiled)."""
    raw = lsa_member() if kind == "lbfgs" else tiny_member(
        **{"train__draws": "counter", f"train__{kind}": True} if kind in ("cuda_graph", "compile")
        else {"train__skip_grad_norm": 3.0} if kind == "skip_grad_norm" else {})
    stack = StackedRun([MemberRun(resolve_member({**raw, "seed": s})) for s in (0, 1)])
    gc.collect()
    gc.disable()
    try:
        if kind == "compile":
            assert stack._compiled(stack._batch(0)[0]) is not None  # torch.compile: lazy
            assert all(r.model._compiled_call_impl is not None for r in stack.runs)
        else:
            stack.train_until(2)
        assert (stack.graph is not None) == (kind == "cuda_graph")
        freed = [weakref.ref(stack), weakref.ref(next(iter(stack.params.values()))),
                 *(weakref.ref(r.model) for r in stack.runs)]
        del stack
        assert [ref() is None for ref in freed] == [True] * 4
    finally:
        gc.enable()


def test_members_that_differ_only_in_label_noise_stack_to_their_numbers_alone(tmp_path):
    """AlgoFormer's vs_newton sweeps the label noise: with generator draws each member draws
    from its own task, so the noise levels of a seed stack (one stack, not one a level) and
    each writes the rows it writes alone; counter draws (one task draws the stack's batches)
    keep them apart."""
    members = [m for noise in (0.0, 0.1, 1.0)
               for m in float64_seeds(tiny_member(task__noise_std=noise), seeds=(0, 1))]
    assert stack_groups([resolve_member(m) for m in members], "always") == [list(range(6))]
    counter = [resolve_member(tiny_member(task__noise_std=noise, train__draws="counter"))
               for noise in (0.0, 0.1)]
    assert stack_groups(counter, "always") == [[0], [1]]
    for stack in ("never", "always"):
        run_trial(TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack))
    alone, stacked = rows_sorted(tmp_path / "never"), rows_sorted(tmp_path / "always")
    assert set(stacked["stack_size"]) == {6}
    assert_same_numbers(alone, stacked)


def one_member_per_task() -> dict[str, dict]:
    """The first smoke member of each task the sweep files train online with generator
    draws."""
    found: dict[str, dict] = {}
    for member in smoke_members():
        if member.task.name not in found and not member.train.dataset_size \
                and member.train.draws == "generator":
            found[member.task.name] = member.to_dict()
    return found


TASKS = one_member_per_task()


def assert_batches_are_the_members_own(stack: StackedRun, members, steps=(0, 1)) -> None:
    """The stack's batches at `steps` equal those its members draw alone, bit for bit, and
    its generators end where theirs do."""
    alone = [MemberRun(m) for m in members]
    for step in steps:
        inputs, targets, extras, mask = stack._batch(step)
        for k, run in enumerate(alone):
            own = train_batch(run.task, run.member.train.batch_size, run.data_gen, step)
            assert_same_batch(member_batch(Batch(inputs, targets, mask, extras), k), own)
    for run, mine in zip(alone, stack.runs, strict=True):
        assert torch.equal(run.data_gen.get_state(), mine.data_gen.get_state())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_stacks_generator_draws_are_each_members_own_drawn_in_one_task_call(dtype):
    """Generator draws of a stack's members of one task (config and task seed) run the task's
    batch code once, on their K·B prompts, each member's generator drawing what it draws
    alone: the batches equal those drawn member by member bit for bit, for every task the
    sweeps train, and the generators end in the same states (on CUDA: tests/test_cuda_graph.py).
    Only the draws grow with K."""
    from icl_core.tasks.draws import DrawnBatches
    from icl_core.training.stacked import draws_together

    assert {"linear_regression", "relu_teacher"} <= set(TASKS)
    together = 0
    for name, raw in sorted(TASKS.items()):
        members = [resolve_member({**raw, "seed": seed, "dtype": dtype, "device": "cpu"})
                   for seed in (0, 1, 2)]
        stack = StackedRun([MemberRun(m) for m in members])
        if name == "relu_teacher":  # its own batch code (not DrawnBatches): member by member
            assert not stack.together
            continue
        assert stack.together == isinstance(stack.runs[0].task, DrawnBatches), name
        together += stack.together
        assert_batches_are_the_members_own(stack, members)
    assert together >= 4
    # members of another task seed keep their own tasks' batch code, member by member
    raw = TASKS["linear_regression"]
    seeded = [MemberRun(resolve_member({**raw, "seed": 0, "task_seed": t})) for t in (0, 1)]
    assert not draws_together(seeded) and draws_together(seeded[:1])
    # the batch code's operations do not grow with K; each member's draws do (one a call)
    counts = []
    for k in (2, 8):
        stack = StackedRun([MemberRun(resolve_member({**raw, "seed": s})) for s in range(k)])
        with OpCount() as counter:
            stack._batch(0)
        drawn = counter.ops["aten.normal_"]  # each member's draws, into its rows
        counts.append((drawn, counter.launches - drawn))
    assert counts[1][0] == 4 * counts[0][0] > 0 and counts[1][1] == counts[0][1], counts


def test_per_member_gradient_clipping_matches(tmp_path):
    members = float64_seeds(tiny_member(train__grad_clip=0.05), seeds=(0, 1, 2), steps=20)
    for stack in ("never", "always"):
        run_trial(TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack))
    assert_same_numbers(rows_sorted(tmp_path / "never"), rows_sorted(tmp_path / "always"))


def test_a_diverging_member_is_masked_and_the_others_go_on():
    members = [resolve_member(m) for m in float64_seeds(tiny_member(), seeds=(0, 1, 2), steps=8)]
    runs = [MemberRun(m) for m in members]
    with torch.no_grad():
        next(runs[1].model.parameters()).fill_(math.inf)  # member 1 blows up at once
    stack = StackedRun(runs)
    stack.train_until(4)
    stack.train_until(8)
    assert runs[1].diverged_at == 1 and runs[1].step == 1 and stack.active() == [0, 2]
    assert math.isnan(runs[1].rows[0]["value"])
    for k in (0, 2):
        alone = MemberRun(members[k])
        alone.train_until(4)
        alone.train_until(8)
        assert runs[k].diverged_at is None and runs[k].step == 8
        np.testing.assert_allclose([r["value"] for r in runs[k].rows],
                                   [r["value"] for r in alone.rows], rtol=1e-10)
        stack.sync_member(k)
        for p, q in zip(runs[k].model.parameters(), alone.model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)


class Crash(Exception):
    pass


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # skipping: seed 0, step 0
@pytest.mark.parametrize("kind", ["plain", "skipping", "lbfgs"])
def test_a_stacked_checkpoint_resumes_stacked_or_alone_to_the_same_numbers(kind, tmp_path):
    """Skipping: members with their own step counts (skip_grad_norm) resume too, stacked or
    one after another with torch's Adam, with the skip counts of an uninterrupted run.
    L-BFGS: the sweeps' LSA members, their histories handed to torch's LBFGS and back, with a
    warmup (the learning rate a fresh and a resumed stack start at)."""
    members = float64_seeds(tiny_member(), seeds=(0, 1, 2), steps=12) if kind == "plain" \
        else skipping_members(steps=12) if kind == "skipping" else \
        float64_seeds(lsa_member(steps=12, warmup_steps=6), seeds=(0, 1, 2), steps=12)
    run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), members, stack="never"))
    saved = {}

    def crash_after_first_checkpoint(metrics, state):
        if state is not None:
            saved.update(state)
            raise Crash

    for stack in ("always", "never"):
        spec = TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack)
        saved.clear()
        with pytest.raises(Crash):
            run_trial(TrialSpec("s", "t", str(tmp_path / stack), members, stack="always"),
                      crash_after_first_checkpoint)
        assert set(saved["runs"]) == {resolve_member(m).hash for m in members}
        assert {s["step"] for s in saved["runs"].values()} == {4}
        run_trial(spec, None, dict(saved))
        whole, resumed = rows_sorted(tmp_path / "whole"), rows_sorted(tmp_path / stack)
        # L-BFGS at a fixed step amplifies rounding ~6x a step here (its sums stacked run in
        # another order: 1e-16 apart at step 1, 4e-10 at step 12); a wrong state is 1e-2 off
        assert_same_numbers(whole, resumed, rtol=1e-8 if kind == "lbfgs" else 1e-10)
        assert set(resumed["stack_size"]) == {3 if stack == "always" else 1}
        assert resumed["skipped_steps"].to_list() == whole["skipped_steps"].to_list()
    assert sorted(set(whole["skipped_steps"])) == ([4, 6, 9] if kind == "skipping" else [0])


def test_grouping_rule():
    def member(**over):
        return resolve_member(tiny_member(**over))

    seeds = [member(seed=s) for s in range(3)]
    wider = member(model={"name": "transformer", "width": 16, "depth": 2, "heads": 2})
    lbfgs = member(train__optimizer="lbfgs")
    epochs = member(train__dataset_size=16)
    gru = resolve_member({"task": {"name": "qstr", "n_points": 4, "dim": 3},
                          "model": {"name": "bigru", "hidden": 8}})
    assert stack_key(epochs) is None and stack_key(gru) is None
    # the evaluation points set the model's positions: a longer test prompt, another shape
    longer = member(seed=1, eval={"n_prompts": 50, "grid": [{"n_points": 12}]})
    assert stack_groups([seeds[0], longer], "always") == [[0], [1]]
    # L-BFGS members stack (icl_core/training/stacked_lbfgs.py), each on its own fixed batch
    assert stack_groups([lbfgs, member(seed=1, train__optimizer="lbfgs")], "always") == [[0, 1]]
    skipping = [member(seed=s, train__skip_grad_norm=1e3) for s in range(2)]
    assert stack_groups(skipping, "always") == [[0, 1]]  # the mask is on the device
    mixed = [seeds[0], wider, seeds[1], lbfgs, seeds[2], gru]
    assert stack_groups(mixed, "always") == [[0, 2, 4], [1], [3], [5]]
    assert stack_groups(mixed, "never") == [[i] for i in range(6)]
    # auto stacks on CUDA devices only; these members resolve to this machine's device
    expected = [[0, 2, 4], [1], [3], [5]] if torch.cuda.is_available() else [[i] for i in range(6)]
    assert stack_groups(mixed, "auto") == expected
    with pytest.raises(ValueError, match="valid choices: auto, always, never"):
        stack_groups(seeds, "sometimes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_stacked_equals_one_after_another_on_cuda(tmp_path):
    members = float64_seeds(tiny_member(train__grad_clip=0.05), seeds=(0, 1, 2), steps=20)
    for m in members:
        m["device"] = "cuda"  # fused Adam, device generators, vmap on the GPU
    for stack in ("never", "auto"):  # auto stacks on CUDA
        run_trial(TrialSpec("s", "t", str(tmp_path / stack), members, stack=stack))
    stacked = rows_sorted(tmp_path / "auto")
    assert set(stacked["stack_size"]) == {3}
    assert_same_numbers(rows_sorted(tmp_path / "never"), stacked)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # no step ever taken
def test_a_member_whose_every_step_is_skipped_stalls_as_diverged(tmp_path, monkeypatch):
    """skip_grad_norm (the Liu code's rule) skips a step whose gradient norm exceeds it; a
    member skipped STALL_STEPS times in a row no longer moves: it ends as diverged from the
    first skipped step, with that reason, and trains no further (a reduced Fig 7 (a) seed once
    sat 8,700 steps at MSE 20 recorded as ok). A member whose steps are taken is untouched."""
    from icl_core.running.trial import run_trial_results
    from icl_core.training import member_evals
    from icl_core.training import train as training

    STALL_STEPS = 50  # for speed (500 in a run): the rule is the same
    for module in (training, member_evals):  # the rule, and the reason that names it
        monkeypatch.setattr(module, "STALL_STEPS", STALL_STEPS)
    members = [resolve_member(tiny_member(train={
        "steps": steps, "batch_size": 8, "report_every": 20, "checkpoint_every": 20,
        "grad_clip": 100.0, "skip_grad_norm": limit}))
        for limit, steps in ((1e-30, STALL_STEPS + 30), (1e30, 40))]
    hashes = [m.hash for m in members]
    results = run_trial_results(TrialSpec("s", "st", str(tmp_path),
                                          [m.to_dict() for m in members], hashes=hashes))
    stalled, fine = (results[h] for h in hashes)
    assert stalled.status == "diverged" and fine.status == "ok", (stalled, fine)
    assert stalled.reason.startswith("stalled: every step from step 0 on skipped") and \
        f"for {STALL_STEPS} steps in a row" in stalled.reason
    rows, _ = read_rows(str(tmp_path), "s", "st")
    train = rows.filter(pl.col("metric") == "train_loss")
    last = train.group_by("config_hash").agg(pl.col("step").max())
    steps = dict(last.iter_rows())
    assert steps[hashes[1]] == 40
    assert steps[hashes[0]] <= STALL_STEPS  # stopped at the stall, not trained on


# skip_grad_norm 4.5 on the tiny float64 member: over 20 steps seeds 0, 1, 2 skip 16, 10 and 10
# steps, each its own (seed 0 its first step, 1 and 2 later ones), and take the others.
# Weight decay only decoupled here: with L2 decay, Adam drives the attention's key bias (its
# gradient is 0 but for rounding, as softmax ignores it) by that rounding, which vmap and a
# lone member round differently; no output moves (masked_adam's own test covers L2 decay).
SKIPS = {"grad_clip": 100.0, "skip_grad_norm": 4.5}


def skipping_members(optimizer: str = "adam", weight_decay: float = 0.0,
                     steps: int = 20) -> list[dict]:
    over = {f"train__{k}": v for k, v in {**SKIPS, "optimizer": optimizer,
                                          "weight_decay": weight_decay}.items()}
    return float64_seeds(tiny_member(**over), seeds=(0, 1, 2), steps=steps)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # seed 0 skips step 0
@pytest.mark.parametrize("optimizer, weight_decay", [("adam", 0.0), ("adamw", 0.1)])
def test_members_that_skip_steps_stack_to_their_numbers_alone(optimizer, weight_decay):
    """skip_grad_norm in a stack (icl_core/training/masked_adam.py: a step count per member,
    the mask on the device): each member skips the steps it skips alone, and its losses, skip
    counts, tokens, weights and Adam state (its own step count) are those it has alone."""
    members = [resolve_member(m) for m in skipping_members(optimizer, weight_decay)]
    runs = [MemberRun(m) for m in members]
    stack = StackedRun(runs)
    alone = [MemberRun(m) for m in members]
    for target in (7, 20):
        stack.train_until(target)
        for run in alone:
            run.train_until(target)
    assert [r.skipped_steps for r in alone] == [16, 10, 10]  # the rule is exercised, unevenly
    for k, (run, ref) in enumerate(zip(runs, alone, strict=True)):
        assert (run.skipped_steps, run.skip_streak, run.tokens) == \
            (ref.skipped_steps, ref.skip_streak, ref.tokens)
        np.testing.assert_allclose([r["value"] for r in run.rows],
                                   [r["value"] for r in ref.rows], rtol=1e-10)
        stack.sync_member(k)
        for p, q in zip(run.model.parameters(), ref.model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
        mine, theirs = run.optimizer.state_dict()["state"], ref.optimizer.state_dict()["state"]
        assert {int(s["step"]) for s in mine.values()} == {int(s["step"]) for s in theirs.values()}\
            == {20 - ref.skipped_steps}
        for i in theirs:
            torch.testing.assert_close(mine[i]["exp_avg"], theirs[i]["exp_avg"],
                                       rtol=1e-8, atol=1e-14)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # seed 0 skips step 0
def test_a_member_with_no_step_taken_yet_joins_a_stack_of_members_with_adam_state():
    """Resumed into a stack after one step alone: seed 0 skipped it (torch's Adam has no
    state yet), seeds 1 and 2 took it; the stack starts seed 0 from zeros, as alone."""
    members = [resolve_member(m) for m in skipping_members()]
    runs, alone = [MemberRun(m) for m in members], [MemberRun(m) for m in members]
    for run in runs + alone:
        run.train_until(1)
    assert [bool(r.optimizer.state_dict()["state"]) for r in runs] == [False, True, True]
    StackedRun(runs).train_until(12)
    for run, ref in zip(runs, alone, strict=True):
        ref.train_until(12)
        assert run.skipped_steps == ref.skipped_steps
        np.testing.assert_allclose([r["value"] for r in run.rows],
                                   [r["value"] for r in ref.rows], rtol=1e-10)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # alone: no step taken
def test_a_stacked_member_that_stalls_ends_as_it_does_alone(monkeypatch):
    """In a stack, a member whose every step is skipped (its weights scaled x30: gradient
    norms above 1000) stalls at the step and with the skip counts it has alone, while the
    other member trains on to its numbers alone. STALL_STEPS is set to 20 for speed."""
    from icl_core.training import train as training

    monkeypatch.setattr(training, "STALL_STEPS", 20)
    members = [resolve_member(m) for m in float64_seeds(
        tiny_member(train__grad_clip=100.0, train__skip_grad_norm=1000.0), steps=40)]

    def runs() -> list[MemberRun]:
        made = [MemberRun(m) for m in members]
        with torch.no_grad():
            for p in made[0].model.parameters():
                p.mul_(30)
        return made

    stacked, alone = runs(), runs()
    stack = StackedRun(stacked)
    for target in (12, 40, 52):  # the last: the stalled member trains (and counts) no more
        stack.train_until(target)
        for run in alone:
            run.train_until(target)
    assert stack.active() == [1]
    for run, ref in zip(stacked, alone, strict=True):
        assert (run.diverged_at, run.stalled, run.skipped_steps, run.step) == \
            (ref.diverged_at, ref.stalled, ref.skipped_steps, ref.step)
        np.testing.assert_allclose([r["value"] for r in run.rows],
                                   [r["value"] for r in ref.rows], rtol=1e-10)
    assert (stacked[0].diverged_at, stacked[0].stalled, stacked[0].skipped_steps) == (0, True, 40)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # no step ever taken
def test_skip_grad_norm_is_refused_with_lbfgs_and_leaves_an_epochs_stop_rule_as_it_was():
    """The rule skips online steps only: with L-BFGS (which has no step skipping, gradient
    clipping or weight decay) it is refused before anything trains, naming the field, where it
    was silently unused. Epoch training: a member every step of which is skipped has met no
    stop rule (its epoch has no loss), while the same member whose steps are taken stops at
    its first epoch's end; an epoch's mean is over its steps taken, and it ends at its last
    step taken or not."""
    for over in ({"train__skip_grad_norm": 1e3}, {"train__grad_clip": 1.0},
                 {"train__weight_decay": 0.1}):
        field = next(iter(over)).split("__")[1]
        with pytest.raises(ConfigError, match=rf"train\.{field}: L-BFGS has no .*; leave it"):
            resolve_member(tiny_member(seed=0, train__optimizer="lbfgs", **over))
    epochs = {limit: MemberRun(resolve_member(tiny_member(
        seed=0, train__dataset_size=16, train__stop_loss=1e9, train__skip_grad_norm=limit)))
        for limit in (1e-30, 1e30)}
    for run in epochs.values():
        run.train_until(6)
    assert (epochs[1e-30].stopped_at, epochs[1e-30].skipped_steps) == (None, 6)
    assert (epochs[1e30].stopped_at, epochs[1e30].skipped_steps) == (2, 0)
    # an epoch whose last step is skipped still ends there, its mean over the steps taken
    run = MemberRun(resolve_member(tiny_member(
        seed=0, train__dataset_size=16, train__stop_loss=1.5, train__skip_grad_norm=1e3)))
    for step, took, loss in ((0, True, 1.0), (1, False, 100.0)):
        run.took_last = took
        stop = run.stop_rule(step, torch.tensor([loss], dtype=torch.float64))
    assert stop and run.stopped_at == 2 and run.epoch_taken == 0


def test_a_nan_gradient_norm_in_a_stack_spreads_as_it_does_alone():
    """Without grad_clip, a lone member with skip_grad_norm still scales its gradients by
    clip_grad_norm_(params, inf): a NaN norm makes them all NaN, and the step is taken. A
    stack does the same to that member only."""
    members = [resolve_member(m) for m in float64_seeds(tiny_member(train__skip_grad_norm=1e3))]
    stack = StackedRun([MemberRun(m) for m in members])
    stack.train_until(1)
    before = {name: p.detach().clone() for name, p in stack.params.items()}
    for p in stack.trainable:
        p.grad = torch.ones_like(p)
    stack.trainable[0].grad[1].view(-1)[0] = math.nan  # one element of member 1's gradient
    stack._update()
    assert stack.took.tolist() == [True, True]
    for name, p in stack.params.items():
        assert torch.isnan(p[1]).all(), name
        assert torch.isfinite(p[0]).all() and not torch.equal(p[0], before[name][0]), name


def test_masked_adam_is_torchs_adam_where_taken_and_leaves_the_rest_bit_for_bit():
    """MaskedAdam is torch's Adam / AdamW for each member over the steps it takes (float64,
    rtol 1e-12 over 12 steps, two weight tensors, each member taking a random half of the
    steps: its own step count); a member not taking a step keeps its weights and moments
    exactly, whatever its gradient holds (inf here); the weights with gradients changing
    between steps is refused."""
    from icl_core.training.masked_adam import MaskedAdam

    gen = torch.Generator().manual_seed(0)
    shapes = ((3, 4, 5), (3, 2))
    for decoupled, cls in ((False, torch.optim.Adam), (True, torch.optim.AdamW)):
        w0 = [torch.randn(shape, generator=gen, dtype=torch.float64) for shape in shapes]
        ws = [w.clone().requires_grad_() for w in w0]
        masked = MaskedAdam(ws, lr=0.01, eps=1e-16, weight_decay=0.1, decoupled=decoupled)
        alone = [[w[k].clone().requires_grad_() for w in w0] for k in range(3)]
        torch_adam = [cls(a, lr=0.01, eps=1e-16, weight_decay=0.1) for a in alone]
        for _ in range(12):
            grads = [torch.randn(shape, generator=gen, dtype=torch.float64) for shape in shapes]
            took = torch.rand(3, generator=gen) < 0.5
            for w, g in zip(ws, grads, strict=True):
                w.grad = g.clone()
            masked.step(took)
            for k in took.nonzero().flatten().tolist():
                for w, g in zip(alone[k], grads, strict=True):
                    w.grad = g[k].clone()
                torch_adam[k].step()
        for i, stacked in enumerate(ws):
            torch.testing.assert_close(stacked.detach(),
                                       torch.stack([a[i] for a in alone]).detach(),
                                       rtol=1e-12, atol=0)
        stacked = ws[0]
        before = {k: v.clone() for k, v in masked.state[stacked].items()}
        weights = stacked.detach().clone()
        stacked.grad = torch.full_like(stacked, math.inf)
        masked.step(torch.tensor([False, True, False]))
        for k in (0, 2):
            assert torch.equal(stacked[k], weights[k])
            for slot in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(masked.state[stacked][slot][k], before[slot][k])
        counts = [len(opt.state) and int(opt.state[alone[k][0]]["step"])
                  for k, opt in enumerate(torch_adam)]
        assert masked.state[stacked]["step"].tolist() == [counts[0], counts[1] + 1, counts[2]]
        ws[1].grad = None  # the second tensor untrained at this step
        with pytest.raises(RuntimeError, match="the weights that have gradients changed"):
            masked.step(torch.ones(3, dtype=torch.bool))


LOOPED = {"name": "looped", "width": 16, "heads": 2, "layers": 1, "loops": 4, "window": 4}


def test_compiled_members_stack_and_a_model_with_its_own_loss_stays_eager(caplog):
    """train.compile no longer keeps a member alone; a stack of a model whose training loss
    reads the step on the host (the looped window loss) trains eagerly, saying why."""
    compiled = [resolve_member(tiny_member(seed=s, train__compile=True)) for s in range(3)]
    plain = resolve_member(tiny_member(seed=0))
    assert stack_groups([compiled[0], plain, *compiled[1:]], "always") == [[0, 2, 3], [1]]
    looped = [MemberRun(resolve_member(tiny_member(seed=s, model=LOOPED, device="cpu",
                                                   train__compile=True))) for s in range(2)]
    stack = StackedRun(looped)
    with caplog.at_level("INFO", logger="icl_core.training.stacked"):
        stack.train_until(2)  # eager: torch.compile would take ~30 s here
    assert stack.compiled is None and "reads the step on the host" in stack.why_eager
    assert "train.compile: the stack's loss runs eagerly" in caplog.text and stack.step == 2


@pytest.mark.slow
def test_a_compiled_stack_trains_to_the_numbers_of_the_eager_stack():
    # torch.compile takes ~30-40 s on a CPU: run with `pytest -m slow`
    members = [resolve_member(m) for m in float64_seeds(
        tiny_member(train__compile=True, train__grad_clip=0.05), seeds=(0, 1, 2), steps=10)]
    compiled, eager = (StackedRun([MemberRun(m) for m in members]) for _ in range(2))
    eager.why_eager = "the reference: the same stack, its loss eager"
    losses = {"compiled": compiled.train_until(10), "eager": eager.train_until(10)}
    assert compiled.compiled is not None and eager.compiled is None
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-9)
    for name, weights in compiled.params.items():
        np.testing.assert_allclose(weights.detach().numpy(),
                                   eager.params[name].detach().numpy(), rtol=1e-8, atol=1e-12)


def test_bfloat16_stacks_step_maskedadam_and_static_lr_tensors_keep_float32():
    """bfloat16 weights: a skipping stack (MaskedAdam) trains as its members alone do, to
    bf16 rounding (its moments' lerp in float32, as torch's bf16 kernel; it raised on the
    weight dtype before); a static step's lr tensor is float32, not rounded to bf16. On CUDA
    a captured step of non-float32 weights steps MaskedAdam (fused Adam reads a float32 lr)."""
    from icl_core.algorithms.optimizers import OPTIMIZERS
    from icl_core.training.masked_adam import MaskedAdam, steps_masked

    raw = tiny_member(train__skip_grad_norm=1e3, train__grad_clip=100.0, train__steps=12)
    members = []
    for seed in (0, 1):
        m = resolve_member(raw).to_dict()
        m.update(seed=seed, dtype="bfloat16", device="cpu")
        members.append(resolve_member(m))
    alone = [MemberRun(m) for m in members]
    for run in alone:
        run.train_until(12)
    stack = StackedRun([MemberRun(m) for m in members])
    stack.train_until(12)
    for k, run in enumerate(alone):
        mine = stack.sync_member(k, optimizer=False)
        for a, b in zip(run.model.parameters(), mine.model.parameters(), strict=True):
            torch.testing.assert_close(b, a, rtol=0.05, atol=0.02)
    cfg = members[0].train
    w = [torch.zeros(2, 3, dtype=torch.bfloat16, requires_grad=True)]
    assert MaskedAdam.build(w, cfg, static=True).param_groups[0]["lr"].dtype == torch.float32
    assert OPTIMIZERS["adam"](w, cfg, static=True).param_groups[0]["lr"].dtype == torch.float32
    plain = resolve_member(tiny_member(train__cuda_graph=True, train__draws="counter")).train
    assert steps_masked(plain, "float64", cuda=True, stacked=True)
    assert steps_masked(plain, "bfloat16", cuda=True, stacked=False)
    assert not steps_masked(plain, "float32", cuda=True, stacked=True)
    assert not steps_masked(plain, "float64", cuda=False, stacked=True)
    assert steps_masked(cfg, "float32", cuda=False, stacked=True)
    assert not steps_masked(cfg, "float32", cuda=False, stacked=False)


def test_a_stack_resumed_before_any_member_took_a_step_goes_on_at_their_learning_rate():
    """Members resumed at step 4 of a warm-up with every step so far skipped (no Adam state
    yet): the stack starts at the members' learning rate (5/8 of the base), as each alone
    does, not at the scheduler's first; their weights then match alone (float64)."""
    def member(seed, skip):
        raw = tiny_member(train__steps=12, train__warmup_steps=8, train__grad_clip=100.0,
                          train__skip_grad_norm=skip)
        raw.update(seed=seed, device="cpu", dtype="float64")
        return resolve_member(raw)

    def resumed(seed):
        first = MemberRun(member(seed, 1e-30))  # every step skipped
        first.train_until(4)
        assert first.skipped_steps == 4 and not first.optimizer.state_dict()["state"]
        run = MemberRun(member(seed, 1e30))
        run.load_state_dict(first.state_dict())
        return run

    alone = [resumed(s) for s in (0, 1)]
    stack = StackedRun([resumed(s) for s in (0, 1)])
    assert stack.optimizer.param_groups[0]["lr"] == alone[0].optimizer.param_groups[0]["lr"]
    for run in alone:
        run.train_until(8)
    stack.train_until(8)
    for k, run in enumerate(alone):
        mine = stack.sync_member(k, optimizer=False)
        for a, b in zip(run.model.parameters(), mine.model.parameters(), strict=True):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_a_checkpoint_holding_some_of_a_stacks_members_resumes_them_apart(tmp_path):
    """A stack's checkpoint without one member (its rows kept from the store by a fault, it
    starts again at 0) and with its mate at step 4: each trains from its own step and both
    write the rows of an uninterrupted run (one stack needs one step: it failed every retry)."""
    members = float64_seeds(tiny_member(), seeds=(0, 1), steps=8)
    run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), members, stack="always"))
    mate = MemberRun(resolve_member(members[1]))
    mate.train_until(4)
    state = {"runs": {mate.member.hash: mate.state_dict()}}
    spec = TrialSpec("s", "t", str(tmp_path / "resumed"), members, stack="always")
    assert set(run_trial(spec, None, state).values()) == {"ok"}
    assert_same_numbers(rows_sorted(tmp_path / "whole"), rows_sorted(tmp_path / "resumed"))


@pytest.mark.parametrize("at", ["final", "intermediate"])
def test_one_members_failed_evaluation_fails_that_member_alone(tmp_path, monkeypatch, at):
    """A stack's members end on their own: one member's evaluation raising (say, out of memory
    with a larger eval.n_prompts) records that member failed with the reason and step, and the
    others write the rows they write without it (the whole stack was failed before)."""
    import icl_core.running.trial as trial
    import icl_core.training.member_evals as member_evals

    members = float64_seeds(tiny_member(eval__every=10), seeds=(0, 1, 2), steps=8)  # -> 4
    run_trial(TrialSpec("s", "t", str(tmp_path / "clean"), members, stack="always"))
    evaluate = member_evals.evaluate

    def failing(model, member, device, dtype, step, final, prompts):
        if member.seed == 1 and final == (at == "final"):
            raise RuntimeError("out of memory (on purpose)")
        return evaluate(model, member, device, dtype, step, final, prompts)

    monkeypatch.setattr(member_evals, "evaluate", failing)
    hashes = [resolve_member(m).hash for m in members]
    with pytest.raises(trial.TrialFailed, match=f"member 1 \\({hashes[1]}\\)"):  # to Tune,
        run_trial(TrialSpec("s", "t", str(tmp_path / "fault"), members, stack="always"))
    rows, _ = read_rows(str(tmp_path / "fault"), "s", "t")  # after every member was written
    assert dict(rows.select("config_hash", "status").unique().iter_rows()) == {
        hashes[0]: "ok", hashes[1]: "failed", hashes[2]: "ok"}
    failed = rows.filter(pl.col("status") == "failed")
    assert failed["config_hash"].unique().to_list() == [hashes[1]]
    step = 8 if at == "final" else 4
    assert failed["reason"].unique().to_list() == [
        f"{'final evaluation' if at == 'final' else 'evaluation'} at step {step}: "
        "RuntimeError: out of memory (on purpose)"]
    clean, fault = rows_sorted(tmp_path / "clean"), rows_sorted(tmp_path / "fault")
    keep = [h for h in hashes if h != hashes[1]]
    assert_same_numbers(clean.filter(pl.col("config_hash").is_in(keep)),
                        fault.filter(pl.col("config_hash").is_in(keep)))
