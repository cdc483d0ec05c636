"""`--sweep KEY=V1,V2,...` (and KEY=LO..HI:log:N / :lin:N): a grid axis from the command line,
planned as a declared axis is: the members a declared grid already had keep their config hashes
(so a re-run with a wider sweep trains only the new ones), and bad input is one line, exit 2,
before Ray starts. Through the sweep files' own command line and `make_plans`, no mocks.
"""

from __future__ import annotations

import pytest

from icl.api import Options
from icl.catalog import load_sweep
from icl.cli import main
from icl.console import main as icl
from icl_core.running.plans import make_plans

SWEEP = load_sweep("depth_scaling")
STUDY = "least_squares"  # smoke grid: model.depth [1, 2] x seed [0, 1]


def members(tmp_path, preset="smoke", sweeps=(), sets=()):
    """The members the command line would plan (`--study least_squares --dry-run ...`)."""
    opts = Options(preset=preset, study=STUDY, dry_run=True, storage=str(tmp_path / "r"),
                   sweep=list(sweeps), set=list(sets))
    (plan,) = make_plans(SWEEP, opts.plan_request())
    return plan.members


def without(member, *keys):
    flat = member.to_dict()
    for key in keys:
        section, _, name = key.partition(".")
        flat[section] = {k: v for k, v in flat[section].items() if k != name}
    return flat


def test_a_swept_axis_replaces_the_declared_one_and_leaves_the_rest(tmp_path, capsys):
    declared = members(tmp_path)
    swept = members(tmp_path, sweeps=["model.depth=1,2,8"])
    assert sorted((m.model.depth, m.seed) for m in swept) == [
        (d, s) for d in (1, 2, 8) for s in (0, 1)]
    # every field but the swept one is the preset's, in every member
    reference = without(declared[0], "model.depth")
    assert all(without(m, "model.depth") | {"seed": 0} == reference | {"seed": 0}
               for m in swept)
    # the command line plans the same axis, and prints it
    argv = ["--preset", "smoke", "--study", STUDY, "--storage", str(tmp_path / "r"),
            "--sweep", "model.depth=1,2,8", "--dry-run"]
    assert main(SWEEP, argv) == 0
    out = capsys.readouterr().out
    assert "grid: model.depth = [1, 2, 8]; seed = [0, 1]" in out
    assert "(6 configs)" in out
    assert not (tmp_path / "r").exists()


def test_a_new_axis_adds_to_the_grid_and_a_second_sweep_multiplies_it(tmp_path):
    swept = members(tmp_path, sweeps=["model.width=8,16", "model.layer_norm=true,false"])
    assert sorted({(m.model.width, m.model.layer_norm) for m in swept}) == [
        (8, False), (8, True), (16, False), (16, True)]
    assert len(swept) == 4 * 4  # x the declared depth x seed grid


def test_members_the_declared_grid_had_keep_their_hashes(tmp_path):
    """A member's hash depends on its config only: the declared depth 1, 2 members are the
    same configs under a wider --sweep, so the store skips them on a re-run."""
    declared = {(m.model.depth, m.seed): m.hash for m in members(tmp_path)}
    swept = {(m.model.depth, m.seed): m.hash
             for m in members(tmp_path, sweeps=["model.depth=1,2,8"])}
    assert {k: swept[k] for k in declared} == declared
    assert len(set(swept.values())) == 6
    # a range's values too: the cpu preset's train.steps=4000 and train.lr=1e-3 members
    cpu = {(m.model.depth, m.seed): m.hash for m in members(tmp_path, "cpu")}
    by_steps = {(m.model.depth, m.seed): m.hash for m in members(
        tmp_path, "cpu", sweeps=["train.steps=1e3..4e3:lin:4"]) if m.train.steps == 4000}
    by_lr = {(m.model.depth, m.seed): m.hash for m in members(
        tmp_path, "cpu", sweeps=["train.lr=1e-5..1e-1:log:5"]) if m.train.lr == 1e-3}
    assert by_steps == cpu == by_lr


