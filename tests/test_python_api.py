"""The Python API (icl.api): the notebook example of docs/python_api.md runs on a real
Ray and returns rows; bad input raises the ConfigError whose line the command line prints;
the plan as data holds the numbers --dry-run prints; the API's defaults are the CLI's.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest

from icl.api import Options, make_options
from icl.cli import build_parser
from icl_core.planning.memory import human
from icl_core.spec.config import ConfigError
from sweeps.depth_scaling import SWEEP

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python_api.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_the_notebook_example_runs_and_returns_rows(ray_session, tmp_path, monkeypatch, capsys):
    """The doc's code block, exec'd as written in an empty folder (its storage "results" lands
    there): the notebook's own Ray is used and left running, and the rows come back."""
    blocks = python_blocks(DOC)
    assert len(blocks) == 1
    monkeypatch.chdir(tmp_path)
    space: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), space)  # noqa: S102  (our own docs)
    out = capsys.readouterr().out

    assert ray_session.is_initialized()  # the notebook's Ray was not shut down
    result, plan, rows = space["result"], space["plan"], space["rows"]
    assert result.ok and result.exit_status == 0
    assert result.storage == str(tmp_path / "results")
    assert result.summary == {"least_squares": {"ok": 4, "diverged": 0, "pruned": 0,
                                                "failed": 0, "missing": 0, "claimed": 0}}
    assert result.figures == [] and not (tmp_path / "figures").exists()  # figures=False
    assert rows.height > 0
    assert rows["study"].unique().to_list() == ["least_squares"]
    assert rows["status"].unique().to_list() == ["ok"]
    assert rows["config_hash"].n_unique() == 4 == plan.configs
    assert space["query_mse"]["model.depth"].to_list() == [1, 2]
    assert [s.study for s in plan.studies] == ["least_squares"] and plan.studies[0].finished == 0
    assert space["gpu"].configs > 100 and len(space["gpu"].studies) == len(SWEEP.studies)
    assert "--study: unknown 'least_squars'; did you mean 'least_squares'?" in out

    # a second run trains nothing and reports the same; rows of one study, by name
    again = SWEEP.run(study="least_squares", preset="smoke", storage="results", figures=False)
    assert "4 configs, 4 already finished, running 0" in capsys.readouterr().out
    assert again.summary == result.summary and again.rows("least_squares").height == rows.height
    with pytest.raises(ConfigError, match="study: unknown 'nope'; valid choices: least_squares"):
        again.rows("nope")


def _cli_error(argv: list[str], capsys) -> str:
    assert SWEEP.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err.removeprefix("error: ")


@pytest.mark.parametrize("kwargs, argv", [
    (dict(preset="smok"), ["--preset", "smok"]),
    (dict(study="least_squars"), ["--study", "least_squars"]),
    (dict(sets={"train.lr": "inf"}), ["--set", "train.lr=inf"]),
    (dict(sets={"model.wdth": 3}), ["--set", "model.wdth=3"]),
    (dict(num_samples=20000), ["--num-samples", "20000"]),
    (dict(pack=0), ["--pack", "0"]),
    (dict(seed=3), ["--seed", "3"]),
    (dict(address="nonsense"), ["--address", "nonsense"]),
    (dict(figures="{tmp}/a_file/figures"), ["--figures", "{tmp}/a_file/figures"]),
    (dict(storage="foo://bucket/icl"), ["--storage", "foo://bucket/icl"]),
], ids=lambda v: str(v)[:40] if isinstance(v, dict) else None)
def test_bad_input_raises_the_line_the_cli_prints(tmp_path, capsys, kwargs, argv):
    import ray

    (tmp_path / "a_file").write_text("not a folder")
    kwargs = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v
              for k, v in kwargs.items()}
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    storage = str(tmp_path / "r")
    base = {"preset": "smoke", "storage": storage, **kwargs}
    was_running = ray.is_initialized()
    with pytest.raises(ConfigError) as raised:
        SWEEP.run(**base)
    line = _cli_error(["--preset", "smoke", "--storage", storage, *argv], capsys)
    assert str(raised.value) == line
    assert ray.is_initialized() == was_running and not (tmp_path / "r").exists()


def test_api_only_choices_are_checked_like_argparse_does():
    with pytest.raises(ConfigError, match="--stack: unknown 'sometimes'; valid choices: "
                       "auto, always, never"):
        SWEEP.plan(preset="smoke", stack="sometimes")
    with pytest.raises(ConfigError, match="--logger: unknown 'tensorboard'; valid choices: "
                       "wandb, mlflow"):
        SWEEP.run(preset="smoke", loggers=["tensorboard"])
    with pytest.raises(TypeError, match="max_concurent"):
        SWEEP.run(preset="smoke", max_concurent=2)


def test_the_apis_defaults_are_the_command_lines():
    cli = vars(build_parser(SWEEP).parse_args([]))
    # --quiet / --verbose / --log-file set up logging (cli.logging_of), no option of the run:
    # from Python, the level of the "icl_core" logger (tests/test_logging.py)
    assert {k: cli.pop(k) for k in ("quiet", "verbose", "log_file")} == {
        "quiet": False, "verbose": False, "log_file": None}
    api = dataclasses.asdict(Options())
    assert cli == api
    assert dataclasses.asdict(make_options()) == dataclasses.asdict(Options())


