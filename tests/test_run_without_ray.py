"""benchmarks/run_without_ray.py plans a sweep's grid studies without Ray and skips its
searches (which need Optuna + Tune), whatever attributes a search shares with a grid."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run_without_ray.py"


def load_script():
    spec = importlib.util.spec_from_file_location("run_without_ray", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sweep_with_a_search_plans_only_its_grid_studies(tmp_path):
    script = load_script()
    # deep_optimizers_plateau holds a grid (curriculum) and a search (lr_search, with a grid)
    specs = script.trials("deep_optimizers_plateau", "smoke", [], str(tmp_path), "auto",
                          "never", {}, {})
    assert specs and {s.study for s in specs} == {"curriculum"}
    assert (tmp_path / "deep_optimizers_plateau" / "curriculum" / "study.json").exists()


def run_script(*args, cwd=None, env=None):
    import subprocess
    import sys
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def test_a_time_limit_stops_the_pool_and_a_rerun_trains_what_was_cut_off(tmp_path):
    store = str(tmp_path / "store")
    common = ["depth_scaling", "--preset", "smoke", "--study", "ls_mixer_depth", "--storage",
              store, "--workers", "1", "--device", "cpu"]
    cut = run_script(*common, "--time-limit", "0")
    assert cut.returncode == 0, cut.stderr
    assert "2 of 2 trials not finished" in cut.stdout
    assert "goes on from their members' last checkpoints" in cut.stdout
    assert not list((tmp_path / "store").rglob("*.parquet"))  # nothing half-written
    full = run_script(*common)
    assert full.returncode == 0 and full.stdout.count("-> ok") == 2, full.stdout + full.stderr
    again = run_script(*common)
    assert "0 trials, 0 members" in again.stdout  # finished members are skipped


@pytest.mark.slow  # ~30 s; the default run cuts trials in process (test_store_checkpoints.py, bit
# for bit, three ways) and kills a Tune worker (test_reliability.py): `pytest -m slow`
def test_a_killed_run_goes_on_from_its_checkpoints_to_an_uninterrupted_runs_numbers(tmp_path):
    """The process group of a run killed (SIGKILL) once a member's checkpoint is in the store:
    the next run resumes that member from it, says so, writes the rows of an uninterrupted run
    bit for bit, and leaves no checkpoint behind; from a state with one weight moved it writes
    other numbers (so it went on from the state)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    import numpy as np
    import torch

    from analysis.reading.store import read_rows
    from icl_core.running.trial import run_trial

    script = load_script()
    # one str_attention member: 3140 steps (~4 s here), a checkpoint every 157
    common = ["sample_complexity", "--preset", "cpu", "--study", "str_attention", "--workers",
              "1", "--device", "cpu", "--seeds", "1", "--where", "model.name=mha_mlp",
              "--where", "task.n_points=32", "--where", "task.simple=False"]
    where = dict(w.split("=", 1) for w in common[common.index("--where"):][1::2])
    [spec] = script.trials("sample_complexity", "cpu", ["str_attention"], str(tmp_path / "whole"),
                           "cpu", "auto", {}, where, seeds=1)
    assert run_trial(spec) == {spec.hashes[0]: "ok"}

    store = tmp_path / "cut"
    env = {**os.environ, "ICL_CHECKPOINT_MIN_S": "0"}  # every checkpoint step written
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *common, "--storage", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # its pool's worker in its group
    folder = store / "sample_complexity" / "str_attention"
    deadline = time.time() + 120
    while not list(folder.glob("checkpoints/*.pt")) and proc.poll() is None \
            and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(folder.glob("checkpoints/*.pt")), proc.stdout.read().decode()
    assert not list(folder.glob("rows/*.parquet"))  # killed before the member finished
    # the same cut store with one weight of the saved state moved: a run that goes on from
    # the state writes other numbers (one that trained from step 0 would write the same)
    shutil.copytree(store, tmp_path / "moved")
    [saved] = (tmp_path / "moved").rglob("checkpoints/*.pt")
    state = torch.load(saved, weights_only=True)
    weight = next(v for v in state["run"]["model"].values() if v.is_floating_point())
    weight.view(-1)[0] += 1e-3
    torch.save(state, saved)

    again = run_script(*common, "--storage", str(store))
    assert again.returncode == 0, again.stdout + again.stderr
    step = int(re.search(r"-> ok \(resumed 1 at step (\d+)\)", again.stdout).group(1))
    assert 157 <= step < 3140 and step % 157 == 0
    assert not list(folder.glob("checkpoints/*"))  # removed with the member's rows
    # a kill between the rows and that removal leaves the file: planning the study clears it
    (folder / "checkpoints" / f"{spec.hashes[0]}.pt").write_bytes(b"state")
    assert script.trials("sample_complexity", "cpu", ["str_attention"], str(store), "cpu",
                         "auto", {}, where, seeds=1) == []
    assert not list(folder.glob("checkpoints/*"))

    def rows(storage):
        table, _ = read_rows(str(storage), "sample_complexity", "str_attention")
        return table.sort(["metric", "predictor", "statistic", "step", "position"],
                          nulls_last=True)

    whole, resumed = rows(tmp_path / "whole"), rows(store)
    assert whole.height == resumed.height > 0
    assert whole["metric"].to_list() == resumed["metric"].to_list()
    np.testing.assert_array_equal(np.array(resumed["value"].to_list(), dtype=float),
                                  np.array(whole["value"].to_list(), dtype=float))
    assert run_script(*common, "--storage", str(tmp_path / "moved")).returncode == 0
    moved = rows(tmp_path / "moved")
    assert moved["metric"].to_list() == whole["metric"].to_list()
    assert not np.array_equal(np.array(moved["value"].to_list(), dtype=float),
                              np.array(whole["value"].to_list(), dtype=float), equal_nan=True)


