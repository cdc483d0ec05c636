"""The `icl` command in this process (tests/test_install.py runs it installed), and what
`--dry-run` shows of each study: grid values, base config off its defaults, what is finished."""

from __future__ import annotations

import json

from icl.catalog import load_sweep
from icl.console import main as icl
from icl_core.running.trial import TrialSpec, run_trial


def test_icl_config_lists_each_field_with_type_default_and_doc(capsys):
    assert icl(["config", "depth_scaling", "--study", "least_squares", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("depth_scaling/least_squares [smoke]: 4 member configs")
    assert "  grid model.depth: [1, 2]" in out
    lines = {line[2:].split()[0]: line for line in out.splitlines()[1:]
             if line[:2] in ("* ", "  ") and not line.startswith("  grid ")}
    # off its default (smoke width 8 vs 64): marked, with type, default and the field's comment
    assert lines["model.width"].startswith("* model.width")
    assert "8  [int, default 64]  embedding size D" in lines["model.width"]
    assert "grid [1, 2]  [int, default 12]" in lines["model.depth"]
    # a field documented by the comment lines above it
    assert "finite-dataset (epoch) training" in lines["train.dataset_size"]
    assert "[Literal['fixed_n', 'all_prefix'], default 'fixed_n']" in lines["task.layout"]


def test_icl_list_and_unknown_commands(capsys):
    assert icl(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert "transformer: A GPT-2-style transformer" in out and "lsa: " in out
    assert icl(["list", "studies"]) == 0
    assert "hpo_lr/width_lr (search): " in capsys.readouterr().out
    assert icl(["lst"]) == 2
    assert "error: icl: unknown command 'lst'; did you mean 'list'?" in capsys.readouterr().err
    assert icl(["plan", "depth_scalng"]) == 2
    assert "did you mean 'depth_scaling'?" in capsys.readouterr().err


def test_icl_version_and_list_as_json_agree_with_the_text(capsys):
    from pathlib import Path

    import tomllib

    import icl_core

    assert icl(["--version"]) == 0
    assert capsys.readouterr().out == f"icl-sweeps {icl_core.__version__}\n"
    project = tomllib.loads((Path(icl_core.__file__).parent.parent / "pyproject.toml")
                            .read_text())["project"]
    assert "version" in project["dynamic"] and "version" not in project  # written once
    for what in ("studies", "sweeps", "models"):
        assert icl(["list", what]) == 0
        text = capsys.readouterr().out.splitlines()
        assert icl(["list", what, "--json"]) == 0
        items = json.loads(capsys.readouterr().out)
        assert len(items) == len(text) > 3
    assert {"sweep": "hpo_lr", "study": "width_lr", "kind": "search"}.items() <= next(
        i for i in items_of(icl, capsys, "studies") if i["study"] == "width_lr").items()


def items_of(icl, capsys, what):
    assert icl(["list", what, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_dry_run_shows_grid_base_diff_and_what_is_finished(tmp_path, capsys):
    sweep = load_sweep("depth_scaling")
    members = sweep.study("least_squares").members("smoke")
    run_trial(TrialSpec("depth_scaling", "least_squares", str(tmp_path),
                        [members[0].to_dict()], hashes=[members[0].hash]))  # one finished
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", str(tmp_path)]
    assert icl(["plan", "depth_scaling", *argv]) == 0
    out = capsys.readouterr().out
    assert "  grid: model.depth = [1, 2]; seed = [0, 1]" in out
    base = next(line for line in out.splitlines() if line.startswith("  base (off the"))
    assert "model.width=8" in base and "train.steps=20" in base and "model.depth" not in base
    assert "task.dim" not in base  # at its default
    assert f"  finished: 1 of 4 configs in {tmp_path} (a run trains the other 3)" in out
    # --num-samples replaces the seed axis: the grid line shows the seeds the plan has
    assert icl(["plan", "depth_scaling", *argv, "--num-samples", "3"]) == 0
    out = capsys.readouterr().out
    assert "  grid: model.depth = [1, 2]; seed = [0, 1, 2]" in out
    assert f"  finished: 1 of 6 configs in {tmp_path}" in out
    # --json: the same plan as one JSON document, nothing else on stdout
    assert icl(["plan", "depth_scaling", *argv, "--num-samples", "3", "--json"]) == 0
    captured = capsys.readouterr()
    (study,) = json.loads(captured.out)["studies"]
    assert captured.err == ""
    assert study["grid"] == {"model.depth": [1, 2], "seed": [0, 1, 2]}
    assert (study["sweep"], study["study"], study["kind"]) == ("depth_scaling", "least_squares",
                                                              "grid")
    assert study["configs"] == 6 and study["finished"] == 1
    assert f"{study['trials']} trials (6 configs)" in out


def test_json_after_bad_input_is_nothing_on_stdout_and_one_line_on_stderr(capsys):
    assert icl(["plan", "depth_scaling", "--preset", "smoke", "--set", "model.widht=8",
                "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and \
        captured.err.count("\n") == 1


def test_icl_help_lists_every_command_and_each_answers_its_own_help(capsys):
    """One `icl` for every command: each in `icl --help`, each parsed under its own name."""
    import pytest

    from icl.console import USAGE

    assert icl(["--help"]) == 0
    usage = capsys.readouterr().out
    commands = ["run", "plan", "list", "config", "regenerate", "levels", "claims", "compact",
                "backtest", "verdicts", "adaptive", "catalog", "evidence", "forecast",
                "scoreboard", "cost"]
    for command in commands:
        assert f"    icl {command}" in usage and f"    icl {command}" in USAGE, command
    assert "    icl --version" in usage  # the last usage line, before the --json paragraph
    for option in ("--merge", "--any-members", "--statistic", "--rates", "--call-minutes"):
        assert option in usage, option
    for command in ("catalog", "evidence", "forecast", "scoreboard", "regenerate", "verdicts",
                    "backtest", "cost"):
        with pytest.raises(SystemExit) as exc:
            icl([command, "--help"])
        assert exc.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: icl {command}"), command
    # a command whose first argument is a sweep: its usage lines, not "name a sweep"
    for command in ("run", "plan", "list", "config", "levels", "claims", "adaptive"):
        assert icl([command, "--help"]) == 0, command
        out = capsys.readouterr().out
        assert out.startswith(f"usage:\n    icl {command} "), (command, out)
        assert not [c for c in commands if c != command and f"    icl {c} " in out], out
    # adaptive studies by their file's name, as the runs of grid files
    assert icl(["adaptive", "adaptive_depth", "--preset", "smoke", "--dry-run"]) == 0
    assert "budget: 6 trials" in capsys.readouterr().out
    assert icl(["adaptive", "adaptive_dpth"]) == 2
    assert "did you mean 'adaptive_depth'?" in capsys.readouterr().err


def test_icl_help_into_a_closed_pipe_ends_quietly():
    """`icl --help | head -1`: the reader gone before the usage is written (here: closed
    before the command starts) is no traceback, and the status is 0."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "icl", "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait(timeout=120) == 0 and "BrokenPipeError" not in err, err
