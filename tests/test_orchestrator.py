"""The orchestrator end to end on the session Ray: every sweep file, extend, driver-kill
resume, packing, Optuna searches (Tune and standalone), the resource planner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import polars as pl
import pytest
from conftest import tiny_member

from analysis.reading.best import best_settings
from icl import catalog
from icl_core.planning.cost import SHARED_SLOWDOWN
from icl_core.planning.resources import (
    gpu_fraction,
    gpu_seconds,
    member_resources,
    plan_trials,
    step_flops,
)
from icl_core.running.plans import PlanRequest, make_plans, plan_gpu_seconds
from icl_core.spec.config import resolve_member
from icl_core.spec.search import Search
from icl_core.storage.store import Store
from icl_core.training.stack_rules import stack_key

ROOT = Path(__file__).resolve().parent.parent


def rows_of(storage, sweep, study) -> pl.DataFrame:
    return pl.read_parquet(Path(storage) / sweep / study / "rows" / "*.parquet")


def smoke_studies(searches: bool) -> list[tuple[str, object]]:
    """(file, study) of every sweep file: its grid studies, or its Optuna searches."""
    return [(name, study) for name in catalog.sweep_names()
            for study in catalog.load_sweep(name).studies
            if isinstance(study, Search) == searches]


def test_every_sweep_files_smoke_grids_run_as_one_pool(ray_session, tmp_path):
    """Every grid study of every sweep file, smoke preset, as one pool (the catalog's --run:
    one Tune run, start-up paid once); the files' searches: the slow test below."""
    storage = tmp_path / "r"
    assert {"depth_scaling", "heads_scaling", "width_scaling", "training_length",
            "sequence_length", "sample_complexity", "hpo_lr"} <= set(catalog.sweep_names())
    grids = smoke_studies(searches=False)
    assert len(grids) >= 35
    argv = ["--run", "--preset", "smoke", "--only", *[f"{n}/{s.name}" for n, s in grids],
            "--storage", str(storage), "--no-figures", "--pack", "4"]
    assert catalog.main(argv) == 0  # packed: start-up paid once per 4 members
    for name, study in grids:
        finished = Store(str(storage)).finished(name, study.name)
        assert finished == {m.hash for m in study.members("smoke")}, f"{name}/{study.name}"
    rows = rows_of(storage, "depth_scaling", "least_squares")
    # the planner gave each small trial a fifth of a (logical) GPU, and Ray assigned it
    assert set(rows["gpu_share"]) == {0.2} and set(rows["assigned_gpu"]) == {0.2}
    assert rows["trial_id"].n_unique() == 1 and set(rows["member"]) == {0, 1, 2, 3}
    steps = rows_of(storage, "training_length", "least_squares_steps")
    assert sorted(set(zip(steps["train.steps"], steps["train.step_size"], strict=True))) == [
        (10, 1), (20, 1)]
    curve = rows_of(storage, "sample_complexity", "least_squares_dim").filter(
        (pl.col("metric") == "mse") & (pl.col("predictor") == "model"))
    assert sorted(set(curve["step"])) == [10, 20]  # the test curve, recorded during training
    # every figure a study names is drawn from these real rows (the paper figures' plumbing)
    from analysis.regenerate import regenerate

    for name in ("depth_scaling", "width_scaling", "heads_scaling", "training_length",
                 "sequence_length", "sample_complexity"):
        for study in catalog.load_sweep(name).studies:
            if study.figure:
                (summary,) = regenerate(name, study.name, str(storage), str(tmp_path / "f"),
                                        n_boot=20)
                assert summary["paths"] and all(Path(p).exists() for p in summary["paths"]), \
                    f"{name}/{study.name}: no {study.figure} figure"
    grad = rows_of(storage, "depth_scaling", "explicit_gradient")
    assert {"mse", "w_mse"} <= set(grad["metric"])  # gradient error and iterative inference


