"""The Optuna searcher of a Tune search, persisted: Tune's OptunaSearch over a JournalStorage
file beside the study's rows (`<storage>/<sweep>/<search>/optuna.journal`, one Optuna study
per grid point, named `<sweep>/<search>@<hash8>` as the run's lines name the search, standalone
searches alike), so `optuna.load_study(study_name=..., storage=JournalStorage(...))` opens it.
Each study carries user attributes that optuna-dashboard shows (`study_attributes`: sweep,
study, preset, objective and direction, the point's hash and grid values, code version), and
every Optuna trial its member's `config_hash` (the name of its row file). A study begun
before names said their sweep (`<search>-<full hash>`) keeps its name: `journal_study_name`
finds it, so such a search resumes and extends where it is. On a store on a URI (s3://, ...)
the journal file is mirrored (icl_core.storage.journal).
"""

from __future__ import annotations

from optuna.exceptions import UpdateFinishedTrialError
from ray.tune.search.optuna import OptunaSearch

from icl_core.common.validation import to_plain
from icl_core.running.tune_trainable import ended_early
from icl_core.spec.config import MemberConfig, flatten, with_settings
from icl_core.storage.journal import journal_exists, journal_storage  # noqa: F401  (used by search)
from icl_core.storage.store import uri_join

JOURNAL = "optuna.journal"


def journal_path(storage_uri: str, sweep: str, search: str) -> str:
    """Where a search's Optuna studies persist (a path, or a URI with its query options)."""
    return uri_join(storage_uri, sweep, search, JOURNAL)


def study_name(sweep: str, search: str, point: MemberConfig) -> str:
    """`<sweep>/<search>@<first 8 of the point's hash>`, as the run's lines name the search (its
    full hash is the study's `point_hash` attribute); `<search>@<hash8>` without a sweep."""
    return f"{sweep}/{search}@{point.hash[:8]}" if sweep else f"{search}@{point.hash[:8]}"


def legacy_study_name(search: str, point: MemberConfig) -> str:
    """The name of a study begun before names said their sweep."""
    return f"{search}-{point.hash}"


def journal_study_name(journal: str | None, sweep: str, search: str, point: MemberConfig) -> str:
    """The name of the point's study in `journal`: its legacy name where the journal holds a
    study by that name and none by today's (a search begun before: it resumes and extends
    under its own name), else today's."""
    import optuna

    name = study_name(sweep, search, point)
    if not journal_exists(journal):
        return name
    names = set(optuna.get_all_study_names(journal_storage(journal)))
    old = legacy_study_name(search, point)
    return old if old in names and name not in names else name


def study_attributes(sweep: str, search, point: MemberConfig, code_version: str | None) -> dict:
    """What optuna-dashboard shows of a search's study (its user attributes): where it belongs
    (sweep, study, preset), what it optimizes, which grid point and which code ran it."""
    flat = flatten(point.to_dict())
    keys = [k for key in search.grid for k in (key if isinstance(key, tuple) else (key,))]
    return {"sweep": sweep, "study": search.name, "preset": search.preset,
            "objective": search.metric, "direction": direction(search.mode),
            "point_hash": point.hash, "point": to_plain({k: flat.get(k) for k in keys}),
            "code_version": code_version}


def direction(mode: str) -> str:
    """Optuna's direction of a Tune mode ("min" / "max")."""
    return "minimize" if mode == "min" else "maximize"


def open_study(storage, name: str, mode: str, attributes: dict, **kwargs):
    """The Optuna study `name` in `storage` (created when missing), its user attributes set to
    `attributes` (only those that changed are written); kwargs: create_study's (sampler, ...)."""
    import optuna

    study = optuna.create_study(study_name=name, storage=storage, direction=direction(mode),
                                load_if_exists=True, **kwargs)
    held = study.user_attrs
    for key, value in attributes.items():
        if held.get(key, object()) != value:
            study.set_user_attr(key, value)
    return study


def sampled_hash(point: MemberConfig, params: dict) -> str:
    """The config hash of the member a trial trains: the point with the sampled settings."""
    return with_settings(point.to_dict(), params).hash


def finished_trials(path: str, name: str) -> int:
    """Optuna trials of a persisted study that ended (complete, pruned or failed); 0 when
    there is none yet."""
    import optuna

    if not journal_exists(path):
        return 0
    try:
        study = optuna.load_study(study_name=name, storage=journal_storage(path))
    except KeyError:  # the journal holds other points' studies only
        return 0
    return sum(1 for t in study.trials if t.state.is_finished())


class HashedOptunaSearch(OptunaSearch):
    """OptunaSearch that tags each Optuna trial with its member's config hash, tells the study
    PRUNED for a trial the scheduler stopped before its member finished, and takes a
    trial its Optuna study has already finished as finished: a driver killed after the
    journal recorded a trial's end but before Tune saved its own state restores that trial as
    running (Optuna refused its next result: UpdateFinishedTrialError, on every --resume)."""

    def __init__(self, point: MemberConfig, **kwargs):
        super().__init__(**kwargs)
        self._point = point

    def _ended(self) -> set[str]:
        """Restored trials the study had already finished (kept in the searcher's own state,
        which Tune pickles; a searcher pickled before it had none)."""
        return self.__dict__.setdefault("_ended_trials", set())

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        try:
            super().on_trial_result(trial_id, result)
        except UpdateFinishedTrialError:  # its outcome stands, as the journal holds it
            self._ended().add(trial_id)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self._ended():  # finished in the study before this driver restored it
            self._ended().discard(trial_id)
            self._completed_trials.add(trial_id)
            return
        if not error and ended_early(result):
            result = None  # stopped before its member finished (ASHA): Optuna's PRUNED, not
            # COMPLETE at a partial loss that TPE would take as a finished trial's
        super().on_trial_complete(trial_id, result, error)

    def suggest(self, trial_id: str):
        params = super().suggest(trial_id)
        if isinstance(params, dict) and trial_id in self._ot_trials:
            self._ot_trials[trial_id].set_user_attr("config_hash",
                                                    sampled_hash(self._point, params))
        return params
