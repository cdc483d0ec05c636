"""A GPU window's plan (`icl plan --gpu-minutes`, icl.commands.gpu_window), what runs it
(benchmarks/run_without_ray.py: new seeds only, the committed members skipped) and how its
rows join the evidence (`icl evidence --merge`): on the real catalog, the committed evidence
and real Parquet stores."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from analysis.claims.evidence import EVIDENCE, compact, load
from icl.commands.evidence import members_at
from icl.commands.gpu_window import (
    GATE_S,
    STARTUP_S,
    Candidate,
    calls,
    choose,
    claims_by_study,
    command,
    kept_s,
    window_seconds,
)
from icl.console import main as icl
from icl_core.common.validation import ConfigError
from icl_core.planning.cost import SHARED_SLOWDOWN
from icl_core.storage.store import Store
from tests.test_adaptive import STUDY, SWEEP, write_member


@pytest.fixture(autouse=True)
def no_carried_states(monkeypatch, tmp_path):
    """The plans below as in a checkout without an earlier window's states (a developer's may
    hold .window/states.tgz)."""
    from icl.commands import gpu_window

    monkeypatch.setattr(gpu_window, "WINDOW_STATES", str(tmp_path / "no-states.tgz"))


def seeds_past_evidence() -> int:
    """A seed count past every committed reduced study's (3 to 5 on 2026-11-28), so a plan with
    --seeds this many has new members to run, whatever windows have added since."""
    rows = EVIDENCE.joinpath("reduced").glob("*/*/rows/rows.parquet")
    return max(int(pl.read_parquet(p, columns=["seed"])["seed"].max()) for p in rows) + 2


def test_the_window_takes_undecided_claims_first_most_per_second_within_the_window():
    """A study joins while the window's wall, as the command runs it, fits: one job per sweep
    file, five processes in all, each stack SHARED_SLOWDOWN x its time alone when several
    processes share the GPU."""
    def cand(sweep, name, stacks, outcomes, to_run=3):
        return Candidate(sweep, name, 3, to_run, stacks,
                         [(f"{name}{i}", o) for i, o in enumerate(outcomes)])

    assert SHARED_SLOWDOWN == 1.25  # the numbers below
    found = [cand("b", "decided", [40.0], ["reproduced"]), cand("b", "none", [20.0], []),
             cand("a", "slow", [200.0, 200.0], ["partly"] * 4),
             cand("a", "fast", [100.0], ["not testable"] * 2),
             cand("a", "held", [], ["partly"] * 9, to_run=0)]
    # alone: fast one process, 100 s; slow two, 200 x 1.25: 2/100 > 4/250 per second
    assert [c.planned_s for c in found[2:4]] == [250.0, 100.0]
    # fast + slow: job a's three stacks on three processes, 250 s; b's on the two left
    assert [c.study for c in choose(found, 260)] == ["fast", "slow", "decided", "none"]
    assert command(choose(found, 260), "reduced", 600.0, 5) == (
        "OUT=$OUT LIMIT=590 bash benchmarks/gpu_evidence.sh reduced a:fast,slow:cuda:3:5 "
        "b:decided,none:cuda:2:5")
    # slow does not fit 240 s; what fits after the undecided; nothing in evidence re-runs
    assert [c.study for c in choose(found, 240)] == ["fast", "decided", "none"]
    assert window_seconds(choose(found, 240)) == 125.0  # two processes: 100 x 1.25
    # more stacks than processes: seven of 100 s on five, longest first
    assert window_seconds([cand("c", "wide", [100.0] * 7, ["partly"])]) == 250.0
    # never more than five processes: a sixth sweep file (a sixth job) waits for a window
    six = [cand(f"f{i}", f"s{i}", [10.0 * (i + 1)], ["partly"]) for i in range(6)]
    assert [c.study for c in choose(six, 1000)] == ["s0", "s1", "s2", "s3", "s4"]


def test_a_window_longer_than_a_call_is_split_into_calls_each_within_its_limit():
    """--call-minutes: a machine that runs one command for at most so long gets the window as
    calls one after another, each its own limit (spent whole from the window) and its own
    start-up; a study runs whole in one call."""
    found = [Candidate("a", "x", 1, 1, [500.0], [("x0", "partly")]),
             Candidate("a", "y", 1, 1, [420.0], [("y0", "partly")]),
             Candidate("b", "z", 1, 1, [400.0], [("z0", "partly")])]
    # one call of 1,200 s holds all three: x and y on job a's two processes, z on b's
    ((one, limit),) = calls(found, 1200.0)
    assert limit == 1200.0 and {c.study for c in one} == {"x", "y", "z"}
    assert STARTUP_S == 50.0  # the numbers below
    # calls of 600 s: z and y fit the first (420 x 1.25 <= 550), x the second
    split = calls(found, 1200.0, 600.0)
    assert [([c.study for c in cs], limit) for cs, limit in split] == [
        (["z", "y"], 600.0), (["x"], 600.0)]
    assert command(split[1][0], "reduced", split[1][1], 5) == (
        "OUT=$OUT LIMIT=590 bash benchmarks/gpu_evidence.sh reduced a:x:cuda:1:5")
    # the window's remainder is the last call's limit; a study that fits no call is left
    assert [limit for _, limit in calls(found, 1160.0, 600.0)] == [600.0, 560.0]
    assert [len(cs) for cs, _ in calls(found, 1100.0, 600.0)] == [2]  # 500 s - 50 < 500 s


def test_icl_plan_gpu_minutes_plans_only_what_evidence_lacks_within_the_window(capsys):
    n = seeds_past_evidence()  # more than any committed study holds, so some are new
    assert icl(["plan", "--gpu-minutes", "10", "--seeds", str(n)]) == 0
    out = capsys.readouterr().out
    chosen = re.findall(r"^\+ (\w+)/(\w+): (\d+) of (\d+) members to run .* planned (\d+) s",
                        out, re.M)
    assert chosen, out
    total = re.search(r"^chosen: \d+ of \d+ studies, planned (\d+) s of (\d+) s", out, re.M)
    assert int(total.group(1)) <= int(total.group(2)) == 600 - STARTUP_S
    assert int(total.group(1)) >= max(int(c[4]) for c in chosen)  # the window holds each
    for sweep, study, to_run, members, _ in chosen:
        planned = members_at(sweep, study, "reduced")(n)
        rows = load("reduced", sweep, study)  # the committed members among the planned ones
        held = len(planned & set(rows["config_hash"])) if rows is not None else 0
        assert int(members) == len(planned) and int(to_run) == len(planned) - held, (sweep, study)
    job = re.search(r"gpu_evidence\.sh reduced (.*)$", out, re.M).group(1).split()
    ran = {(j.split(":")[0], s) for j in job for s in j.split(":")[1].split(",")}
    assert ran == {(c[0], c[1]) for c in chosen}
    assert all(j.endswith(":cuda:" + j.split(":")[3] + f":{n}") for j in job)
    assert "icl evidence --merge --from /tmp/store --preset reduced" in out
    # every member of the preset is committed for these: nothing to run without new seeds
    assert icl(["plan", "--gpu-minutes", "10", "--only", "deep_optimizers/scaleup"]) == 1
    assert "every member is in evidence/reduced" in capsys.readouterr().out
    # --all: the study afresh, its committed members too, and the script told not to skip them
    assert icl(["plan", "--gpu-minutes", "10", "--only", "deep_optimizers/scaleup", "--all"]) == 0
    out = capsys.readouterr().out
    assert "+ deep_optimizers/scaleup: 15 of 15 members to run in 5 stacks" in out
    assert "every runnable study of the selection (1) in one window: planned" in out
    assert "ALL=1 OUT=$OUT LIMIT=590 bash benchmarks/gpu_evidence.sh reduced " \
        "deep_optimizers:scaleup:cuda:5" in out
    assert icl(["plan", "--gpu-minutes", "0"]) == 2
    assert "--gpu-minutes: must be > 0" in capsys.readouterr().err


def test_a_plan_carries_the_states_an_earlier_window_brought_back(capsys, monkeypatch,
                                                                  tmp_path):
    """With an earlier window's states.tgz where the plan runs, its command takes them
    (STATES=) and says to carry their folder; without, it says how to keep the next ones."""
    from icl.commands import gpu_window

    argv = ["plan", "--gpu-minutes", "10", "--only", "deep_optimizers/scaleup", "--all"]
    assert icl(argv) == 0
    out = capsys.readouterr().out
    assert "STATES=" not in out and "carry" not in out
    assert "brings back their states as states.tgz when they fit: keep it as " in out
    states = tmp_path / "states.tgz"
    states.write_bytes(b"an archive")
    monkeypatch.setattr(gpu_window, "WINDOW_STATES", str(states))
    assert icl(argv) == 0
    out = capsys.readouterr().out
    assert f"ALL=1 STATES={states} OUT=$OUT LIMIT=590 bash benchmarks/gpu_evidence.sh " \
        "reduced deep_optimizers:scaleup:cuda:5" in out
    assert f"with the states of members an earlier window cut off ({states}): carry " \
        f'["{tmp_path}"]' in out


def test_claims_declared_at_a_preset_without_its_rows_lead_its_window(capsys, monkeypatch,
                                                                       tmp_path):
    """Claims declared at the gpu preset read "evidence pending" while no rows of it are
    committed (an empty evidence folder here, as before the first gpu window), and that
    window's plan lists their studies before every study no claim reads and chooses the
    first."""
    import analysis.claims.evidence as evidence

    monkeypatch.setattr(evidence, "EVIDENCE", tmp_path)  # what the engine and the plan read
    claimed = claims_by_study("gpu")
    assert claimed and {o for cs in claimed.values() for _, o in cs} == {"evidence pending"}
    assert icl(["plan", "--gpu-minutes", "10", "--preset", "gpu"]) == 0
    lines = re.findall(r"^([+ ]) (\w+)/(\w+): .*?; (\d+ claims?: .*|no claim)$",
                       capsys.readouterr().out, re.M)
    assert {(sweep, study) for _, sweep, study, _ in lines[:len(claimed)]} == set(claimed)
    assert all("evidence pending" in served for *_, served in lines[:len(claimed)])
    assert all(served == "no claim" for *_, served in lines[len(claimed):])
    assert lines[0][0] == "+"  # the first fits a 10-minute window: chosen


def test_icl_plan_call_minutes_prints_a_command_and_a_merge_per_call(capsys):
    """A 15-minute window on a machine that runs a command for at most 10: every call's limit
    within 10 minutes, all within the window, its studies in no other call, each merged from
    its own store. (--all: every member planned, whatever evidence is committed.)"""
    assert icl(["plan", "--gpu-minutes", "15", "--all", "--call-minutes", "10"]) == 0
    out = capsys.readouterr().out
    assert "50 s kept for start-up and the archive in each call of at most 10 minutes" in out
    chosen = set(re.findall(r"^\+ (\w+/\w+):", out, re.M))
    lines = re.findall(r"^  call (\d+): ALL=1 STORE=/tmp/gpu_evidence_store\1 OUT=\$OUT LIMIT=(\d+) "
                       r"bash benchmarks/gpu_evidence\.sh reduced (.*)$", out, re.M)
    assert [int(i) for i, _, _ in lines] == list(range(1, len(lines) + 1)), out
    assert len(lines) >= 2 and f"in {len(lines)} calls" in out
    assert all(int(limit) <= 600 - 10 for _, limit, _ in lines)  # MARGIN_S short of the cap
    assert sum(int(limit) for _, limit, _ in lines) <= 900
    studies = [{f"{j.split(':')[0]}/{s}" for j in jobs.split() for s in j.split(":")[1].split(",")}
               for _, _, jobs in lines]
    assert sum(len(s) for s in studies) == len(set().union(*studies)) == len(chosen)
    assert set().union(*studies) == chosen
    merges = re.findall(r"icl evidence --merge --from /tmp/store(\d+) --preset reduced "
                        r"([\w/ ]+?)(?:;|$)", out, re.M)
    assert [(int(i), set(m.split())) for i, m in merges] == [
        (i + 1, s) for i, s in enumerate(studies)]
    # each merge on its own: a call cut before its first member stops neither the next
    # call's merge nor the table
    assert out.rstrip().endswith("; icl verdicts --write") and " && icl evidence" not in out
    # without it, the same window is one command of 15 minutes
    assert icl(["plan", "--gpu-minutes", "15", "--seeds", str(seeds_past_evidence())]) == 0
    assert "OUT=$OUT LIMIT=890 bash" in capsys.readouterr().out
    assert icl(["plan", "--gpu-minutes", "15", "--call-minutes", "0.8"]) == 2
    assert "--call-minutes: must be more than the 50 s" in capsys.readouterr().err


def test_a_window_runs_only_the_new_seeds_of_a_committed_study():
    import run_without_ray

    skip = run_without_ray.committed_hashes("deep_optimizers", "reduced")
    rows = load("reduced", "deep_optimizers", "transformer_depth")
    held = set(rows["config_hash"].to_list())
    assert skip[("deep_optimizers", "transformer_depth")] == held
    n = int(rows["seed"].max()) + 1  # seeds 0..n-1 committed (3 until 2026-11-28, then 5)
    specs = run_without_ray.trials("deep_optimizers", "reduced", ["transformer_depth"],
                                   "/nonexistent-store", "cpu", "auto", {}, {}, seeds=n + 2,
                                   skip=skip)
    seeds = sorted(m["seed"] for s in specs for m in s.members)
    assert seeds == [n] * 3 + [n + 1] * 3  # 3 settings x the 2 new seeds; 0..n-1 committed
    # longest first by the cost model, as the plan puts them on a job's processes (stacks of
    # equal size: the deepest first)
    depths = [s.members[0]["model"]["depth"] for s in specs]
    assert depths == sorted(depths, reverse=True) and len(set(depths)) == 3
    assert not run_without_ray.trials("deep_optimizers", "reduced", ["transformer_depth"],
                                      "/nonexistent-store", "cpu", "auto", {}, {}, skip=skip)
    # --interleave: one trial for the study, its three stacks trained at once in one process
    (one,) = run_without_ray.trials("deep_optimizers", "reduced", ["transformer_depth"],
                                    "/nonexistent-store", "cuda", "auto", {}, {}, seeds=n + 2,
                                    skip=skip, interleave=True)
    assert one.interleave and sorted(m["seed"] for m in one.members) == seeds


@pytest.mark.slow  # ~10 s, four plans; the eager window's plan stays in the default run
# (test_icl_plan_gpu_minutes_plans_only_what_evidence_lacks_within_the_window), and the
# members a graph window runs (the next test)
def test_a_graph_window_plans_and_runs_each_member_on_the_graph_path_its_config_allows(capsys):
    """--graph: each member with its step a CUDA graph where its config allows it. A captured
    step is a speed, not a setting: the same members (hashes, random streams), so the plan
    skips the committed ones as an eager plan does, GRAPH=1 tells the script, and the rows
    merge into the evidence. A member the graph path refuses (L-BFGS) stays eager, and says
    why (the members themselves: the next test)."""
    plans = {}
    for flags in ([], ["--graph"]):
        assert icl(["plan", "--gpu-minutes", "10", "--seeds", str(seeds_past_evidence()),
                    *flags]) == 0
        plans[bool(flags)] = capsys.readouterr().out
    counts = {graph: re.findall(r"^. (\w+/\w+): (\d+) of (\d+) members", out, re.M)
              for graph, out in plans.items()}
    assert counts[True] == counts[False] and counts[True]  # the committed members are skipped
    assert "GRAPH=1 OUT=$OUT LIMIT=590 bash benchmarks/gpu_evidence.sh reduced " in plans[True]
    # the script's GRAPH=1 gate (the replay tests) runs first, within LIMIT: its cap is kept
    from conftest import ROOT

    assert GATE_S == float(re.search(r"^GATE_S=\$\{GATE_S:-(\d+)\}$", (
        ROOT / "benchmarks" / "gpu_evidence.sh").read_text(), re.M).group(1))
    assert f"{STARTUP_S + GATE_S:.0f} s kept for start-up and the archive ({GATE_S:.0f} s of " \
        "them for GRAPH=1's replay tests)" in plans[True]
    for graph, out in plans.items():
        total = re.search(r"^chosen: .* planned (\d+) s of (\d+) s$", out, re.M)
        assert int(total.group(1)) <= int(total.group(2)) == 600 - kept_s(graph)
    assert calls([Candidate("a", "x", 1, 1, [420.0], [("x0", "partly")])], 600.0, None,
                 kept_s(True)) == []  # 420 s fits the 550 s a call leaves, not 400
    assert "icl evidence --merge --from /tmp/store --preset reduced" in plans[True]
    # every member planned (--all), whatever evidence is committed: some on the graph path
    assert icl(["plan", "--gpu-minutes", "10", "--only", "algoformer", "--all", "--graph"]) == 0
    assert "the graph path graph-generator fp32 is not fitted yet (`icl cost`): its steps are " \
        "costed as the eager path's, so this plan is an upper bound" in capsys.readouterr().out
    assert icl(["plan", "--gpu-minutes", "10", "--only", "preconditioned_gd/lsa_dim", "--all",
                "--graph"]) == 0  # L-BFGS: every member eager, and why
    assert "9 of them eager (train.cuda_graph: needs online Adam/AdamW training, not " \
        "'lbfgs')" in capsys.readouterr().out


def test_a_graph_window_runs_the_same_members_captured_where_their_config_allows():
    """The members a --graph window runs (run_without_ray.trials(graph=True)): each captured
    where its config allows it, the same hashes as the eager plan's, costed by the graph
    path's own rates; an L-BFGS member stays eager and says why."""
    import run_without_ray

    from icl_core.spec.config import on_graph_path, resolve_member
    from tests.test_stacked import lsa_member

    specs = run_without_ray.trials("algoformer", "reduced", ["examples"], "/nonexistent-store",
                                   "cuda", "auto", {}, {}, graph=True)
    plain = run_without_ray.trials("algoformer", "reduced", ["examples"], "/nonexistent-store",
                                   "cuda", "auto", {}, {})
    graphed = [resolve_member(m) for s in specs for m in s.members]
    assert graphed and all(m.train.cuda_graph and m.train.draws == "generator" for m in graphed)
    # costed (once measured) by the replayed-generator graphs' own rates, not counter graphs'
    from icl_core.planning.gpu_rates import path_of

    assert {path_of(m) for m in graphed} == {"graph-generator fp32"}
    assert sorted(m.hash for m in graphed) == \
        sorted(resolve_member(m).hash for s in plain for m in s.members)  # the same members
    lbfgs = resolve_member(lsa_member())
    same, why = on_graph_path(lbfgs)
    assert same is lbfgs and "train.cuda_graph" in why and "lbfgs" in why


