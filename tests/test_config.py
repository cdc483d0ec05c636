"""Config validation: every bad input is refused with one message naming field and choices."""

from __future__ import annotations

import pytest
from conftest import tiny_member

from icl.sweep import Preset, Study
from icl_core.models import MIXERS, MODELS
from icl_core.spec.config import ConfigError, config_hash, resolve_member
from icl_core.tasks import TASKS


def base_study(**grid) -> Study:
    return Study(
        name="s",
        base=tiny_member(),
        grid=grid or {"model.depth": [1, 2], "seed": [0]},
        presets={p: Preset() for p in ("smoke", "cpu", "gpu", "paper")},
    )


@pytest.mark.parametrize(
    "raw, message",
    [
        (tiny_member(model__depth=0), "model.depth: must be >= 1, got 0"),
        (tiny_member(model__name="gpt"), "model.name: unknown model 'gpt'; valid choices: " + ", ".join(MODELS.names())),
        (tiny_member(task__name="nope"), "task.name: unknown task 'nope'; valid choices: " + ", ".join(TASKS.names())),
        (tiny_member(model__heads=3), "model.heads: must divide width=8, got 3"),
        (tiny_member(model__width="wide"), "model.width: expected an integer, got 'wide'"),
        (tiny_member(model__layer_norm="false"), "model.layer_norm: expected a boolean"),
        (tiny_member(model__colour=1), "model.colour: unknown field; valid fields: name, width"),
        (tiny_member(task__layout="zigzag"), "task.layout: 'zigzag' is not valid; valid choices: fixed_n, all_prefix"),
        (tiny_member(task__n_points=-4), "task.n_points: must be >= 1, got -4"),
        (tiny_member(train__optimizer="sgdx"), "train.optimizer: unknown 'sgdx'; valid choices: adam, adamw"),
        (tiny_member(train__checkpoint_every=15), "train.checkpoint_every: must be a positive multiple"),
        (tiny_member(eval__baselines=["conjugate_gradient"]),
         "eval.baselines: unknown 'conjugate_gradient'; valid choices: gd, gd_tuned, lsa_optimal, newton, ols"),
        (tiny_member(eval__grid=[{"n_pointz": 3}]), "eval.grid[0].n_pointz: unknown field"),
        ({**tiny_member(), "dtype": "float16"}, "dtype: 'float16' is not valid; did you mean 'bfloat16'? valid choices: float32, float64"),
        ({**tiny_member(), "device": "tpu"}, "device: 'tpu' is not valid"),
        ({**tiny_member(), "sed": 1}, "sed: unknown field"),
        (tiny_member(task__name="primitives", task__dim=4, task__n_points=6),
         "eval.baselines: task 'primitives' has no classical baselines; set eval.baselines=[]"),
        ({**tiny_member(), "task": {"name": "ls_features"}, "model": {"name": "baseconv_gd"}},
         "train.steps: model 'baseconv_gd' has no trainable weights; set train.steps=0"),
        (tiny_member(model__mixer="conv"), "model.mixer: unknown 'conv'; did you mean 'baseconv'? valid choices: " + ", ".join(sorted(MIXERS))),
        (tiny_member(model__construction_layers=2),
         "model.construction_layers: must be 0, 1 or 2 and below depth=2, got 2"),
        ({**tiny_member(), "model": {"name": "bigru"}},
         "model.name: 'bigru' reads the whole sequence, but task 'linear_regression' needs a "
         "causal model"),
        (tiny_member(task={"name": "qstr", "n_points": 8}, model={"name": "mha_mlp", "heads": 4},
                     eval__baselines=[]),
         "model.heads: must divide the token size D_e=30, got 4"),
        (tiny_member(task={"name": "qstr", "n_points": 3, "q": 4}, eval__baselines=[]),
         "task.q: q=4 distinct indices need q <= n_points=3"),
        (tiny_member(train__stop_loss=0.05),
         "train.stop_loss: needs epochs: set train.dataset_size > 0"),
        (tiny_member(eval__stop_below=0.1),
         "eval.stop_below: needs intermediate evaluations: set eval.every > 0"),
        (tiny_member(model={"name": "looped", "loops": 4, "window": 6}),
         "model.window: ΔT must be <= loops (T=4), got 6"),
        (tiny_member(task={"name": "rep_ar", "q": 0}), "task.q: must be >= 1, got 0"),
        (tiny_member(train__gamma=1.5), "train.gamma: must be in (0, 1], got 1.5"),
        (tiny_member(eval__n_prompts=0), "eval.n_prompts: must be >= 1, got 0"),
        (tiny_member(eval__gd_steps=[1, -10]), "eval.gd_steps: must be >= 0, got (1, -10)"),
        ({**tiny_member(), "seed": -1}, "seed: must be >= 0, got -1"),
    ],
)
def test_bad_member_configs_name_the_field(raw, message):
    with pytest.raises(ConfigError) as info:
        resolve_member(raw)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_defaults_filled_and_hash_stable():
    a = resolve_member(tiny_member())
    b = resolve_member(tiny_member(train__lr=1e-3))  # 1e-3 is the default: same config
    assert a == b and a.hash == b.hash
    assert resolve_member(tiny_member(model__depth=3)).hash != a.hash
    # device and reporting cadence do not change what is computed
    moved = resolve_member({**tiny_member(), "device": "cpu"})
    assert moved.hash == a.hash
    # a field added later, at its default, leaves every existing hash unchanged
    plain = a.to_dict()
    plain["model"]["future_field"] = 7
    assert config_hash(plain, {**a.defaults(), "model.future_field": 7}) == a.hash
    assert config_hash(plain, a.defaults()) != a.hash


