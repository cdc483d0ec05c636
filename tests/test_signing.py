"""No code from storage: a search's Tune state is signed by its driver and `--resume` refuses
state it did not sign, before anything is unpickled."""

from __future__ import annotations

import pickle
import stat

import pytest

from icl import catalog
from icl_core.planning.resources import TrialResources
from icl_core.running.search import run_search_tune
from icl_core.running.trial import TrialSpec
from icl_core.spec.config import ConfigError
from icl_core.storage.signing import UntrustedState, key_path, sign, verify


class Planted:
    """A pickle that creates a marker file when unpickled (as a planted tuner.pkl would run
    anything)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_signed_state_verifies_and_a_planted_or_changed_pickle_does_not(tmp_path, home):
    folder = tmp_path / "search-x"
    (folder / "trial_1").mkdir(parents=True)
    (folder / "tuner.pkl").write_bytes(pickle.dumps({"a": 1}))
    (folder / "experiment_state-1.json").write_text("{}")
    (folder / "trial_1" / "error.pkl").write_bytes(pickle.dumps("e"))
    (folder / "trial_1" / "result.json").write_text("{}")  # not a pickle: not covered
    sign(str(folder))
    assert stat.S_IMODE(key_path().stat().st_mode) == 0o600
    verify(str(folder))
    (folder / "trial_1" / "result.json").write_text('{"changed": 1}')
    verify(str(folder))
    (folder / "searcher-state-2.pkl").write_bytes(pickle.dumps(Planted(tmp_path / "m")))
    with pytest.raises(UntrustedState, match="searcher-state-2.pkl"):
        verify(str(folder))
    sign(str(folder))
    (folder / "trial_1" / "error.pkl").write_bytes(pickle.dumps("other"))
    with pytest.raises(UntrustedState, match="trial_1/error.pkl"):
        verify(str(folder))


def test_resume_refuses_a_planted_tuner_pickle_and_never_unpickles_it(tmp_path, home):
    search = catalog.load_sweep("hpo_lr").study("width_lr").for_preset("smoke")
    (point,) = search.points("smoke")
    tune_dir = tmp_path / "tune"
    folder = tune_dir / f"search-{point.hash}"
    folder.mkdir(parents=True)
    marker = tmp_path / "MARKER"
    (folder / "tuner.pkl").write_bytes(pickle.dumps(Planted(marker)))
    template = TrialSpec("hpo_lr", "width_lr", str(tmp_path), [point.to_dict()],
                         hashes=[point.hash], report_all=True)
    for why in ("unsigned", "signed by another key"):
        with pytest.raises(ConfigError, match="refusing to restore"):
            run_search_tune(search, point, template, str(tune_dir), 1, 0, True, None,
                            TrialResources(cpu=1, gpu=0.0), "label")
        assert not marker.exists(), why
        sign(str(folder))
        key_path().write_bytes(b"another driver's key")