def test_evidence_merge_keeps_the_committed_members_the_window_did_not_run(tmp_path):
    first, second, root = Store(str(tmp_path / "a")), Store(str(tmp_path / "b")), tmp_path / "ev"
    for seed in (0, 1):
        write_member(first, 4.0, seed)
    compact(first.uri, "reduced", SWEEP, STUDY, root, scale="reduced: 2 seeds")
    (root / "reduced" / SWEEP / STUDY / "provenance.json").write_text(json.dumps(
        {**json.loads((root / "reduced" / SWEEP / STUDY / "provenance.json").read_text()),
         "commit": "first"}))
    for seed in (1, 2):  # a re-run seed and a new one
        write_member(second, 4.0, seed)
    compact(second.uri, "reduced", SWEEP, STUDY, root, merge=True)
    rows = load("reduced", SWEEP, STUDY, root)
    assert sorted(rows["seed"].to_list()) == [0, 1, 2]  # one row each: no member twice
    assert rows.filter(pl.col("seed") == 1)["config_hash"].to_list() == ["x4s1"]
    prov = json.loads((root / "reduced" / SWEEP / STUDY / "provenance.json").read_text())
    assert prov["members"] == 3 and prov["merged_from"] == ["first"]
    # without --scale a merge keeps the committed scale, for the new rows too (they had none:
    # a figure's title read the earlier rows' beside nulls); with it, every row's is the new one
    assert rows["scale"].to_list() == ["reduced: 2 seeds"] * 3
    assert prov["scale"] == "reduced: 2 seeds"
    compact(second.uri, "reduced", SWEEP, STUDY, root, scale="reduced: 3 seeds", merge=True)
    assert load("reduced", SWEEP, STUDY, root)["scale"].to_list() == ["reduced: 3 seeds"] * 3
    prov_file = root / "reduced" / SWEEP / STUDY / "provenance.json"  # as an older merge left
    prov_file.write_text(json.dumps({k: v for k, v in json.loads(prov_file.read_text()).items()
                                     if k != "scale"}))  # it: the rows' scale, none beside them
    compact(second.uri, "reduced", SWEEP, STUDY, root, merge=True)
    assert load("reduced", SWEEP, STUDY, root)["scale"].to_list() == ["reduced: 3 seeds"] * 3
    compact(second.uri, "reduced", SWEEP, STUDY, root)  # without --merge: the store replaces it
    assert sorted(load("reduced", SWEEP, STUDY, root)["seed"].to_list()) == [1, 2]
    # the command line: `icl evidence --merge` keeps what the store lacks
    write_member(first, 4.0, 0)
    argv = ["evidence", "--from", first.uri, "--preset", "reduced", f"{SWEEP}/{STUDY}",
            "--evidence", str(root)]
    assert icl([*argv, "--merge"]) == 0
    assert sorted(load("reduced", SWEEP, STUDY, root)["seed"].to_list()) == [0, 1, 2]
    with pytest.raises(SystemExit) as bad:  # argparse's usage error: a study not named
        icl(["evidence", "--from", first.uri, "--preset", "reduced", SWEEP])
    assert bad.value.code == 2