@pytest.mark.slow
def test_every_sweep_files_smoke_searches_run(ray_session, tmp_path):
    storage = tmp_path / "r"
    searches = smoke_studies(searches=True)
    assert {n for n, _ in searches} >= {"hpo_lr", "deep_optimizers_plateau"}
    for name, study in searches:
        argv = ["--preset", "smoke", "--study", study.name, "--storage", str(storage),
                "--no-figures"]
        assert catalog.load_sweep(name).main(argv) == 0, f"{name}/{study.name}"
        assert Store(str(storage)).finished(name, study.name), f"{name}/{study.name} left no rows"


def test_dry_run_of_every_paper_preset_lists_thousands(capsys):
    assert catalog.main(["--preset", "paper", "--plan-gpus", "8"]) == 0
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    total = int(last.split("]: ", 1)[1].split()[0])
    assert total >= 1000 and "GPU-h of work; on 8 GPU(s), one pool longest first" in last
    makespan, bound = (float(x.split()[0]) for x in (last.split("~")[1], last.split("bound ")[1]))
    assert makespan >= bound > 0  # the schedule never beats its lower bound
    assert "depth_scaling/least_squares [paper]: " in out and "trials (30 configs)" in out
    assert "0.2 GPU" in out and "1 GPU" in out  # small and large models get different shares