def test_the_plan_as_data_holds_the_numbers_the_dry_run_prints(tmp_path, capsys):
    storage = str(tmp_path / "r")
    assert SWEEP.main(["--dry-run", "--preset", "smoke", "--storage", storage]) == 0
    printed = capsys.readouterr().out
    start = time.monotonic()
    plan = SWEEP.plan(preset="smoke", storage=storage)
    assert time.monotonic() - start < 60
    assert capsys.readouterr().out == ""  # quiet unless echo=True
    assert plan.text == printed
    assert [s.study for s in plan.studies] == [s.name for s in SWEEP.studies]
    assert sum(s.configs for s in plan.studies) == plan.configs
    assert sum(s.trials for s in plan.studies) == plan.trials
    assert sum(s.device_hours for s in plan.studies) == pytest.approx(plan.device_hours)
    total = printed.strip().splitlines()[-1]
    assert total.startswith(f"total: {plan.trials} trials in {len(plan.studies)} studies: "
                            f"{plan.device_hours:.3g} CPU-h of work")
    assert f"~{plan.wall_hours:.3g} h wall, utilisation {plan.utilisation:.0%}" in total
    for study in plan.studies:
        line = next(ln for ln in printed.splitlines()
                    if ln.startswith(f"depth_scaling/{study.study} [smoke]: "))
        assert f"{study.trials} trials ({study.configs} configs)" in line
        assert f"~{study.device_hours:.3g} CPU-h by the cost model" in line
        assert max(study.wall_hours, plan.wall_hours) == plan.wall_hours
    assert plan.frame().height == len(SWEEP.studies)

    # --json: the same numbers as one JSON document, stdout holding nothing else
    assert SWEEP.main(["--dry-run", "--preset", "smoke", "--storage", storage, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["total"]["trials"] == plan.trials and document["unit"] == "CPU-h"
    assert document["total"]["configs"] == plan.configs
    assert [s["study"] for s in document["studies"]] == [s.name for s in SWEEP.studies]
    lines = printed.splitlines()
    for study in document["studies"]:
        at = next(i for i, ln in enumerate(lines)
                  if ln.startswith(f"depth_scaling/{study['study']} [smoke]: "))
        sizes = study["members_per_trial"]
        how = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        assert (f"{study['trials']} trials ({study['configs']} configs), {how} member(s) per "
                f"trial") in lines[at]
        assert f"~{study['device_hours']:.3g} CPU-h by the cost model" in lines[at]
        assert f"~{study['gpu_minutes']:.1f} GPU-min on one GPU" in lines[at]
        assert lines[at + 1].startswith(f"  memory: ~{human(study['memory_bytes'])} (")
        assert (f"largest member {study['largest_member'][:8]}; fits "
                f"{human(study['memory_limit_bytes'])} ({study['memory_limit']})") in lines[at + 1]
        grid = "; ".join(f"{k} = {[tuple(x) for x in v] if ',' in k else v}"  # zipped: tuples
                         for k, v in study["grid"].items())
        assert lines[at + 2] == f"  grid: {grid}"
    assert not (tmp_path / "r").exists()  # a plan writes nothing


def test_sets_take_python_values(tmp_path):
    """A dict of sets: values other than strings are written as JSON, as --set takes them."""
    plan = SWEEP.plan(study="least_squares", preset="smoke", storage=str(tmp_path),
                      sets={"model.width": 16, "model.layer_norm": False,
                            "eval.gd_steps": [1, 10]})
    base = next(ln for ln in plan.text.splitlines() if ln.startswith("  base"))
    assert "model.width=16" in base and "model.layer_norm=False" in base
    assert "eval.gd_steps=[1, 10]" in base


def test_the_layers_below_the_face_take_typed_values_never_the_options():
    """Options stay the face's: planning takes a frozen PlanRequest, running a frozen Launch,
    and a run's outcomes come back as a RunReport; no function below the face has an `args` or
    `opts` parameter (the bag that used to travel down and be written on the way)."""
    import ast
    from pathlib import Path

    from icl_core.running.plans import Launch, PlanRequest

    opts = Options(preset="smoke", study="least_squares", set=["model.width=32"],
                   sweep=["model.depth=1,2"], pack=3, stack="never", trial_minutes=2.0,
                   logger=["mlflow"], no_dashboard=True)
    request, launch = opts.plan_request(), opts.launch()
    assert (request.preset, request.sets, request.sweeps, request.pack) == (
        "smoke", ("model.width=32",), ("model.depth=1,2",), 3)
    assert (launch.seed, launch.dashboard, launch.loggers, launch.target_s) == (
        0, False, ("mlflow",), 120.0)  # a search's seed defaults to 0 here, not in the options
    for frozen in (request, launch):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.seed = 7
    assert {f.name for f in dataclasses.fields(PlanRequest)} <= set(Options.__dataclass_fields__) \
        | {"sets", "sweeps"}
    assert Launch().target_s is None

    root = Path(__file__).resolve().parent.parent / "icl_core"
    bags = []  # (common/validation's `args` are a typing annotation's arguments)
    for path in [p for layer in ("running", "planning", "storage", "training", "spec")
                 for p in (root / layer).rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.args + node.args.kwonlyargs]
                bags += [f"{path.relative_to(root)}:{node.name}" for n in names
                         if n in ("args", "opts", "options")]
    assert bags == []
