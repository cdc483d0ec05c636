"""A trial's stacks of different shapes trained at once in one process (TrialSpec.interleave,
icl_core.running.trial.run_together: a report interval of each in turn, each on its own CUDA
stream on a GPU): the same rows as one stack after another, a failing stack recorded while the
others finish, and a checkpoint that holds every open member, so a crashed trial resumes to
the numbers of an uninterrupted one."""

from __future__ import annotations

import pytest
from conftest import tiny_member
from test_stacked import Crash, assert_same_numbers, float64_seeds, rows_sorted

from icl_core.running.trial import TrialFailed, TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.storage.store import Store
from icl_core.training.stack_rules import stack_groups


def two_shapes(steps: int = 12) -> list[dict]:
    """Two seeds of a 1-layer and a 2-layer model, with counter draws: two stacks."""
    return [m for depth in (1, 2) for m in float64_seeds(
        tiny_member(model__depth=depth, train__draws="counter"), seeds=(0, 1), steps=steps)]


def test_stacks_trained_together_write_the_rows_of_stacks_one_after_another(tmp_path):
    members = two_shapes()
    assert len(stack_groups([resolve_member(m) for m in members], "always")) == 2
    apart = run_trial(TrialSpec("s", "t", str(tmp_path / "apart"), members, stack="always"))
    together = run_trial(TrialSpec("s", "t", str(tmp_path / "together"), members,
                                   stack="always", interleave=True))
    assert together == apart and set(together.values()) == {"ok"}
    assert_same_numbers(rows_sorted(tmp_path / "apart"), rows_sorted(tmp_path / "together"))


def test_the_groups_take_turns_a_report_interval_each(tmp_path):
    """The reports come from both stacks in turn (not one stack's to its end first)."""
    seen = []
    run_trial(TrialSpec("s", "t", str(tmp_path), two_shapes(), stack="always", interleave=True),
              lambda metrics, state: seen.append((metrics["member"], metrics["step"])))
    assert seen[:4] == [(0, 4), (2, 4), (0, 8), (2, 8)]


def test_a_crashed_interleaved_trial_resumes_from_a_checkpoint_of_every_open_member(tmp_path):
    members = two_shapes()
    run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), members, stack="always"))
    saved: dict = {}
    calls = []

    def crash_at_the_second_checkpoint(metrics, state):
        if state is not None:
            calls.append(metrics["member"])
            saved.update(state)
            if len(calls) == 2:
                raise Crash

    spec = TrialSpec("s", "t", str(tmp_path / "crashed"), members, stack="always",
                     interleave=True)
    with pytest.raises(Crash):
        run_trial(spec, crash_at_the_second_checkpoint)
    assert set(saved["runs"]) == {resolve_member(m).hash for m in members}  # both stacks
    assert {s["step"] for s in saved["runs"].values()} == {4}
    run_trial(spec, None, dict(saved))
    assert_same_numbers(rows_sorted(tmp_path / "whole"), rows_sorted(tmp_path / "crashed"))


def test_a_failing_stack_is_recorded_and_the_others_finish(tmp_path):
    members = two_shapes(steps=8)
    bad = [{**m, "device": "cuda:99"} for m in members[:2]]  # no such device: cannot be built
    spec = TrialSpec("s", "t", str(tmp_path), bad + members[2:], stack="always",
                     interleave=True)
    with pytest.raises(TrialFailed):
        run_trial(spec)
    good = {resolve_member(m).hash for m in members[2:]}
    store = Store(str(tmp_path))
    assert store.finished("s", "t") == good  # the other stack trained to its end
    for h in (resolve_member(m).hash for m in bad):
        status, reason = store.member_status("s", "t", [h])[h]
        assert status == "failed" and reason


def test_pack_gpu_plans_a_trial_per_whole_gpu_holding_whole_stacks():
    from icl_core.planning.resources import plan_trials

    members = [resolve_member(m) for m in two_shapes()] + \
        [resolve_member(m) for m in float64_seeds(tiny_member(model__depth=3), seeds=(0, 1))]
    trials = plan_trials(members, cluster_gpus=2, cpus=1, pack="gpu")
    assert len(trials) == 2 and {t.res.gpu for t in trials} == {1.0}
    assert sorted(m.hash for t in trials for m in t.members) == sorted(m.hash for m in members)
    for t in trials:  # whole stacks: a stack's seeds never split across trials
        assert all(len(g) == 2 for g in stack_groups(t.members, "always"))
        assert t.interleave == (len(stack_groups(t.members, "always")) > 1)
    assert sorted(len(t.members) for t in trials) == [2, 4]  # three stacks on two GPUs
    with pytest.raises(ValueError, match="--pack gpu: fills a whole GPU"):
        plan_trials(members, cluster_gpus=0.5, cpus=1, pack="gpu")


def test_pack_gpu_without_a_gpu_is_one_line_naming_the_choices(capsys):
    from icl.catalog import load_sweep

    sweep = load_sweep("depth_scaling")
    assert sweep.main(["--preset", "smoke", "--study", "least_squares", "--pack", "gpu",
                       "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pack gpu:") and "valid --pack choices" in err
    assert sweep.main(["--preset", "smoke", "--study", "least_squares", "--pack", "gpu",
                       "--dry-run", "--plan-gpus", "1"]) == 0
    assert "1 CPU + 1 GPU per trial" in capsys.readouterr().out


def test_a_checkpoint_holds_each_groups_state_as_it_was_when_that_group_saved_it(tmp_path):
    """Groups checkpointing at different steps (a lone member every 4, a stack every 2): a
    checkpoint the stack reports carries the lone member's state of its own last checkpoint,
    not its weights trained on since (held by reference, they were: a resume from such a
    checkpoint paired step 4's rows with later weights and Adam moments)."""
    import copy

    lone = float64_seeds(tiny_member(train__draws="counter"), seeds=(0,), steps=12)
    pair = float64_seeds(tiny_member(model__depth=1, train__draws="counter"), seeds=(0, 1),
                         steps=12)
    for m, every in [(m, 4) for m in lone] + [(m, 2) for m in pair]:
        m["train"].update(report_every=2, checkpoint_every=every)
    members = lone + pair
    run_trial(TrialSpec("s", "t", str(tmp_path / "whole"), members, stack="always"))
    saved: dict = {}

    def crash_at_the_stacks_step_6_checkpoint(metrics, state):
        if state is not None:
            saved.clear()
            saved.update(copy.deepcopy(state))  # what Tune's checkpoint writes at once
            if metrics["member"] == 1 and metrics["step"] == 6:
                raise Crash

    spec = TrialSpec("s", "t", str(tmp_path / "crashed"), members, stack="always",
                     interleave=True)
    with pytest.raises(Crash):
        run_trial(spec, crash_at_the_stacks_step_6_checkpoint)
    assert sorted(s["step"] for s in saved["runs"].values()) == [4, 6, 6]
    run_trial(spec, None, saved)
    assert_same_numbers(rows_sorted(tmp_path / "whole"), rows_sorted(tmp_path / "crashed"))