def test_a_commit_takes_the_presets_members_only_and_a_merge_keeps_what_a_window_failed(
        tmp_path, capsys):
    """A store shared with another preset's run (or a --set run) holds members the study does
    not have at the preset named: they are left out and counted, and a store of none of them
    is refused. A member that failed in a window (out of memory, a crash) does not displace
    its committed, finished rows in a merge."""
    from icl_core.common.validation import ConfigError
    from icl_core.storage.store import rows_table

    def at_preset(n):  # the study's members at the preset: depth 4, seeds 0..n-1
        return {f"x4s{seed}" for seed in range(n)}

    mixed, root = Store(str(tmp_path / "mixed")), tmp_path / "ev"
    for seed in (0, 1):
        write_member(mixed, 4.0, seed)
    write_member(mixed, 8.0, 0)  # another preset's member, in the same store
    out = compact(mixed.uri, "reduced", SWEEP, STUDY, root, members=at_preset)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["members"] == 2 and prov["left_out"] == {"not_at_preset": 1}
    assert sorted(load("reduced", SWEEP, STUDY, root)["config_hash"].unique()) == ["x4s0", "x4s1"]
    other = Store(str(tmp_path / "other"))
    write_member(other, 8.0, 0)
    with pytest.raises(ConfigError, match="none of the store's 1 members is one of the study's "
                       "at preset 'reduced'"):
        compact(other.uri, "reduced", SWEEP, STUDY, root, members=at_preset)
    # a window: seed 1 failed there (committed finished here), seed 2 is new
    window = Store(str(tmp_path / "window"))
    write_member(window, 4.0, 2)
    failed = [{"metric": "mse", "statistic": "median", "value": float("nan"), "step": 0,
               "predictor": "model", "position": 20, "test_dist": "train"}]
    window.write_rows(window.rows_path(SWEEP, STUDY, "x4s1", "failed"), rows_table(failed, {
        "sweep": SWEEP, "study": STUDY, "trial_id": "t", "member": 0, "config_hash": "x4s1",
        "seed": 1, "status": "failed", "reason": "CUDA out of memory", "model.depth": 4.0,
        "wall_time_s": 1.0}))
    out = compact(window.uri, "reduced", SWEEP, STUDY, root, merge=True, members=at_preset)
    rows = load("reduced", SWEEP, STUDY, root)
    assert dict(rows.select("config_hash", "status").unique().iter_rows()) == {
        "x4s0": "ok", "x4s1": "ok", "x4s2": "ok"}
    assert json.loads((out / "provenance.json").read_text())["left_out"] == {
        "failed_where_committed": 1}
    # the command: a study without rows in the store (a window cut before it) is said and
    # skipped, the others committed; none with rows is an error
    argv = ["evidence", "--merge", "--from", window.uri, "--preset", "reduced",
            "--evidence", str(root)]
    assert icl([*argv, f"{SWEEP}/{STUDY}", f"{SWEEP}/cut_off"]) == 0
    out, err = capsys.readouterr()
    assert f"{SWEEP}/{STUDY}: 3 members" in out and "left out: 1 members that failed" in out
    assert f"warning: {SWEEP}/cut_off: no rows in {window.uri}" in err
    assert icl([*argv, f"{SWEEP}/cut_off"]) == 2
    assert "none of the 1 studies has rows" in capsys.readouterr().err
    # a catalog study is checked before any rows move: its name, its preset
    assert icl([*argv, "depth_scaling/least_square"]) == 2
    assert "depth_scaling/least_square: not a study of depth_scaling; valid choices: " \
        "least_squares," in capsys.readouterr().err
    # every study is checked before any rows move: a store of a catalog study's rows none of
    # which is its member at the preset (a --set run's) refuses the command, and the study
    # named before it is not written either; --any-members takes them as they are
    stray = Store(str(tmp_path / "stray"))
    write_member(stray, 4.0, 0)
    stray.write_rows(stray.rows_path("depth_scaling", "least_squares", "set_run"), rows_table(
        failed, {"sweep": "depth_scaling", "study": "least_squares", "trial_id": "t",
                 "member": 0, "config_hash": "set_run", "seed": 0, "status": "ok",
                 "reason": None, "model.depth": 4, "wall_time_s": 1.0}))
    fresh = tmp_path / "fresh"
    both = ["evidence", "--from", stray.uri, "--preset", "cpu", "--evidence", str(fresh),
            f"{SWEEP}/{STUDY}", "depth_scaling/least_squares"]
    assert icl(both) == 2
    assert "depth_scaling/least_squares: none of the store's 1 members is one of the " \
        "study's at preset 'cpu'" in capsys.readouterr().err
    assert not fresh.exists()
    assert icl([*both, "--any-members"]) == 0
    assert load("cpu", "depth_scaling", "least_squares", fresh)["config_hash"].to_list() \
        == ["set_run"]
    assert icl([*argv, "preconditioned_gd/fig1_sparse"]) == 2
    assert "--preset: preconditioned_gd/fig1_sparse has no 'reduced' preset" in \
        capsys.readouterr().err


