"""benchmarks/cluster_sim.py: exact schedules of small cases, Ray's one-device rule for
fractional GPUs, study-by-study vs pool, LPT, failures, and the lower bound as a property."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "cluster_sim.py"
H = 3600.0


def _load():
    spec = importlib.util.spec_from_file_location("cluster_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_sim"] = module
    spec.loader.exec_module(module)
    return module


sim = _load()
T = sim.SimTrial


def hours(*durations, study="s", gpu=1.0):
    return [T(study, d * H, gpu) for d in durations]


def test_four_one_hour_trials_on_two_gpus_take_two_hours_plus_two_startups():
    result = sim.simulate(hours(1, 1, 1, 1), 2, "pool", startup_s=10)
    assert result.makespan_s == 2 * (H + 10)  # each device runs two trials, each starts once
    assert result.utilisation == pytest.approx(1.0)
    assert result.lower_bound_s == 2 * (H + 10)
    assert len(result.spans) == 4


def test_eight_eighth_shares_run_at_once_on_one_gpu_a_ninth_waits():
    result = sim.simulate(hours(*[1] * 8, gpu=0.125), 1, startup_s=0)
    assert result.makespan_s == H
    assert all(start == 0 for _, start, _ in result.spans)
    assert sim.simulate(hours(*[1] * 9, gpu=0.125), 1, startup_s=0).makespan_s == 2 * H


def test_three_quarters_and_a_half_cannot_share_a_device():
    mixed = [T("s", H, 0.75), T("s", H, 0.5)]
    assert sim.simulate(mixed, 1, startup_s=0).makespan_s == 2 * H
    assert sim.simulate(mixed, 2, startup_s=0).makespan_s == H
    assert sim.simulate([T("s", H, 0.5), T("s", H, 0.5)], 1, startup_s=0).makespan_s == H


def test_a_fractional_request_must_fit_on_one_device_not_on_the_sum_of_two():
    # two 0.75 trials leave 0.25 free on each of two GPUs: 0.5 free in all, on no single one
    trials = [T("s", 2 * H, 0.75), T("s", 2 * H, 0.75), T("s", H, 0.5)]
    result = sim.simulate(trials, 2, startup_s=0)
    assert result.makespan_s == 3 * H
    assert [start for i, start, _ in result.spans if i == 2] == [2 * H]


def test_whole_gpu_requests_stay_on_one_node():
    assert sim.simulate([T("s", H, 2.0)], 2, gpus_per_node=2, startup_s=0).makespan_s == H
    with pytest.raises(ValueError, match="fits on no node"):
        sim.simulate([T("s", H, 2.0)], 2, gpus_per_node=1)
    with pytest.raises(ValueError, match="must be whole"):
        sim.simulate([T("s", H, 1.5)], 4)


def test_by_study_waits_for_each_studys_straggler_and_the_pool_does_not():
    trials = hours(4, 1, study="a") + hours(1, 1, 1, study="b")
    by = sim.simulate(trials, 2, "by_study", startup_s=0)
    pool = sim.simulate(trials, 2, "pool", startup_s=0)
    # by_study: a's 4 h trial holds the cluster while its other device idles from 1 h to 4 h;
    # then b's three 1 h trials take 2 h on two devices
    assert by.makespan_s == 6 * H
    assert by.utilisation == pytest.approx(8 / 12)
    # pool: the 4 h trial on one device, the four 1 h trials one after another on the other
    assert pool.makespan_s == 4 * H == pool.lower_bound_s
    assert pool.utilisation == pytest.approx(1.0)


def test_pool_is_longest_first_and_by_study_keeps_grid_order():
    trials = hours(1, 1, 1, 1, 4)
    assert sim.simulate(trials, 2, "by_study", startup_s=0).makespan_s == 6 * H  # FIFO
    assert sim.simulate(trials, 2, "pool", startup_s=0).makespan_s == 4 * H  # LPT


def test_lpt_on_the_classic_instance_is_seven_sixths_of_optimal():
    # Graham's instance for two machines: {3, 3, 2, 2, 2}; optimum 6 (3+3 | 2+2+2), LPT 7
    result = sim.simulate(hours(2, 3, 2, 3, 2), 2, "pool", startup_s=0)
    assert result.makespan_s == 7 * H
    assert result.lower_bound_s == 6 * H
    assert result.ratio == pytest.approx(7 / 6)
    first = sorted(result.spans, key=lambda s: (s[1], s[0]))[:2]
    assert {i for i, _, _ in first} == {1, 3}  # the two 3 h trials start first


def test_cpu_only_trials_run_on_cpus():
    trials = [T("s", H, 0.0, cpu=1.0)] * 4
    assert sim.simulate(trials, 2, startup_s=5).makespan_s == 2 * (H + 5)
    assert sim.simulate([T("s", H, 0.0, cpu=2.0)] * 2, 2, startup_s=0).makespan_s == 2 * H


def test_no_failures_is_deterministic_whatever_the_seed():
    trials = hours(3, 1, 2, 2, gpu=0.5) + hours(5, 1, study="b")
    runs = [sim.simulate(trials, 2, "by_study", seed=seed) for seed in (0, 1, 2)]
    assert {r.makespan_s for r in runs} == {runs[0].makespan_s}
    assert all(r.failures == 0 and r.lost_s == 0 for r in runs)


def test_failures_cost_time_and_are_reproducible_with_a_seed():
    trials = hours(10, 8, 6, 4, 2, 2)
    clean = sim.simulate(trials, 3, startup_s=10)
    kw = {"startup_s": 10, "failure_rate": 0.5, "restart_s": 30, "checkpoint_s": 1800}
    runs = {seed: sim.simulate(trials, 3, seed=seed, **kw) for seed in range(5)}
    again = sim.simulate(trials, 3, seed=3, **kw)
    assert (again.makespan_s, again.failures, again.spans) == (
        runs[3].makespan_s, runs[3].failures, runs[3].spans)
    assert all(r.failures > 0 and r.makespan_s > clean.makespan_s for r in runs.values())
    assert len({r.makespan_s for r in runs.values()}) > 1
    for r in runs.values():  # a failure loses less than one checkpoint interval
        assert 0 < r.lost_s < r.failures * 1800


def test_one_failing_trial_pays_exactly_its_restarts_and_lost_work():
    kw = {"startup_s": 10, "failure_rate": 2.0, "restart_s": 30, "checkpoint_s": 600}
    result = sim.simulate(hours(3), 1, seed=7, **kw)
    assert result.failures > 0
    assert result.makespan_s == pytest.approx(
        3 * H + 10 + result.failures * (10 + 30) + result.lost_s)
    assert result.busy_s == pytest.approx(result.makespan_s)  # one device, always held


def test_a_trials_own_checkpoint_interval_is_used():
    kw = {"startup_s": 0, "failure_rate": 4.0, "restart_s": 0, "seed": 1}
    often = sim.simulate([T("s", 4 * H, 1.0, checkpoint_s=1.0)], 1, **kw)
    assert often.failures > 0 and often.lost_s < often.failures * 1.0


def _peak_share(result, trials) -> float:
    points = sorted({s for _, s, _ in result.spans})
    return max(sum(trials[i].gpu for i, s, e in result.spans if s <= t < e) for t in points)


def test_lower_bound_never_exceeds_the_makespan_on_random_instances():
    rng = random.Random(0)
    for case in range(150):
        devices = rng.randint(2, 12)
        studies = [f"s{k}" for k in range(rng.randint(1, 4))]
        trials = [T(rng.choice(studies), rng.uniform(0, 5 * H),
                    rng.choice([0.125, 0.25, 0.5, 0.75, 1.0, 2.0])) for _ in range(rng.randint(1, 25))]
        kw = {"gpus_per_node": rng.choice([2, 4, 8]), "startup_s": rng.choice([0, 10]),
              "failure_rate": rng.choice([0.0, 0.3]), "seed": case}
        for policy in sim.POLICIES:
            result = sim.simulate(trials, devices, policy, **kw)
            assert result.lower_bound_s <= result.makespan_s * (1 + 1e-12), (case, policy)
            assert 0 < result.utilisation <= 1 + 1e-9
            assert _peak_share(result, trials) <= devices + 1e-9
            assert {i for i, _, _ in result.spans} == set(range(len(trials)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="policy"):
        sim.simulate(hours(1), 1, "fifo")
    with pytest.raises(ValueError, match="devices"):
        sim.simulate(hours(1), 0)


def test_trials_from_the_real_planner_keep_every_member_and_count_search_samples():
    from icl.catalog import load_sweep
    from icl_core.running.plans import PlanRequest, make_plans
    from icl_core.running.trial_pool import cost_model

    trials = sim.plan_trials_for(["depth_scaling", "hpo_lr"], "smoke", gpus=8,
                                 only=["depth_scaling/least_squares", "hpo_lr"])
    expected = {}
    for name in ("depth_scaling", "hpo_lr"):
        sweep = load_sweep(name)
        for plan in make_plans(sweep, PlanRequest(preset="smoke")):
            expected[f"{name}/{plan.study.name}"] = plan
    studies = {t.study for t in trials}
    assert studies == {"depth_scaling/least_squares", "hpo_lr/width_lr"}
    grid = [t for t in trials if t.study == "depth_scaling/least_squares"]
    assert sum(t.members for t in grid) == len(expected["depth_scaling/least_squares"].members)
    search = expected["hpo_lr/width_lr"]
    assert sum(t.study == "hpo_lr/width_lr" for t in trials) == search.trials
    one = [t for t in trials if t.study == "hpo_lr/width_lr"][0]
    assert one.seconds == cost_model(8, 1).member_seconds(search.members[0])  # the cost model
    assert all(0 < t.gpu <= 1 and t.seconds > 0 for t in trials)
    on_cpu = sim.plan_trials_for(["depth_scaling"], "smoke", gpus=0, cpus=2,
                                 only=["depth_scaling/least_squares"])
    assert all(t.gpu == 0 and t.seconds > 0 for t in on_cpu)
    assert sim.simulate(on_cpu, 2).makespan_s >= sim.lower_bound(on_cpu, 2, 10.0)


def test_a_gpu_clusters_plan_holds_members_to_a_gpus_memory(monkeypatch):
    """Planned for GPUs, a member's memory is held to a GPU's (as --plan-gpus), not to the
    planning host's RAM: an AlgoFormer paper member (~31 GB) plans on a host of 1 GB."""
    import icl_core.planning.memory as memory
    from icl_core.spec.config import ConfigError

    monkeypatch.setattr(memory, "host_memory", lambda: 1e9)
    planner = sim._planner()
    sweep, plans, _ = planner.sweep_plans("algoformer", "paper", 8)
    assert sweep.name == "algoformer" and plans
    with pytest.raises(ConfigError, match="this machine's RAM"):
        planner.sweep_plans("algoformer", "paper", 0)
