"""Hyperparameter searches: Optuna through Ray Tune (OptunaSearch + ASHA), or Optuna alone.

    SEARCH = Search(
        name="width_lr",
        base={...},                                   # a member config, as in a Study
        space={"train.lr": ("loguniform", 1e-4, 1e-2),
               "train.batch_size": ("choice", [32, 64, 128]),
               "train.warmup_steps": ("int", 0, 500)},
        grid={"model.width": [32, 64, 128]},          # one search per grid point
        presets={"smoke": Preset(num_samples=3), ...},
    )

Every search trial is an ordinary member: it writes its rows to the same store as grid
trials (`rows/<config_hash>.parquet`). A trial ASHA stops early is recorded "pruned" twice
over: in the store by the driver (its last reported step and loss: the trial's own process
ends without writing) and in the Optuna study (PRUNED, its reported values kept as
intermediate ones), as standalone Optuna records its pruned trials. The objective is the member's training loss on fresh
prompts (online data, so it is a test loss), reported every `train.report_every` steps.
Reading the store back (a learning rate per width for a scaling sweep): analysis.reading.best.
One driver runs a search at a time: it holds the search's lease (`search_lease`) while it runs,
and a second driver, fresh or `--resume`, is refused with one line.
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any

from icl_core.spec.config import ConfigError, with_settings
from icl_core.spec.search import KINDS, Search  # noqa: F401  (the declaration, re-exported)
from icl_core.storage.signing import UntrustedState, keep_signed, verify
from icl_core.storage.store import Store, redacted, uri_join

logger = logging.getLogger(__name__)


def check_not_started(label: str, path: str) -> None:
    """A search run that exists at `path` is finished with --resume, never started again."""
    from ray import tune

    if tune.Tuner.can_restore(path):
        raise ConfigError(f"{label}: a search already exists at {redacted(path)}; pass "
                          "--resume to finish it (--resume --num-samples N: extend it to N "
                          "trials)")


@contextlib.contextmanager
def search_lease(storage: str, sweep: str, search: str, journal: str, label: str):
    """One driver per search: the lease on its journal (`<sweep>/<search>/claims/
    optuna.journal.claim`, icl_core.storage.claims.lease) taken before anything of the search
    is read, kept while the block runs, released after it (an error and Ctrl-C included; a
    driver that dies leaves it to expire), the journal uploaded first. Once the lease is ours
    the journal is read from the store again (another driver may have extended it since).
    Where another live driver holds it: a ConfigError, one line (`refusal`)."""
    from icl_core.running.optuna_searcher import JOURNAL
    from icl_core.storage.claims import Held, lease
    from icl_core.storage.journal import flush_journals, reopen

    store = Store(storage)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lease(store, sweep, search, JOURNAL))
        except Held as held:
            raise ConfigError(refusal(label, store, sweep, search, held)) from None
        reopen(journal)
        try:
            yield
        finally:
            flush_journals()  # every append uploaded while the lease is still ours


def refusal(label: str, store: Store, sweep: str, search: str, held) -> str:
    """The line that refuses a second driver of a search: who holds it, until when, what to do."""
    if "://" in store.uri:
        free = f"delete {store.uri.split('://', 1)[0]}://{held.path}"
    else:
        free = f"icl claims {sweep} --study {search} --storage {store.uri} --release"
    return (f"[{label}] search {sweep}/{search} is run by another driver: {held.holder} holds "
            f"its lease (it {held.expiry()}); one driver per search: wait for it to end (--resume "
            "then goes on from its trials); if that driver is gone, its lease is taken over once "
            f"it expires (at once on its own host), or free it now: {free}")


def run_search_tune(search, point, spec_template, tune_dir, num_samples, seed, resume,
                    max_concurrent, resources, label, loggers=()) -> None:
    """One Optuna search (OptunaSearch + ASHA) over Ray Tune for one grid point, its Optuna
    study persisted beside the rows (icl_core.running.optuna_searcher). `resume`: finish an interrupted run
    (Tuner.restore), then add trials until the study has `num_samples` (so `--resume
    --num-samples N` extends a finished search to N); a search never started starts. The
    search's lease is held throughout (`search_lease`: a second driver is refused, one line,
    before anything runs). Raises icl_core.running.ray_launch.Interrupted after Ctrl-C."""
    from icl_core.running.optuna_searcher import journal_path

    journal = journal_path(spec_template.storage, spec_template.sweep, search.name)
    with search_lease(spec_template.storage, spec_template.sweep, search.name, journal, label):
        _run_leased(search, point, spec_template, tune_dir, num_samples, seed, resume,
                    max_concurrent, resources, label, loggers, journal)


def _run_leased(search, point, spec_template, tune_dir, num_samples, seed, resume,
                max_concurrent, resources, label, loggers, journal) -> None:
    """run_search_tune with the search's lease held."""
    import time

    from ray import tune

    from icl_core.running.optuna_searcher import (
        finished_trials,
        journal_storage,
        journal_study_name,
        open_study,
        study_attributes,
    )
    from icl_core.running.ray_launch import fit

    trainable = _search_trainable(resources)
    sweep = spec_template.sweep
    name = journal_study_name(journal, sweep, search.name, point)  # a legacy name kept
    attributes = study_attributes(sweep, search, point,
                                  spec_template.provenance.get("code_version"))
    path = uri_join(tune_dir, f"search-{point.hash}")
    run_name, todo, done = f"search-{point.hash}", num_samples, 0
    restorable = tune.Tuner.can_restore(path)  # a remote listing on a URI store: asked once
    if resume and not restorable and not finished_trials(journal, name):
        # never started (e.g. a pool stopped before its searches): --resume starts it, as it
        # runs a grid's unfinished members, so one re-run command finishes every study
        logger.info(f"[{label}] --resume: no search at {redacted(path)} yet; starting it")
        resume = False
    if resume:
        if restorable:
            try:
                verify(path)  # before anything of it is unpickled (icl_core.storage.signing)
            except UntrustedState as exc:
                raise ConfigError(f"--resume: {exc}") from None
            with keep_signed(path):
                fit(tune.Tuner.restore(path, trainable, resume_unfinished=True,
                                       resume_errored=True), label)
        done = finished_trials(journal, name)
        if done >= num_samples:
            open_study(journal_storage(journal), name, search.mode, attributes)  # labelled
            return print_best(search, name, journal, label)
        run_name = f"search-{point.hash}-from{done}-{time.strftime('%Y%m%d-%H%M%S')}"
        todo = num_samples - done
        logger.info(f"[{label}] extending the search from {done} to {num_samples} trials")
    else:
        check_not_started(label, path)
    # an extension's sampler is seeded apart from the first run's, whose first draws it would
    # repeat (a repeated config is a finished member: it trains nothing and reports nothing)
    searcher = _searcher(search, point, name, attributes, seed + done, journal, max_concurrent)
    tuner = tune.Tuner(
        trainable,
        param_space=_trial_space(search, spec_template),
        tune_config=_search_tune_config(search, point, searcher, todo),
        run_config=_search_run_config(run_name, tune_dir, label, todo, loggers,
                                      spec_template.storage),
    )
    with keep_signed(uri_join(tune_dir, run_name)):  # --resume checks it before unpickling
        fit(tuner, label)
    print_best(search, name, journal, label)