def test_evidence_checks_a_grid_at_its_preset_and_takes_a_search_as_it_is():
    """members_at: a grid study's member hashes at the preset for n seeds (none past the
    seeds a grid plans: no plan to check against; a preset that cannot build them raises, so
    no check is skipped quietly), None for a search (the sampler's members) and for a sweep
    outside the catalog."""
    hashes = members_at("depth_scaling", "least_squares", "cpu")
    one, two = hashes(1), hashes(2)
    assert one and one < two  # seed 1 adds members
    assert hashes(10**6) is None
    with pytest.raises(ConfigError, match=r"num-samples.*--any-members takes the rows"):
        hashes(0)  # any other refusal is said, naming the way past it
    assert members_at("hpo_lr", "width_lr", "smoke") is None
    assert members_at("not_a_catalog_sweep", "x", "smoke") is None


def test_a_merge_of_another_random_stream_is_refused_by_name(tmp_path, capsys):
    """Rows drawn by counter, merged into evidence drawn by the generator, would pass for more
    seeds of the same stream. The merge is refused (the committed
    rows, from before train.draws, drew by generator); a replacement is the user's choice."""
    first, second, root = Store(str(tmp_path / "a")), Store(str(tmp_path / "b")), tmp_path / "ev"
    for seed in (0, 1):
        write_member(first, 4.0, seed)  # no train.draws column: the generator's
    compact(first.uri, "reduced", SWEEP, STUDY, root)
    write_member(second, 4.0, 2, **{"train.draws": "counter", "train.cuda_graph": True})
    argv = ["evidence", "--from", second.uri, "--preset", "reduced", f"{SWEEP}/{STUDY}",
            "--evidence", str(root)]
    assert icl([*argv, "--merge"]) == 2
    err = capsys.readouterr().err
    assert "by counter, the committed evidence's by generator: another random stream" in err
    assert sorted(load("reduced", SWEEP, STUDY, root)["seed"].to_list()) == [0, 1]  # untouched
    # checked before any rows move: a study named before the refused one is not written
    from icl_core.storage.store import rows_table

    row = [{"metric": "mse", "statistic": "median", "value": 0.1, "step": 100,
            "predictor": "model", "position": 20, "test_dist": "train"}]
    second.write_rows(second.rows_path(SWEEP, "other", "o0"), rows_table(row, {
        "sweep": SWEEP, "study": "other", "trial_id": "o0", "member": 0, "config_hash": "o0",
        "seed": 0, "status": "ok", "reason": None, "model.depth": 4.0, "wall_time_s": 1.0}))
    assert icl([*argv[:5], f"{SWEEP}/other", *argv[5:], "--merge"]) == 2
    assert "another random stream" in capsys.readouterr().err
    assert load("reduced", SWEEP, "other", root) is None
    assert icl(argv) == 0  # without --merge the store's rows replace the evidence
    assert load("reduced", SWEEP, STUDY, root)["train.draws"].to_list() == ["counter"]


