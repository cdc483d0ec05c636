"""A Tune search persists its Optuna study beside its rows: optuna.load_study opens it, each
trial names its member's config hash, the best settings are printed, a finished search says
so before anything starts, `--resume` starts a search never started, and `--resume
--num-samples N` extends a finished one to N trials."""

from __future__ import annotations

import json

import optuna
import polars as pl
import pytest

from icl.catalog import load_sweep
from icl_core.running.optuna_searcher import journal_storage, legacy_study_name, study_name


def test_tune_search_persists_resumes_and_extends(ray_session, tmp_path, capsys):
    sweep = load_sweep("hpo_lr")
    search = sweep.study("width_lr").for_preset("smoke")
    (point,) = search.points("smoke")
    argv = ["--preset", "smoke", "--storage", str(tmp_path), "--no-figures"]
    # --resume of a search never started starts it (a pool stopped before its searches is
    # finished by the same command with --resume; it stopped there with exit 2 before)
    assert sweep.main(argv + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert f"--resume: no search at {tmp_path}" in out and "yet; starting it" in out
    journal = tmp_path / "hpo_lr" / "width_lr" / "optuna.journal"
    assert journal.is_file()
    (summary,) = optuna.get_all_study_summaries(journal_storage(str(journal)))
    assert summary.study_name == f"hpo_lr/width_lr@{point.hash[:8]}"  # as the lines name it
    assert summary.user_attrs == {  # what optuna-dashboard lists beside the name
        "sweep": "hpo_lr", "study": "width_lr", "preset": "smoke", "objective": "loss",
        "direction": "minimize", "point_hash": point.hash, "point": {"model.width": 8},
        "code_version": summary.user_attrs["code_version"]}
    assert summary.user_attrs["code_version"] not in (None, "", "unknown")
    study = optuna.load_study(study_name=summary.study_name,
                              storage=journal_storage(str(journal)))
    assert len(study.trials) == 3 and all(t.state.is_finished() for t in study.trials)
    hashes = {t.user_attrs["config_hash"] for t in study.trials}
    rows = {p.stem for p in (tmp_path / "hpo_lr" / "width_lr" / "rows").glob("*.parquet")}
    assert rows == hashes  # every trial recorded, those ASHA stopped too (by the driver)
    statuses = {p.stem: pl.read_parquet(p)["status"][0] for p in
                (tmp_path / "hpo_lr" / "width_lr" / "rows").glob("*.parquet")}
    assert set(statuses.values()) <= {"ok", "diverged", "pruned"}
    for trial in study.trials:  # Optuna's state and the store's status agree (ASHA may stop
        # none of three: test_a_trial_asha_stops_... holds a stopped one to it)
        stored = statuses[trial.user_attrs["config_hash"]]
        assert (trial.state.name == "PRUNED") == (stored == "pruned"), (trial, stored)
    for trial in study.trials:  # each trial's hash is its sampled config's
        assert 0 <= trial.params["train.warmup_steps"] <= 5  # the smoke preset's space
    best = study.best_trial
    assert f"best loss {best.value:.4g} with {best.params}" in out
    assert f"config_hash {best.user_attrs['config_hash']}" in out

    # finished: said before anything starts, nothing run
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert f"@{point.hash[:8]}] finished: 3 of 3 Optuna trials" in out
    assert "Optuna search:" not in out and "storage:" not in out

    # extended to 5 trials over the same study
    assert sweep.main(argv + ["--resume", "--num-samples", "5"]) == 0
    out = capsys.readouterr().out
    assert "extending the search from 3 to 5 trials" in out
    study = optuna.load_study(study_name=study_name("hpo_lr", "width_lr", point),
                              storage=journal_storage(str(journal)))
    assert len(study.trials) == 5 and all(t.state.is_finished() for t in study.trials)
    assert not (journal.parent / "claims" / "optuna.journal.claim").exists()  # lease released


def test_preset_space_must_stay_within_its_steps():
    sweep = load_sweep("hpo_lr")
    search = sweep.study("width_lr")
    for preset in ("smoke", "cpu", "gpu", "paper"):  # every preset's extremes validate
        search.for_preset(preset).points(preset)
    from icl_core.spec.config import ConfigError

    with pytest.raises(ConfigError, match=r"train.warmup_steps: must be in \[0, steps=20\]"):
        search.points("smoke")  # the base space (warmup to 10k) at 20 smoke steps


def test_a_space_over_a_field_outside_the_hash_is_refused_by_name():
    """Its sampled values would be one member (one hash): the searcher would be fed one loss
    for different points. One value is a setting, not a space."""
    import dataclasses

    from icl_core.spec.config import ConfigError

    width_lr = load_sweep("hpo_lr").study("width_lr")
    for spec in (("choice", [64, 128]), ("int", 64, 128)):
        search = dataclasses.replace(width_lr, space={**width_lr.space, "eval.chunk": spec})
        with pytest.raises(ConfigError, match=r"space.eval.chunk: eval.chunk does not change "
                                              r"what a member computes"):
            search.for_preset("smoke").points("smoke")
    one = dataclasses.replace(width_lr, space={**width_lr.space, "eval.chunk": ("choice", [64])})
    assert one.for_preset("smoke").points("smoke")


def test_a_repeated_search_config_reports_its_stored_loss(ray_session, tmp_path, capsys):
    """A search that samples a config an earlier trial finished (here: a one-value space)
    trains nothing for it, and the trial still reports the stored final loss to the searcher
    (Tune refuses a result without its metric)."""
    import dataclasses

    from icl.sweep import Sweep

    width_lr = load_sweep("hpo_lr").study("width_lr")
    search = dataclasses.replace(
        width_lr, name="repeat", space={"train.batch_size": ("choice", [16])},
        presets={p: dataclasses.replace(pr, space={}) for p, pr in width_lr.presets.items()})
    sweep = Sweep("repeat_search", [search])
    argv = ["--preset", "smoke", "--num-samples", "2", "--storage", str(tmp_path),
            "--no-figures", "--max-concurrent", "1"]
    assert sweep.main(argv) == 0
    (point,) = search.points("smoke")
    study = optuna.load_study(study_name=study_name("repeat_search", "repeat", point), storage=journal_storage(
        str(tmp_path / "repeat_search" / "repeat" / "optuna.journal")))
    values = [t.value for t in study.trials]
    assert len(values) == 2 and values[0] == values[1]  # the same member, its stored loss
    assert len({t.user_attrs["config_hash"] for t in study.trials}) == 1


def test_a_journal_search_begun_under_the_old_name_goes_on_under_it(tmp_path, capsys):
    """A study named as before names said their sweep (`<search>-<full hash>`) is found and
    extended in place (the standalone path, no Ray: the name is chosen as a Tune search's),
    and labelled with the study attributes; no second study appears beside it."""
    sweep = load_sweep("hpo_lr")
    search = sweep.study("width_lr").for_preset("smoke")
    (point,) = search.points("smoke")
    journal = tmp_path / "hpo.journal"
    storage = journal_storage(str(journal))
    old = optuna.create_study(study_name=legacy_study_name("width_lr", point), storage=storage)
    old.optimize(lambda trial: sum(float(v) for v in search.suggest(trial).values()), n_trials=1)
    argv = ["--preset", "smoke", "--storage", str(tmp_path), "--optuna-journal", str(journal),
            "--num-samples", "1", "--no-figures"]
    assert sweep.main(argv) == 0
    (summary,) = optuna.get_all_study_summaries(journal_storage(str(journal)))
    assert summary.study_name == f"width_lr-{point.hash}" and summary.n_trials == 2
    attrs = summary.user_attrs
    assert (attrs["study"], attrs["preset"], attrs["objective"], attrs["direction"]) == \
        ("width_lr", "smoke", "loss", "minimize")
    assert attrs["point_hash"] == point.hash and attrs["point"] == {"model.width": 8}
    assert f"journal: {journal}" in capsys.readouterr().out


def test_a_search_another_driver_holds_is_refused_in_one_line_before_anything_runs(tmp_path):
    """The search's lease (`<sweep>/<search>/claims/optuna.journal.claim`) held by another live
    driver: starting the search (fresh or --resume) raises the one-line refusal naming the
    holder, when its lease expires and how to free it, and nothing of the search is read or
    written (no Ray needed). Once free, this driver holds the lease while the block runs and
    releases it after, an error included; a dead driver's lease on this host is taken over."""
    import os
    import subprocess
    import sys

    from icl_core.planning.resources import TrialResources
    from icl_core.running.search import run_search_tune, search_lease
    from icl_core.running.trial import TrialSpec
    from icl_core.spec.config import ConfigError
    from icl_core.storage.claims import Claims, Owner
    from icl_core.storage.store import Store

    search = load_sweep("hpo_lr").study("width_lr").for_preset("smoke")
    (point,) = search.points("smoke")
    other = Claims(Store(str(tmp_path)), "hpo_lr", "width_lr", Owner("far-host", 4242, "far"))
    assert other.take("optuna.journal") is None
    claim = tmp_path / "hpo_lr" / "width_lr" / "claims" / "optuna.journal.claim"
    assert claim.is_file()
    template = TrialSpec("hpo_lr", "width_lr", str(tmp_path), [point.to_dict()],
                         hashes=[point.hash], report_all=True)
    tune_dir = tmp_path / "hpo_lr" / "width_lr" / "tune"
    for resume in (False, True):
        with pytest.raises(ConfigError) as refused:
            run_search_tune(search, point, template, str(tune_dir), 6, 0, resume, None,
                            TrialResources(cpu=1, gpu=0.0), "hpo_lr/width_lr@x")
        line = str(refused.value)
        assert "\n" not in line and line.startswith("[hpo_lr/width_lr@x] search hpo_lr/width_lr")
        assert "far-host:4242 holds its lease (it expires at " in line and ", in 9m" in line
        assert f"icl claims hpo_lr --study width_lr --storage {tmp_path} --release" in line
    assert not tune_dir.exists() and not (claim.parent.parent / "optuna.journal").exists()
    assert json.loads(claim.read_text())["driver"] == "far"  # untouched

    other.release()
    journal = str(claim.parent.parent / "optuna.journal")
    with pytest.raises(RuntimeError):
        with search_lease(str(tmp_path), "hpo_lr", "width_lr", journal, "l"):
            assert json.loads(claim.read_text())["pid"] == os.getpid()  # ours while it runs
            raise RuntimeError("a crash mid-search")
    assert not claim.exists()  # released all the same

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = Claims(Store(str(tmp_path)), "hpo_lr", "width_lr",
                  Owner(Owner.this().host, int(gone.stdout), "dead"))
    assert dead.take("optuna.journal") is None  # a driver of this host that died holding it
    with search_lease(str(tmp_path), "hpo_lr", "width_lr", journal, "l"):
        assert json.loads(claim.read_text())["pid"] == os.getpid()  # taken over at once
    assert not claim.exists()


def smoke_searcher(tmp_path):
    """hpo_lr/width_lr's smoke point, a journal study "s" and a HashedOptunaSearch over it."""
    from icl_core.running.optuna_searcher import HashedOptunaSearch, open_study
    from icl_core.running.search import tune_space

    search = load_sweep("hpo_lr").study("width_lr").for_preset("smoke")
    (point,) = search.points("smoke")
    storage = journal_storage(str(tmp_path / "optuna.journal"))
    open_study(storage, "s", search.mode, {})
    return point, storage, HashedOptunaSearch(point, metric="loss", mode="min", seed=0,
                                              storage=storage, study_name="s",
                                              space=tune_space(search))


def test_a_trial_the_journal_finished_before_tune_saved_its_state_is_taken_as_finished(tmp_path):
    """A driver killed between the journal recording a trial's end and Tune saving its own
    state: the restored searcher sees that trial as running. Its next result and completion
    leave the study's trial as the journal holds it (Optuna refused the result before, so
    every --resume failed), and a trial still open in the study is told as usual."""

    point, storage, searcher = smoke_searcher(tmp_path)
    assert searcher.suggest("a") and searcher.suggest("b")
    study = optuna.load_study(study_name="s", storage=storage)
    first = study.trials[0].number
    study.tell(first, 1.5)  # recorded by the journal before the kill
    searcher.on_trial_result("a", {"loss": 9.0, "training_iteration": 3})
    searcher.on_trial_complete("a", {"loss": 9.0, "training_iteration": 3})
    searcher.on_trial_result("b", {"loss": 2.0, "training_iteration": 1})
    searcher.on_trial_complete("b", {"loss": 2.0, "training_iteration": 1, "member_done": True})
    values = {t.number: (t.state.name, t.value) for t in optuna.load_study(
        study_name="s", storage=storage).trials}
    assert values == {first: ("COMPLETE", 1.5), first + 1: ("COMPLETE", 2.0)}


def test_a_trial_asha_stops_is_pruned_in_the_study_and_in_the_store(tmp_path, caplog):
    """ASHA stops a trial by ending its process, which writes nothing: the searcher tells the
    study PRUNED (its reported values stay as intermediate ones; it told COMPLETE at the
    partial loss before, which TPE then took as a finished trial's), and the driver's callback
    records the member `pruned` with its last step and loss (the store held nothing of it, so
    the summary counted 0 pruned and a resumed search trained it again)."""
    from ray.tune.experiment import Trial

    from icl_core.running.ray_launch import StoppedRecords
    from icl_core.running.trial import TrialSpec
    from icl_core.running.tune_trainable import spec_from_config, trial_config
    from icl_core.storage.store import Store

    point, storage, searcher = smoke_searcher(tmp_path)
    sampled = searcher.suggest("a")
    for step, loss in ((10, 3.0), (20, 2.5)):
        searcher.on_trial_result("a", {"loss": loss, "step": step, "training_iteration": step // 10})
    searcher.on_trial_complete("a", {"loss": 2.5, "step": 20, "training_iteration": 2})
    (trial,) = optuna.load_study(study_name="s", storage=storage).trials
    assert trial.state.name == "PRUNED"  # its value Optuna's for a pruned trial: the last
    assert trial.intermediate_values == {1: 3.0, 2: 2.5} and trial.value == 2.5  # reported

    template = TrialSpec("hpo_lr", "width_lr", str(tmp_path / "store"), [point.to_dict()],
                         hashes=[point.hash], report_all=True)
    stopped = Trial("tune_trainable", config=trial_config(template, sampled), stub=True)
    stopped.update_last_result({"loss": 2.5, "step": 20, "member_done": False})
    member = spec_from_config(stopped.config).members[0]
    with caplog.at_level("INFO"):
        StoppedRecords().on_trial_complete(2, [stopped], stopped)
    store = Store(str(tmp_path / "store"))
    (h, (status, reason)), = store.statuses("hpo_lr", "width_lr").items()
    assert h == spec_from_config(stopped.config).hashes[0] and status == "pruned"
    assert reason == "stopped by the search's scheduler (ASHA) at step 20, training loss 2.5"
    assert store.final_train_loss("hpo_lr", "width_lr", h) == (20, 2.5)
    assert f"{h}: stopped by ASHA at step 20; recorded pruned" in caplog.text
    assert member["train"]["lr"] == sampled["train.lr"]  # the sampled config's member
    # the same config sampled again: its trial reports the stored member, ended early
    from icl_core.running.tune_trainable import ended_early, stored_result

    again = spec_from_config(stopped.config)
    assert stored_result(again, "pruned") == {"loss": 2.5, "step": 20, "member_done": False,
                                              "progress": 1.0}
    assert ended_early(stored_result(again, "pruned"))
    assert not ended_early(stored_result(again, "ok"))
    # a trial that ran to its end wrote its own rows and said so: nothing is written for it
    fresh = TrialSpec("hpo_lr", "width_lr", str(tmp_path / "fresh"), [point.to_dict()],
                      hashes=[point.hash], report_all=True)
    done = Trial("tune_trainable", config=trial_config(fresh, sampled), stub=True)
    done.update_last_result({"loss": 2.0, "step": 40, "member_done": True})
    StoppedRecords().on_trial_complete(3, [done], done)
    assert Store(str(tmp_path / "fresh")).statuses("hpo_lr", "width_lr") == {}