def test_a_gpu_window_script_packs_a_store_the_evidence_commit_reads(tmp_path):
    """benchmarks/gpu_evidence.sh on a CPU job: the archive it leaves unpacks to a store that
    `analysis.claims.evidence` commits with the study's members and provenance; checkpoints
    in the store stay there, out of the archive."""
    import json
    import os
    import subprocess
    import sys
    import tarfile

    from analysis.claims.evidence import compact

    out, store = tmp_path / "out", tmp_path / "store"
    # a checkpoint an earlier call left (a trial cut off) stays on the machine, unarchived
    left = tmp_path / "window" / "depth_scaling" / "ls_mixer_depth" / "checkpoints" / "a.pt"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"state")
    env = {**os.environ, "OUT": str(out), "STORE": str(tmp_path / "window"), "LIMIT": "120",
           "PY": sys.executable}
    run = subprocess.run(["bash", str(SCRIPT.parent / "gpu_evidence.sh"), "smoke",
                          "depth_scaling:ls_mixer_depth:cpu:1"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "store: 2 members finished (ok or diverged), 0 failed" in run.stdout
    # each job's live log is named by its whole path (to follow it); it comes back as jobs.log
    live = re.search(r"^started depth_scaling:ls_mixer_depth:cpu:1 \(pid \d+\) -> (/\S+/"
                     r"depth_scaling_cpu\.log) \(a line per finished trial", run.stdout, re.M)
    assert live, run.stdout
    jobs = (out / "jobs.log").read_text()
    assert jobs.startswith("== depth_scaling_cpu.log\n") and re.search(
        r"^\[ *[\d.]+s\] \d+/\d+ ls_mixer_depth: ", jobs, re.M), jobs
    with tarfile.open(out / "store.tgz") as archive:
        assert not [n for n in archive.getnames() if "checkpoints" in n]
        archive.extractall(store)
    assert left.read_bytes() == b"state"
    target = compact(str(store), "smoke", "depth_scaling", "ls_mixer_depth",
                     root=tmp_path / "evidence")
    provenance = json.loads((target / "provenance.json").read_text())
    assert provenance["members"] == 2 and provenance["preset"] == "smoke"


@pytest.mark.slow  # ~18 s, a window cut by its LIMIT; the script's archive and evidence stay in
# the default run (test_a_gpu_window_script_packs_a_store_the_evidence_commit_reads)
def test_a_window_ends_within_its_limit_archives_what_it_has_and_says_when_nothing_finished(
        tmp_path):
    """LIMIT is the whole script's wall (a lent machine ends a command at its own limit, and
    what is not archived by then stays there): the jobs stop ARCHIVE_S before it, counted from
    the script's start, their imports included. A job whose every member failed (CUDA asked of
    a machine without it) makes the exit status 1; its output comes back in the one jobs.log.
    A study name the sweep file lacks is refused, naming those it has."""
    import os
    import subprocess
    import sys
    import time

    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA (a CUDA job must fail)")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "STORE": str(tmp_path / "window"), "LIMIT": "24",
           "ARCHIVE_S": "6", "PY": sys.executable, "ALL": "1"}  # committed evidence too
    start = time.monotonic()
    run = subprocess.run(["bash", str(SCRIPT.parent / "gpu_evidence.sh"), "cpu",
                          "depth_scaling:ls_mixer_depth:cuda:1",  # fails at once here
                          "sequence_length:icl_prefix:cpu:1"],  # minutes: cut by the limit
                         capture_output=True, text=True, timeout=120, env=env)
    wall = time.monotonic() - start
    assert run.returncode == 1, run.stdout + run.stderr
    assert wall < 24 + 1, (wall, run.stdout)  # the previous script ran past it: its limit
    # began after its imports, and the archive came after it (28.1 s against LIMIT=25)
    assert "store: 0 members finished (ok or diverged), 24 failed" in run.stdout, run.stdout
    assert "== every trial failed in: depth_scaling:ls_mixer_depth:cuda:1" in run.stdout
    # states.tgz too when the cut member reached its first checkpoint (step 1000)
    states = ["states.tgz"] if list((tmp_path / "window").rglob("*.pt")) else []
    assert sorted(p.name for p in out.iterdir()) == ["jobs.log", *states, "store.tgz"]
    log = (out / "jobs.log").read_text()
    assert "every one of the 8 trials failed: no member finished" in log
    assert "time limit" in log and "trials not finished" in log
    with pytest.raises(SystemExit, match=r"--study: 'least_sqaures' is not a grid study of "
                       r"depth_scaling; valid choices: .*least_squares"):
        load_script().trials("depth_scaling", "smoke", ["least_squares", "least_sqaures"],
                             str(tmp_path / "s"), "cpu", "auto", {}, {})


@pytest.mark.slow  # a benchmark script's own check (~50 s, four windows): `pytest -m slow`
def test_a_window_in_one_call_measures_first_then_runs_the_evidence_left(tmp_path):
    """benchmarks/gpu_window.sh: the measurements capped at STACKS_S (here cut at 2 s, as a
    window past its cap would), then the evidence jobs for the seconds left of TOTAL; with too
    few left, the evidence is skipped and says why. GRAPH=1 stands only where the CUDA tests
    ran, not skipped. OUT and STATES are read from the caller's folder (the script moves to
    the checkout's root)."""
    import os
    import subprocess
    import sys
    import tarfile

    import torch

    script = SCRIPT.parent / "gpu_window.sh"
    carried = tmp_path / "keep" / "states.tgz"  # a state an earlier window brought back
    carried.parent.mkdir()
    (tmp_path / "x" / "y" / "checkpoints").mkdir(parents=True)
    (tmp_path / "x" / "y" / "checkpoints" / "0123.pt").write_bytes(b"state")
    with tarfile.open(carried, "w:gz") as archive:
        archive.add(tmp_path / "x", arcname="x")
    env = {**os.environ, "OUT": "out", "STATES": "keep/states.tgz",  # relative to the caller
           "STORE": str(tmp_path / "window"), "PY": sys.executable, "STACKS_S": "2",
           "STACKS_ARGS": "--device cpu --quick", "TOTAL": "200", "GRAPH": "1"}
    run = subprocess.run(["bash", str(script), "smoke", "depth_scaling:ls_mixer_depth:cpu:1"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"== STATES: 1 members' states from {carried}" in run.stdout, run.stdout
    assert (tmp_path / "window" / "x" / "y" / "checkpoints" / "0123.pt").read_bytes() == b"state"
    assert "gpu_stacks: ended with status 124" in run.stdout  # its cap
    if not torch.cuda.is_available():  # the CUDA tests passed only where they need no CUDA:
        # GRAPH=1 is not taken as checked
        assert "== GRAPH=1 dropped: the replay CUDA tests did not pass here" in run.stdout
    # the evidence gets what is left of TOTAL after the CUDA tests and the measurements
    log = (tmp_path / "out/cuda_tests.log").read_text()
    took = re.findall(r" in ([\d.]+)s", log)
    assert took, log  # pytest's summary line: the tests ran to their end
    tests_s = float(took[-1])
    left = int(re.search(r"== evidence: (\d+) s for depth_scaling", run.stdout).group(1))
    # 2 s of measurements; the slack: pytest's and the script's own start-up
    assert 200 - 2 - tests_s - 30 <= left <= 200 - 2 - int(tests_s), (left, tests_s)
    assert "store: 2 members finished (ok or diverged), 0 failed" in run.stdout and (tmp_path / "out/evidence/store.tgz").exists()
    short = subprocess.run(["bash", str(script), "smoke", "depth_scaling:ls_mixer_depth:cpu:1"],
                           capture_output=True, text=True, timeout=300,
                           env={**env, "TOTAL": "60", "OUT": str(tmp_path / "short")})
    assert short.returncode == 0 and "== evidence skipped:" in short.stdout
    # nothing left of TOTAL after the tests: the measurements are skipped (timeout 0 would
    # have run them without a limit)
    none = subprocess.run(["bash", str(script), "smoke"], capture_output=True, text=True,
                          timeout=300, env={**env, "TOTAL": "1", "OUT": str(tmp_path / "none")})
    assert none.returncode == 0 and "gpu_stacks: skipped, nothing left of TOTAL 1s" in none.stdout
    # a job whose every trial failed (CUDA asked of this CPU): the window's exit status is 1
    if not torch.cuda.is_available():
        failed = subprocess.run(["bash", str(script), "smoke",
                                 "depth_scaling:ls_mixer_depth:cuda:1"], capture_output=True,
                                text=True, timeout=300, env={**env, "ALL": "1", "STACKS_S": "1",
                                                             "OUT": str(tmp_path / "failed"),
                                                             "STORE": str(tmp_path / "s2")})
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "== every trial failed in: depth_scaling:ls_mixer_depth:cuda:1" in failed.stdout


@pytest.mark.slow  # two windows cut by their limits (~40 s): `pytest -m slow`
def test_a_cut_windows_states_come_back_and_the_next_window_goes_on_from_them(tmp_path):
    """gpu_evidence.sh brings back the unfinished members' states of its jobs' studies as
    states.tgz (within STATES_MAX_MB) beside store.tgz; the next window, on another machine (a
    fresh store with the first's rows), given them as STATES, resumes its cut member from its
    state; states over STATES_MAX_MB are not brought back, and it says so. OUT, STORE and
    STATES are taken from the caller's folder."""
    import os
    import subprocess
    import sys
    import tarfile

    def window(name: str, limit: int, **extra) -> subprocess.CompletedProcess:
        env = {**os.environ, "OUT": name, "STORE": f"{name}_store", "LIMIT": str(limit),
               "ARCHIVE_S": "4", "PY": sys.executable, "ALL": "1",
               "ICL_CHECKPOINT_MIN_S": "0", **extra}  # every checkpoint step written
        # str_attention's cpu members: ~4 s each here, a checkpoint every 157 steps
        return subprocess.run(["bash", str(SCRIPT.parent / "gpu_evidence.sh"), "cpu",
                               "sample_complexity:str_attention:cpu:1:1"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, env=env)

    other = tmp_path / "one_store" / "depth_scaling" / "ls_mixer_depth" / "checkpoints"
    other.mkdir(parents=True)  # a state of a study the window does not run: it stays there
    (other / "0123456789abcdef.pt").write_bytes(b"a state")
    first = window("one", 16)
    states = tmp_path / "one" / "states.tgz"
    assert first.returncode == 0 and states.exists(), first.stdout + first.stderr
    with tarfile.open(states) as tar:
        names = tar.getnames()
    assert names and all(re.fullmatch(r"\./sample_complexity/str_attention/checkpoints/"
                                      r"[0-9a-f]{16}\.pt", n) for n in names), names
    assert f"states: {len(names)} unfinished members' states in states.tgz" in first.stdout

    again = tmp_path / "two_store"  # another machine: the first window's rows, no states
    again.mkdir()
    with tarfile.open(tmp_path / "one" / "store.tgz") as tar:
        tar.extractall(again, filter="data")
    assert not list(again.rglob("*.pt"))
    (tmp_path / "two").mkdir()  # an earlier call's states.tgz in the same OUT: not brought back
    (tmp_path / "two" / "states.tgz").write_bytes(b"an earlier call's states")
    second = window("two", 24, STATES="one/states.tgz", STATES_MAX_MB="0")
    assert f"== STATES: {len(names)} members' states from {os.path.realpath(states)}" in \
        second.stdout, second.stdout
    log = (tmp_path / "two" / "jobs.log").read_text()
    assert re.search(r"-> ok \(resumed 1 at step [1-9]\d*\)", log), log
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["jobs.log", "store.tgz"]
    cut = list(again.rglob("*.pt"))  # the second window's own cut member, if its limit fell
    assert ("over STATES_MAX_MB (0 MiB) in all, not brought back" in second.stdout) == \
        bool(cut), second.stdout  # in one (~4 s each, one after another)


def test_a_carried_state_of_a_member_since_committed_is_dropped_when_planned(tmp_path):
    """run_without_ray plans past the members held elsewhere (`skip`: committed evidence):
    a state carried in for one of them (STATES) is removed, another member's stays."""
    from icl.catalog import load_sweep
    from icl_core.running.store_checkpoints import checkpoint_path
    from icl_core.storage.store import Store

    members = load_sweep("depth_scaling").study("ls_mixer_depth").members("smoke")
    held, kept = members[0].hash, members[1].hash
    store = Store(str(tmp_path))
    for config_hash in (held, kept):
        store.write_bytes(checkpoint_path(store, "depth_scaling", "ls_mixer_depth", config_hash),
                          b"a state")
    specs = load_script().trials("depth_scaling", "smoke", ["ls_mixer_depth"], str(tmp_path),
                                 "cpu", "auto", {}, {},
                                 skip={("depth_scaling", "ls_mixer_depth"): {held}})
    assert held not in {h for spec in specs for h in spec.hashes}
    folder = tmp_path / "depth_scaling" / "ls_mixer_depth" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [f"{kept}.pt"]