def test_dry_run_of_every_gpu_preset_fits_20_minutes_a_study_on_one_h100(capsys):
    """The issue's sizing rule: every grid study's gpu preset is estimated at <= 20 min on one
    H100-class GPU (stacked), with >= 3 seeds, and is bigger than its cpu preset: more training
    FLOPs, and a longer estimate wherever the cpu preset's members can stack at all (a cpu
    preset whose members cannot stack, e.g. with step skipping, pays the GPU's launch floor per
    member). A study whose cpu preset is already the paper's setting keeps it. (Searches are
    estimated with every trial run to its end, an upper bound ASHA cuts: not held to it.)"""
    def work(plan):
        return sum(step_flops(m) * m.train.steps for m in plan.members)

    estimates = {}
    for name in catalog.sweep_names():
        sweep = catalog.load_sweep(name)
        plans = {p: make_plans(sweep, PlanRequest(preset=p)) for p in ("cpu", "gpu")}
        for cpu, gpu in zip(plans["cpu"], plans["gpu"], strict=True):
            if gpu.is_search:
                continue
            label = f"{name}/{gpu.study.name}"
            seconds = estimates[label] = plan_gpu_seconds(gpu)
            assert seconds <= 20 * 60, f"{label}: gpu preset estimated at {seconds / 60:.1f} min"
            if {m.hash for m in cpu.members} == {m.hash for m in gpu.members}:
                assert gpu.study.presets["cpu"] == gpu.study.presets["paper"], label
                continue
            assert len({m.seed for m in gpu.members}) >= 3, f"{label}: fewer than 3 seeds"
            assert work(gpu) > work(cpu), label
            if all(stack_key(m) for m in cpu.members):
                assert seconds > plan_gpu_seconds(cpu), label
    assert len(estimates) >= 30
    assert catalog.main(["--preset", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "depth_scaling/least_squares [gpu]: " in out and " GPU-min on one GPU -- " in out
    assert "all sweep files [gpu]: " in out
    assert "on one GPU by the cost model" in out.splitlines()[-1]


def test_gpu_estimate_grows_with_steps_seeds_and_loops():
    one = resolve_member(tiny_member(train__steps=1000))
    longer = resolve_member(tiny_member(train__steps=4000))
    assert gpu_seconds([longer]) > gpu_seconds([one]) > 0
    # seeds of one config share a step (stacked) where that pays: a small model's eight seeds
    # cost less than eight times one
    seeds = [resolve_member({**tiny_member(train__steps=1000), "seed": s}) for s in range(8)]
    assert gpu_seconds([one]) < gpu_seconds(seeds) \
        < 8 * gpu_seconds([one])
    # distinct configs run side by side, each on its fifth of the GPU at SHARED_SLOWDOWN: a
    # shorter one beside a longer one adds nothing; ten fill the GPU 2.5 times over
    deeper = resolve_member(tiny_member(train__steps=1000, model__depth=8))
    assert gpu_seconds([one, deeper]) == gpu_seconds([deeper]) > gpu_seconds([one])
    ten = [resolve_member(tiny_member(train__steps=1000, train__lr=1e-4 * (i + 1)))
           for i in range(10)]
    assert gpu_fraction(one) == 0.2 and SHARED_SLOWDOWN == 1.25
    assert gpu_seconds(ten) == pytest.approx(10 * 0.2 * 1.25 * gpu_seconds([one]))
    # a looped block's weights count once per loop iteration (T0 without gradients a third)
    loop = {"name": "looped", "width": 16, "heads": 2, "layers": 1, "loops": 4, "window": 4}
    looped = [resolve_member(tiny_member(model={**loop, "loops": t, "window": min(t, 4)}))
              for t in (4, 8, 16)]
    flops = [step_flops(m) for m in looped]
    assert flops[0] < flops[1] < flops[2]
    block = resolve_member(tiny_member(model={"name": "transformer", "width": 16, "heads": 2,
                                              "depth": 1}))
    assert step_flops(looped[0]) > 3 * step_flops(block)  # 4 passes of about one block's work
    assert gpu_seconds(looped[:1]) < gpu_seconds(looped[2:])


def test_extend_runs_only_new_points_clears_leftovers_and_counts_resumable_members(
        ray_session, tmp_path, capsys):
    sweep = catalog.load_sweep("width_scaling")
    base = ["--preset", "smoke", "--storage", str(tmp_path), "--no-figures"]
    assert sweep.main(base + ["--num-samples", "1"]) == 0
    assert "2 configs, 0 already finished, running 2" in capsys.readouterr().out
    # what a run killed between a member's rows and the removal of its checkpoint leaves:
    # the next run's planner removes it (icl_core.running.store_checkpoints.clear_leftovers);
    # a new member's file that does not load is counted, then set aside with a warning
    study = tmp_path / "width_scaling" / "least_squares_width"
    finished = {p.stem for p in (study / "rows").glob("*.parquet")}
    planned = {m.hash for m in sweep.study("least_squares_width").members("smoke",
                                                                         num_samples=2)}
    new = sorted(planned - finished)[0]
    (study / "checkpoints").mkdir(exist_ok=True)  # the first run made it
    for config_hash in (min(finished), new):
        (study / "checkpoints" / f"{config_hash}.pt").write_bytes(b"not a state")
    assert sweep.main(base + ["--num-samples", "2", "--dry-run"]) == 0
    assert "(a run trains the other 2, 1 with a checkpoint to go on from)" in \
        capsys.readouterr().out
    assert sweep.main(base + ["--num-samples", "2"]) == 0
    assert "4 configs, 2 already finished, running 2 (1 with a checkpoint to go on from)" in \
        capsys.readouterr().out
    assert {p.stem for p in (study / "rows").glob("*.parquet")} == planned
    assert not list((study / "checkpoints").iterdir())  # set aside (a warning), then trained


def test_packed_trial_writes_the_same_rows_as_unpacked(ray_session, tmp_path):
    """Two members in one trial, or one trial each run one after another in the same
    (reused) trial worker: the same numbers."""
    sweep = catalog.load_sweep("width_scaling")
    for sub, pack, at_once in (("one", "1", "1"), ("packed", "2", "2")):
        argv = ["--preset", "smoke", "--storage", str(tmp_path / sub), "--no-figures",
                "--pack", pack, "--max-concurrent", at_once]
        assert sweep.main(argv) == 0
    key = ["config_hash", "metric", "statistic", "predictor", "step", "position", "infer_iter"]
    one = rows_of(tmp_path / "one", "width_scaling", "least_squares_width").sort(key)
    packed = rows_of(tmp_path / "packed", "width_scaling", "least_squares_width").sort(key)
    assert one.height == packed.height > 0
    assert one["value"].to_list() == packed["value"].to_list()
    assert set(packed["member"]) == {0, 1} and packed["trial_id"].n_unique() == 1
    # the one-by-one trials ran in reused workers: Tune records each result's process id
    results = list((tmp_path / "one").glob("**/tune/*/*/result.json"))
    pids = {json.loads(line)["pid"] for f in results for line in f.read_text().splitlines()}
    assert len(results) >= 2 and len(pids) < len(results)


def test_driver_killed_mid_sweep_then_rerun_completes_each_trial_once(ray_session, tmp_path):
    storage = tmp_path / "r"
    args = ["--preset", "smoke", "--storage", str(storage), "--no-figures",
            "--set", "train.steps=300", "--max-concurrent", "1"]
    address = ray_session.get_runtime_context().gcs_address
    driver = subprocess.Popen(
        [sys.executable, str(ROOT / "sweeps" / "depth_scaling.py"), "--address", address,
         "--study", "least_squares", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    rows_dir = storage / "depth_scaling" / "least_squares" / "rows"
    deadline = time.time() + 240
    while time.time() < deadline and not (rows_dir.exists() and any(rows_dir.glob("*.parquet"))):
        assert driver.poll() is None, "driver ended before it could be killed"
        time.sleep(0.5)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    done_before = len(list(rows_dir.glob("*.parquet")))
    assert 1 <= done_before < 4

    sweep = catalog.load_sweep("depth_scaling")
    assert sweep.main(["--study", "least_squares", *args]) == 0
    members = sweep.study("least_squares").members("smoke", {"train.steps": "300"})
    assert {p.stem for p in rows_dir.glob("*.parquet")} == {m.hash for m in members}
    rows = rows_of(storage, "depth_scaling", "least_squares")
    curve = rows.filter(pl.col("metric") == "train_loss")
    assert curve.group_by("config_hash", "step").len()["len"].max() == 1  # nothing twice
    assert curve.group_by("config_hash").len()["len"].to_list() == [30] * 4  # nothing missing
    # the killed run's member states (in the store) went with their members' rows
    assert not list((storage / "depth_scaling" / "least_squares").glob("checkpoints/*"))


def test_ctrl_c_ends_a_pool_before_its_searches(ray_session, tmp_path):
    """Tune catches Ctrl-C and returns from fit(); the command must end there (exit 130,
    one line saying how to finish), not go on to start the pool's search."""
    storage = tmp_path / "r"
    driver = subprocess.Popen(
        [sys.executable, "-m", "icl.catalog", "--run", "--preset", "smoke",
         "--only", "depth_scaling/least_squares", "hpo_lr", "--storage", str(storage),
         "--address", ray_session.get_runtime_context().gcs_address, "--no-figures",
         "--num-samples", "1", "--pack", "2", "--set", "train.steps=3000"],
        # one grid trial of two ~6 s members: stopped, it is the last, with nothing pending
        # (Tune marks it TERMINATED: only the signal handler it leaves says it was stopped)
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        for line in driver.stdout:  # the pool's first trial has started
            if "1 running" in line:
                break
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 130, err[-2000:]
    assert "interrupted (Ctrl-C): what finished is stored; the same command run again " \
           "finishes the rest" in err, err[-1500:]
    assert not (storage / "hpo_lr" / "width_lr" / "optuna.journal").exists()  # never started
    assert "width_lr@" not in out


@pytest.mark.slow  # ~12 s; test_search_persist runs a search to the store, resumes, extends
def test_optuna_search_through_tune_lands_in_the_store(ray_session, tmp_path, capsys):
    sweep = catalog.load_sweep("hpo_lr")
    argv = ["--preset", "smoke", "--storage", str(tmp_path), "--no-figures"]
    assert sweep.main(argv + ["--num-samples", "2"]) == 0
    rows = rows_of(tmp_path, "hpo_lr", "width_lr")
    assert rows["config_hash"].n_unique() >= 1 and set(rows["model.width"]) == {8}
    assert rows["train.lr"].min() >= 1e-4 and rows["train.lr"].max() <= 1e-2
    best = best_settings(str(tmp_path), "hpo_lr", "width_lr", by="model.width",
                         params=["train.lr", "train.batch_size"])
    assert set(best) == {8} and 1e-4 <= best[8]["train.lr"] <= 1e-2
    # a second start (the preset's 3 trials) refuses to overwrite the search, before Ray;
    # --resume restores it (Tuner.restore) and adds the third trial; then it is finished
    assert sweep.main(argv) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert sweep.main(argv + ["--resume"]) == 0
    assert "extending the search from 2 to 3 trials" in capsys.readouterr().out
    assert sweep.main(argv) == 0
    assert "finished: 3 of 3 Optuna trials" in capsys.readouterr().out


def test_standalone_optuna_journal_opens_with_load_study(tmp_path):
    sweep = catalog.load_sweep("hpo_lr")
    journal = tmp_path / "hpo.journal"
    argv = ["--preset", "smoke", "--storage", str(tmp_path), "--optuna-journal", str(journal)]
    assert sweep.main(argv) == 0
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.study_name.startswith("hpo_lr/width_lr@")  # named as the Tune path names it
    assert summary.user_attrs["sweep"] == "hpo_lr" and summary.user_attrs["preset"] == "smoke"
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    assert len(study.trials) == 3
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert finished and study.best_value == min(t.value for t in finished)
    stored = Store(str(tmp_path)).finished("hpo_lr", "width_lr")
    assert len(stored) == 3  # complete and pruned trials both left their rows


def test_planner_shares_gpus_by_model_size_and_packs():
    small = resolve_member(tiny_member())
    big = resolve_member(tiny_member(model__width=1024, model__depth=48, train__batch_size=512))
    assert step_flops(big) > 1e11 > 1e9 > step_flops(small)
    assert gpu_fraction(small) == 0.2 and gpu_fraction(big) == 1.0
    assert member_resources(small, cluster_gpus=0, cpus=1).gpu == 0  # no GPU in the cluster
    on_cpu = resolve_member({**tiny_member(), "device": "cpu"})
    assert member_resources(on_cpu, cluster_gpus=4, cpus=1).gpu == 0  # pinned to CPU
    seeds = [resolve_member({**tiny_member(), "seed": s}) for s in range(5)]
    trials = plan_trials([*seeds, big], cluster_gpus=4, cpus=1, pack=2)
    assert [len(t.members) for t in trials] == [2, 2, 1, 1]
    assert [t.res.gpu for t in trials] == [0.2, 0.2, 0.2, 1.0]
    assert all(t.seconds > 0 for t in trials)
    with pytest.raises(ValueError):
        plan_trials(seeds, 4, 1, pack=0)


def test_fixed_packing_puts_members_that_stack_side_by_side():
    w8, w16 = (tiny_member(model={"name": "transformer", "width": w, "depth": 1, "heads": 1})
               for w in (8, 16))
    mixed = [resolve_member({**cfg, "seed": s}) for s in range(2) for cfg in (w8, w16)]
    widths = [[m.model.width for m in t.members] for t in plan_trials(mixed, 1, 1, 2, 2)]
    assert widths == [[8, 8], [16, 16]]
    assert [[m.model.width for m in t.members] for t in plan_trials(mixed, 0, 1, 2, 2)] == [
        [8, 16], [8, 16]]  # CPU trials do not stack: order kept
