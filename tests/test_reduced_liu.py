"""The reduced presets of Liu et al.'s studies (issue #35; docs/REPRODUCTION.md, Liu): they
plan, and each compares what its verdict needs, on >= 3 seeds; the searches that chose them
plan too. Dry runs only: seconds."""

from __future__ import annotations

from icl.catalog import load_sweep

REDUCED = ("ls_mixer_depth", "features_depth", "explicit_gradient")


def _study(sweep, name):
    return next(s for s in sweep.studies if s.name == name)


def test_the_reduced_liu_presets_plan_what_their_verdicts_compare(tmp_path, capsys):
    sweep = load_sweep("depth_scaling")
    argv = ["--preset", "reduced", "--storage", str(tmp_path), "--dry-run"]
    assert sweep.main(argv) == 0
    out = capsys.readouterr().out
    assert all(f"depth_scaling/{name} [reduced]" in out for name in REDUCED)
    for name in REDUCED:
        members = _study(sweep, name).members("reduced")
        assert len({m.seed for m in members}) >= 3, name
        cpu = {m.hash for m in _study(sweep, name).members("cpu")}
        assert not {m.hash for m in members} <= cpu, f"{name}: reduced is the cpu preset"
    ls = _study(sweep, "ls_mixer_depth").members("reduced")
    assert {m.model.mixer for m in ls} == {"attention", "baseconv"}
    assert {m.model.depth for m in ls if m.model.mixer == "attention"} == {4, 8}
    grad = _study(sweep, "explicit_gradient").members("reduced")
    assert ("baseconv", False, 3) in {(m.model.mixer, m.model.layer_norm, m.model.depth)
                                      for m in grad}
    assert {"attention"} < {m.model.mixer for m in grad}
    features = _study(sweep, "features_depth").members("reduced")
    assert {m.task.features for m in features} >= {0, 2}
    assert sweep.main(argv + ["--study", "least_squares"]) == 2  # no reduced preset there
    assert not any(tmp_path.iterdir())


def test_the_searches_behind_the_reduced_liu_presets_plan(tmp_path, capsys):
    sweep = load_sweep("depth_scaling_reduced")
    for preset in ("smoke", "reduced"):
        assert sweep.main(["--preset", preset, "--storage", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ls_probe [reduced]" in out and "gradient_lr_search [reduced]" in out
    assert not any(tmp_path.iterdir())