@pytest.mark.parametrize("flags", [["--gpu-minutes", "10", "--preset", "nope"],
                                   ["--gpu-minutes", "10", "--only", "bogus"],
                                   ["--gpu-minutes", "10", "--only", "depth_scaling/least_square"]])
def test_a_bad_window_option_is_one_line(flags, capsys):
    assert icl(["plan", *flags]) == 2
    err = capsys.readouterr().err
    assert "valid choices" in err and err.count("\n") == 1, err
    assert "least_square" not in flags[-1] or "did you mean 'least_squares'?" in err


def test_a_merge_names_every_members_device_and_torch(tmp_path):
    """Evidence now keeps device_name and torch_version; rows committed before it did are
    named from their provenance (one CPU name and one GPU name at most tell them apart by
    device type), so a window's merged provenance names both devices (it read null before)."""
    def member(store: Store, seed: int, device: str, name: str, torch: str) -> None:
        write_member(store, 4.0, seed, device_type=device, device_name=name,
                     torch_version=torch)

    first, second, root = Store(str(tmp_path / "a")), Store(str(tmp_path / "b")), tmp_path / "ev"
    for seed in (0, 1):
        member(first, seed, "cpu", "cpu", "2.13.0+cpu")
    folder = compact(first.uri, "reduced", SWEEP, STUDY, root)
    rows = load("reduced", SWEEP, STUDY, root)
    assert rows["device_name"].to_list() == ["cpu", "cpu"]  # kept in evidence now
    rows.drop("device_name", "torch_version").write_parquet(folder / "rows" / "rows.parquet")
    member(second, 2, "cuda", "NVIDIA H100 80GB HBM3", "2.11.0+cu130")  # a window's seed
    compact(second.uri, "reduced", SWEEP, STUDY, root, merge=True)
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["device_name"] == "NVIDIA H100 80GB HBM3+cpu"
    assert prov["members_by_device"] == {"NVIDIA H100 80GB HBM3": 1, "cpu": 2}
    assert prov["torch"] == "2.11.0+cu130; earlier 2.13.0+cpu"  # the earlier members' from
    # their provenance (torch versions hold "+": joined whole, never split)
    assert load("reduced", SWEEP, STUDY, root)["device_name"].null_count() == 0
    # earlier CPU members under two names (platform.processor(): "x86_64" beside "cpu"): not
    # told apart by device type, so left unnamed; counted by type, the earlier names joined
    (folder / "provenance.json").write_text(json.dumps(
        {**prov, "device_name": "cpu+x86_64", "members_by_device": {"cpu": 1, "x86_64": 1},
         "torch": "2.12.0+cpu+2.13.0+cpu"}))
    load("reduced", SWEEP, STUDY, root).filter(pl.col("seed") < 2).drop(
        "device_name", "torch_version").write_parquet(folder / "rows" / "rows.parquet")
    compact(second.uri, "reduced", SWEEP, STUDY, root, merge=True)
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["device_name"] == "NVIDIA H100 80GB HBM3; earlier cpu+x86_64"
    assert prov["members_by_device"] == {"NVIDIA H100 80GB HBM3": 1, "cpu": 2}
    assert prov["torch"] == "2.11.0+cu130; earlier 2.12.0+cpu+2.13.0+cpu"  # none lost


