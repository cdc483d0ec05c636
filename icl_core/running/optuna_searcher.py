"""The Optuna searcher of a Tune search, persisted: Tune's OptunaSearch over a JournalStorage
file beside the study's rows (`<storage>/<sweep>/<search>/optuna.journal`, one Optuna study
per grid point, named `<search>-<config hash of the point>` as standalone searches name
theirs), so `optuna.load_study(study_name=..., storage=JournalStorage(...))` opens it, and
every Optuna trial carries its member's `config_hash` (the name of its row file) as a user
attribute. On a store on a URI (s3://, ...) the journal file is mirrored (icl_core.storage.journal).
"""

from __future__ import annotations

from ray.tune.search.optuna import OptunaSearch

from icl_core.spec.config import MemberConfig, with_settings
from icl_core.storage.journal import journal_exists, journal_storage  # noqa: F401  (used by search)
from icl_core.storage.store import uri_join

JOURNAL = "optuna.journal"


def journal_path(storage_uri: str, sweep: str, search: str) -> str:
    """Where a search's Optuna studies persist (a path, or a URI with its query options)."""
    return uri_join(storage_uri, sweep, search, JOURNAL)


def study_name(search_name: str, point: MemberConfig) -> str:
    return f"{search_name}-{point.hash}"


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
    """OptunaSearch that tags each Optuna trial with its member's config hash."""

    def __init__(self, point: MemberConfig, **kwargs):
        super().__init__(**kwargs)
        self._point = point

    def suggest(self, trial_id: str):
        params = super().suggest(trial_id)
        if isinstance(params, dict) and trial_id in self._ot_trials:
            self._ot_trials[trial_id].set_user_attr("config_hash",
                                                    sampled_hash(self._point, params))
        return params