@pytest.mark.parametrize("text, values", [
    ("train.steps=1e3..1e5:log:5", [1000, 3162, 10000, 31623, 100000]),  # an int field: rounded
    ("train.steps=1..4:log:10", [1, 2, 3, 4]),  # rounded to the same integer: once
    ("train.steps=100..400:lin:4", [100, 200, 300, 400]),
    ("train.lr=1e-4..1e-2:log:3", [1e-4, 1e-3, 1e-2]),  # exactly, not 0.0009999999999999998
    ("train.lr=1e-4..5e-4:lin:5", [1e-4, 2e-4, 3e-4, 4e-4, 5e-4]),  # not 0.00030000000000000003
])
def test_ranges(tmp_path, text, values):
    key = text.split("=")[0].split(".")[1]
    swept = members(tmp_path, sweeps=[text])
    assert sorted({getattr(m.train, key) for m in swept}) == values
    assert all(type(v) is type(values[0]) for v in (getattr(m.train, key) for m in swept))


def test_values_are_parsed_as_set_parses_them(tmp_path):
    swept = members(tmp_path, sweeps=["model.layer_norm=false,true", 'eval.gd_steps=[1],[1,10]'])
    assert {m.model.layer_norm for m in swept} == {False, True}
    assert {m.eval.gd_steps for m in swept} == {(1,), (1, 10)}
    # the Python API takes the same axes as a dict of values
    plan = SWEEP.plan(study=STUDY, preset="smoke", storage=str(tmp_path / "r"),
                      sweeps={"model.depth": [1, 2, 8], "train.steps": "10..20:lin:2"})
    assert plan.configs == 12 and not (tmp_path / "r").exists()


