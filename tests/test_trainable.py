"""The one trial format: grids and searches give Tune {"spec": TrialSpec JSON} (a search adds its
sampled settings as dotted keys), read back by `spec_from_config`."""

from __future__ import annotations

import pytest
from conftest import tiny_member

from icl_core.running.trial import TrialSpec
from icl_core.running.tune_trainable import spec_from_config, trial_config
from icl_core.spec.config import ConfigError, resolve_member


def spec_of(*members: dict, **kw) -> TrialSpec:
    return TrialSpec("s", "st", "/tmp/none", [resolve_member(m).to_dict() for m in members], **kw)


def test_a_grid_trial_round_trips():
    spec = spec_of(tiny_member(), tiny_member(seed=1))
    back = spec_from_config(trial_config(spec))
    assert back == spec and back.hashes == spec.hashes and not back.report_all


def test_a_search_trial_is_its_spec_with_the_sampled_settings_set_and_hashed_again():
    spec = spec_of(tiny_member(), report_all=True)
    back = spec_from_config(trial_config(spec, {"train.lr": 0.0123, "model.depth": 3}))
    expected = resolve_member(tiny_member(train__lr=0.0123, model__depth=3))
    assert back.members == [expected.to_dict()] and back.hashes == [expected.hash]
    assert back.hashes != spec.hashes and back.report_all
    assert spec.members[0]["train"]["lr"] != 0.0123  # the template is not changed


def test_a_search_started_before_the_one_format_still_resumes():
    """Tune restores an old search's param space ({"base": ...}) from its own state."""
    spec = spec_of(tiny_member())
    old = spec_from_config({"base": spec.to_json(), "train.lr": 0.0123})
    new = spec_from_config(trial_config(spec_of(tiny_member(), report_all=True),
                                        {"train.lr": 0.0123}))
    assert old == new and old.report_all


def test_sampled_settings_need_a_single_member_and_valid_values():
    with pytest.raises(ValueError, match="one member"):
        spec_from_config(trial_config(spec_of(tiny_member(), tiny_member(seed=1)),
                                      {"train.lr": 0.1}))
    with pytest.raises(ConfigError):
        spec_from_config(trial_config(spec_of(tiny_member()), {"model.depth": -1}))