def test_cli_overrides_are_typed():
    study = base_study()
    members = study.members("smoke", {"model.layer_norm": "false", "train.lr": "3e-4"})
    assert all(m.model.layer_norm is False for m in members)
    assert all(m.train.lr == 3e-4 for m in members)
    # an override of a grid axis collapses that axis
    assert [m.model.depth for m in study.members("smoke", {"model.depth": "5"})] == [5]
    for sets, message in [
        ({"model.layer_norm": "maybe"}, "expected a boolean (true/false)"),
        ({"model.width": "1.5"}, "expected an integer"),
        ({"model.nope": "1"}, "--set model.nope: unknown field"),
        ({"modle.width": "1"}, "--set modle.width: unknown field"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            study.members("smoke", sets)


def test_grid_expansion_and_bad_grids():
    members = base_study(**{"model.depth": [1, 2, 4], "seed": [0, 1]}).members("cpu")
    assert sorted((m.model.depth, m.seed) for m in members) == [
        (d, s) for d in (1, 2, 4) for s in (0, 1)
    ]
    with pytest.raises(ConfigError, match="grid.model.depth: must be a non-empty list"):
        base_study(**{"model.depth": []}).members("cpu")
    with pytest.raises(ConfigError, match="--preset: unknown 'huge'; valid choices: smoke, cpu, gpu, paper"):
        base_study().members("huge")


def test_a_configs_derived_key_is_computed_once_per_object_and_anew_for_a_changed_copy():
    """per_config (a plan asks each member's step shape, stacking and cost keys many times):
    the function runs once per config object; a dataclasses.replace is another object, with
    its own value; a pickled copy carries the value its fields give."""
    import dataclasses
    import pickle

    from icl_core.common.memo import per_config

    calls = []

    @per_config
    def width_key(member):
        calls.append(member.model.width)
        return f"w{member.model.width}"

    member = resolve_member(tiny_member())
    assert [width_key(member) for _ in range(3)] == ["w8"] * 3 and calls == [8]
    wider = dataclasses.replace(member, model=dataclasses.replace(member.model, width=16))
    assert width_key(wider) == "w16" and calls == [8, 16]
    copy = pickle.loads(pickle.dumps(member))
    assert copy == member and width_key(copy) == "w8" and calls == [8, 16]
    assert copy.hash == member.hash  # the memo is not a field: nothing else sees it