def test_icl_config_shows_the_swept_grid(capsys):
    assert icl(["config", "depth_scaling", "--study", STUDY, "--preset", "smoke",
                "--sweep", "model.depth=1,2,8", "--sweep", "train.steps=1e3..1e5:log:5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"depth_scaling/{STUDY} [smoke]: 30 member configs")
    assert "  grid model.depth: [1, 2, 8]" in out
    assert "  grid train.steps: [1000, 3162, 10000, 31623, 100000]" in out


BAD = [
    (["--sweep", "model.wdth=1,2"], "--sweep model.wdth: unknown field of model 'transformer'; "
     "did you mean 'width'? valid fields: name, width, depth"),
    (["--sweep", "model.depth"], "--sweep 'model.depth': expected KEY=V1,V2,..."),
    (["--sweep", "model.depth="], "--sweep model.depth: no values; expected V1,V2,..."),
    (["--sweep", "model.depth=1,,2"], "--sweep model.depth: an empty value in '1,,2'"),
    (["--sweep", "model.depth=1,two"], "--sweep model.depth: expected an integer, got 'two'"),
    (["--sweep", "model.depth=1,2", "--sweep", "model.depth=3"],
     "--sweep model.depth: given twice ('1,2' and '3'); give each key once"),
    (["--sweep", "train.steps=1e3..1e5"], "--sweep train.steps: malformed range '1e3..1e5'; "
     "expected LO..HI:log:N or LO..HI:lin:N"),
    (["--sweep", "train.steps=1e3..x:log:3"], "--sweep train.steps: malformed range"),
    (["--sweep", "train.steps=1e3..1e5:log:many"], "--sweep train.steps: malformed range"),
    (["--sweep", "train.steps=1e3..1e5:geo:3"],
     "--sweep train.steps: unknown spacing 'geo'; valid choices: log, lin"),
    (["--sweep", "train.steps=1e3..1e5:log:1"],
     "--sweep train.steps: a range needs N >= 2 values"),
    (["--sweep", "train.lr=0..1e-2:log:3"],
     "--sweep train.lr: a :log range needs positive bounds, got '0..1e-2:log:3'"),
    (["--sweep", "train.lr=-1e-2..1e-2:log:3"], "--sweep train.lr: a :log range needs positive"),
    (["--sweep", "train.steps=1e5..1e3:log:3"], "--sweep train.steps: a range goes from a "
     "finite LO up to a larger HI"),
    (["--sweep", "model.mixer=1..3:lin:3"], "--sweep model.mixer: a range needs a numeric field"),
    (["--set", "model.depth=4", "--sweep", "model.depth=1,2"],
     "--sweep model.depth: also given to --set; give a key to one of them"),
    (["--num-samples", "2", "--sweep", "seed=0,1"],
     "--sweep seed: conflicts with --num-samples"),
    # a field left out of the hash: its values would be one member, the others dropped silently
    (["--sweep", "train.cuda_graph=false,true"],
     "--sweep train.cuda_graph: train.cuda_graph does not change what a member computes"),
    (["--sweep", "eval.chunk=64,128"], "values 64, 128 that differ only there would be one "
     "member run once"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=lambda v: " ".join(v)[:50]
                         if isinstance(v, list) else None)
def test_bad_sweeps_are_one_line_and_exit_2_before_ray(tmp_path, capsys, argv, message):
    import ray

    was_running = ray.is_initialized()
    base = ["--preset", "smoke", "--study", STUDY, "--storage", str(tmp_path / "r"),
            "--dry-run"]
    assert main(SWEEP, base + argv) == 2
    out, err = capsys.readouterr()
    err = err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert message in err, err
    assert "Traceback" not in out + err
    assert ray.is_initialized() == was_running
    assert not (tmp_path / "r").exists()


def test_a_declared_grid_over_a_field_outside_the_hash_is_refused_and_one_value_passes():
    from icl_core.spec.config import ConfigError
    from icl_core.spec.study import expand

    (study,) = [s for s in SWEEP.studies if s.name == STUDY]
    base = study.base
    with pytest.raises(ConfigError, match=r"grid.device: device does not change what"):
        expand(base, {"device": ["cpu", "cuda"]})
    with pytest.raises(ConfigError, match=r"grid.train.steps,eval.chunk: eval.chunk does not"):
        expand(base, {("train.steps", "eval.chunk"): [(2, 64), (2, 128), (4, 64)]})
    # one value (or one value repeated, as a collapsed axis is) is a setting, not an axis; in a
    # zipped axis beside a field that tells its members apart, it goes with them
    assert len(expand(base, {"train.cuda_graph": [True]})) == 1
    assert len(expand(base, {("train.steps", "eval.chunk"): [(2, 64), (4, 64)]})) == 2
    spaced = expand(base, {("train.steps", "train.checkpoint_every"): [(4000, 2000),
                                                                       (8000, 4000)]})
    assert [(m.train.steps, m.train.checkpoint_every) for m in spaced] == [(4000, 2000),
                                                                           (8000, 4000)]


def test_a_zipped_axis_and_a_search_are_not_swept(tmp_path, capsys):
    storage = ["--storage", str(tmp_path / "r"), "--dry-run", "--preset", "smoke"]
    assert main(load_sweep("preconditioned_gd"), storage + ["--sweep", "seed=0,1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--sweep seed: part of the zipped grid axis (seed, task_seed)" in err, err
    assert main(load_sweep("hpo_lr"), storage + ["--sweep", "model.depth=1,2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --sweep: a search's space is searched, not swept; use --set")
    assert "\n" not in err
    assert icl(["config", "hpo_lr", "--preset", "smoke", "--sweep", "model.depth=1,2"]) == 2
    assert "a search's space is searched, not swept" in capsys.readouterr().err


def test_seeds_per_setting_follow_a_seed_zipped_one_for_one():
    """--num-samples on a grid (and `icl plan --seeds`, run_without_ray --seeds): Ahn et al.'s
    seed goes with task_seed one for one ((s, s): a new task per seed), so N seeds are (0, 0)
    ... (N-1, N-1) at every setting (they were a second seed axis crossed with the zipped
    one: 6 members a setting for 2); a plain seed axis is replaced; a seed zipped with other
    values is refused, naming the axis."""
    from icl_core.spec.config import ConfigError
    from icl_core.spec.study import seed_axis

    study = next(s for s in load_sweep("preconditioned_gd").studies if s.name == "lsa_dim")
    members = study.members("cpu", num_samples=2)
    assert len(members) == 3 * 2
    assert sorted({(m.seed, m.task_seed) for m in members}) == [(0, 0), (1, 1)]
    assert seed_axis({"seed": [5, 6], "model.depth": [1]}, 3) == {"seed": [0, 1, 2],
                                                                  "model.depth": [1]}
    # a --set task_seed=7 holds the task: N seeds on that one task
    one_task = study.members("cpu", {"task_seed": "7"}, num_samples=3)
    assert sorted({(m.seed, m.task_seed) for m in one_task}) == [(0, 7), (1, 7), (2, 7)]
    # ... whatever the preset's tuples (smoke's one (0, 0) would also read as one for one)
    held = study.members("smoke", {"task_seed": "0"}, num_samples=3)
    assert sorted({(m.seed, m.task_seed) for m in held}) == [(0, 0), (1, 0), (2, 0)]
    with pytest.raises(ConfigError, match=r"goes with task_seed \(the zipped axis \(seed, "
                       r"task_seed\) = \[\(0, 1\), \(1, 2\)\]\)"):
        seed_axis({("seed", "task_seed"): [(0, 1), (1, 2)]}, 2)