def _search_trainable(resources):
    from ray import tune

    from icl_core.running.ray_launch import quiet
    from icl_core.running.tune_trainable import tune_trainable

    quiet()
    return tune.with_resources(tune_trainable,
                               tune.PlacementGroupFactory([resources.bundle()]))


def tune_space(search: Search) -> dict[str, Any]:
    """A search's space as Ray Tune distributions."""
    from ray import tune

    out = {}
    for key, spec in search.space.items():
        kind = spec[0]
        out[key] = {
            "loguniform": lambda s: tune.loguniform(s[1], s[2]),
            "uniform": lambda s: tune.uniform(s[1], s[2]),
            "int": lambda s: tune.randint(s[1], s[2] + 1),
            "choice": lambda s: tune.choice(list(s[1])),
        }[kind](spec)
    return out


def _trial_space(search, spec_template) -> dict:
    from icl_core.running.tune_trainable import trial_config

    return trial_config(spec_template, tune_space(search))


def _searcher(search, point, name, attributes, seed, journal, max_concurrent):
    """Tune's searcher over the point's Optuna study `name` in `journal`, the study made (or
    opened) first with its user attributes set (OptunaSearch then loads it)."""
    import optuna
    from ray.tune.search import ConcurrencyLimiter

    from icl_core.running.optuna_searcher import HashedOptunaSearch, journal_storage, open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our lines say what it does
    if "://" not in journal:
        import os

        os.makedirs(os.path.dirname(journal), exist_ok=True)
    storage = journal_storage(journal)
    open_study(storage, name, search.mode, attributes)
    searcher = HashedOptunaSearch(point, metric=search.metric, mode=search.mode, seed=seed,
                                  storage=storage, study_name=name)
    return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent) if max_concurrent \
        else searcher