def test_gpu_stacks_runs_the_parts_asked_and_refuses_others_naming_the_valid_ones(
        tmp_path, monkeypatch, capsys):
    """`--parts 4` runs the compiled stacks alone (a window's later call, parts 1-3 measured);
    an unknown part is refused, naming the valid ones. The parts' own work is stubbed here:
    each compiles or times for minutes (their dry run: `--device cpu --quick`)."""
    import gpu_stacks

    ran = []
    monkeypatch.setattr(gpu_stacks.signal, "signal", lambda *args: None)  # keep pytest's SIGTERM
    monkeypatch.setattr(gpu_stacks, "stack_scaling", lambda args, out: ran.append("3"))
    monkeypatch.setattr(gpu_stacks, "compiled_stacks", lambda args, out: ran.append("4"))
    assert gpu_stacks.main(["--device", "cpu", "--parts", "4", "--out", str(tmp_path)]) == 0
    assert ran == ["4"]
    assert gpu_stacks.main(["--device", "cpu", "--parts", "3", "--compile", "--out",
                            str(tmp_path)]) == 0
    assert ran == ["4", "3", "4"]
    with pytest.raises(SystemExit):
        gpu_stacks.main(["--parts", "5"])
    assert "--parts: '5'; valid choices: 1, 1b, 2, 3, 4 (--compile adds 4)" in \
        capsys.readouterr().err