def _search_tune_config(search, point, searcher, num_samples):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    # reports per trial: one per report_every steps, then the final one after the rows are
    # written; ASHA stops a trial at max_t, so max_t must count that final report too.
    max_t = math.ceil(point.train.steps / point.train.report_every) + 1
    return tune.TuneConfig(
        metric=search.metric, mode=search.mode, num_samples=num_samples, search_alg=searcher,
        scheduler=ASHAScheduler(max_t=max_t, grace_period=1,
                                reduction_factor=search.reduction_factor),
        reuse_actors=False, trial_dirname_creator=lambda trial: f"{trial.trial_id}",
    )


def _search_run_config(run_name, tune_dir, label, num_samples, loggers, storage):
    from ray import tune

    from icl_core.running.ray_launch import Progress, StoppedRecords
    from icl_core.running.tracking import tracking_callbacks

    return tune.RunConfig(
        name=run_name, storage_path=tune_dir,
        failure_config=tune.FailureConfig(max_failures=1),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        callbacks=[Progress(label, num_samples), StoppedRecords(),
                   *tracking_callbacks(loggers, storage, label.split("@")[0])], verbose=0,
    )


def print_best(search, name, journal, label) -> None:
    """The best finished trial of a persisted search (its Optuna study `name`): its value,
    settings and config hash (a journal on a URI uploaded first: icl_core.storage.journal)."""
    import optuna

    from icl_core.running.optuna_searcher import journal_storage
    from icl_core.storage.journal import flush_journals

    flush_journals()

    study = optuna.load_study(study_name=name, storage=journal_storage(journal))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    shown = redacted(journal)
    if not done:
        logger.info(f"[{label}] no finished trial yet (journal: {shown})")
        return
    best = study.best_trial
    opener = f"icl_core.storage.journal.journal_storage({shown!r})" if "://" in journal else \
        f"JournalStorage(JournalFileBackend({shown!r}))"
    logger.info(f"[{label}] best {search.metric} {best.value:.4g} with {best.params} "
                f"(config_hash {best.user_attrs.get('config_hash', '?')}; {len(done)} complete "
                f"of {len(study.trials)} trials; optuna.load_study(study_name={study.study_name!r}, "
                f"storage={opener}))")


def finished_points(sweep_name, search, points, storage_uri, num_samples) -> list:
    """The grid points whose persisted search already has `num_samples` finished trials;
    each is said, before anything starts."""
    from icl_core.running.optuna_searcher import finished_trials, journal_path, journal_study_name

    journal = journal_path(storage_uri, sweep_name, search.name)
    done = []
    for point in points:
        k = finished_trials(journal, journal_study_name(journal, sweep_name, search.name, point))
        if k >= num_samples:
            logger.info(f"[{sweep_name}/{search.name}@{point.hash[:8]}] finished: {k} of {num_samples} Optuna trials (journal: "
                        f"{redacted(journal)}); --resume --num-samples N extends it to N")
            done.append(point)
    return done


def run_search_optuna(search, point, journal, num_samples, seed, trial_runner,
                      sweep: str | None = None) -> Any:
    """Standalone Optuna (no Ray): trials run one after another in this process and the
    study persists in a JournalStorage file (open it with `optuna-dashboard <file>`), named
    and labelled as a Tune search's (icl_core.running.optuna_searcher; `sweep`: the sweep's
    name, without which the name is `<search>@<hash8>`)."""
    import optuna

    from icl_core.running.optuna_searcher import (
        journal_storage,
        journal_study_name,
        open_study,
        study_attributes,
    )
    from icl_core.storage.provenance import code_version

    name = journal_study_name(journal, sweep or "", search.name, point)
    study = open_study(journal_storage(journal), name, search.mode,
                       study_attributes(sweep, search, point, code_version()),
                       sampler=optuna.samplers.TPESampler(seed=seed),
                       pruner=optuna.pruners.SuccessiveHalvingPruner())

    def objective(trial):
        return trial_runner(with_settings(point.to_dict(), search.suggest(trial)), trial)

    study.optimize(objective, n_trials=num_samples)
    return study
