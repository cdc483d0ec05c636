"""The house: what the import contracts cannot say for themselves.

The directions are declared in pyproject.toml [tool.importlinter] and checked by `lint-imports`
(.ci/run): the face (icl) over analysis over the core (icl_core), the layers of icl_core and
analysis, no circles (acyclic siblings), the science core
without Ray, Optuna or analysis, models and tasks independent, nothing importing a sweep file.
Here: that those contracts do fail on a wrong-way import (planted in a copy of the tree); that
importing the science core really loads no Ray, Optuna or analysis (a package's __init__ runs
before its modules, which a static graph does not follow); that every folder stays small and
says what it holds; and that the module paths from before a move still import, with a warning
naming the new path (icl_core.old_paths).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([LINT, "--no-cache"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the packages and pyproject.toml, to plant faults in."""
    out = tmp_path_factory.mktemp("house")
    for name in ("icl", "icl_core", "analysis", "sweeps"):
        shutil.copytree(ROOT / name, out / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", out / "pyproject.toml")
    return out


def test_the_contracts_hold_on_this_tree(tree):
    out = lint(tree)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("path,line,contract", [
    ("icl_core/common/device.py", "import ray\n",
     "The science core imports neither Ray, Optuna nor analysis"),
    ("analysis/reading/frames.py", "def _f():\n    from icl_core.running import trial\n",
     "Analysis never imports Ray, Optuna, running nor planning"),
    ("icl_core/running/study_report.py", "def _f():\n    from analysis import regenerate\n",
     "The house: the face (icl) over analysis over the core (icl_core)"),
    ("analysis/reading/store.py", "def _f():\n    from icl import api\n",
     "The house: the face (icl) over analysis over the core (icl_core)"),
    ("icl_core/storage/store.py", "def _f():\n    from icl import catalog\n",
     "The house: the face (icl) over analysis over the core (icl_core)"),
    ("icl_core/models/lsa.py", "def _f():\n    from icl_core.tasks import base\n",
     "The core's layers: each imports only the layers below it"),
    ("icl_core/storage/store.py", "def _f():\n    from icl_core.storage import claims\n",
     "No circles: within every package, its modules and sub-packages import one way"),
    ("analysis/fitting/fit.py", "def _f():\n    from analysis.figures import deep_shift\n",
     "Analysis: back-tests and regenerate over figures, forecasts, fitting"),
])
def test_a_wrong_way_import_breaks_its_contract(tree, path, line, contract):
    file = tree / path
    before = file.read_text()
    file.write_text(before + "\n\n" + line)
    try:
        out = lint(tree)
    finally:
        file.write_text(before)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout[-3000:]


def test_the_science_core_loads_without_ray_optuna_or_analysis():
    code = ("import sys\n"
            "import icl_core.training.train, icl_core.training.stacked, icl_core.spec.study\n"
            "import icl_core.spec.search, icl_core.spec.adaptive\n"
            "import icl_core.models, icl_core.tasks, icl_core.algorithms.closed_forms\n"
            "print(','.join(m for m in ('ray', 'optuna', 'analysis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == ""


def packages() -> list[Path]:
    return sorted(p.parent for name in ("icl", "icl_core", "analysis")
                  for p in (ROOT / name).rglob("__init__.py"))


def test_every_folder_is_small_and_says_what_it_holds():
    for package in packages():
        entries = [p for p in package.iterdir() if p.name != "__pycache__"
                   and (p.suffix == ".py" or (p / "__init__.py").exists())]
        limit = 15 if package.parent == ROOT else 12
        assert len(entries) <= limit, f"{package.relative_to(ROOT)}: {len(entries)} entries"
        doc = importlib.import_module(".".join(package.relative_to(ROOT).parts)).__doc__
        assert doc and len(doc.split()) >= 8, f"{package.relative_to(ROOT)} has no docstring"


def test_the_paths_from_before_the_move_are_the_same_modules():
    from icl_core.old_paths import MOVED, REMOVED_IN, new_path

    for package, table in MOVED.items():
        for old in table:
            with pytest.warns(DeprecationWarning) if f"{package}.{old}" not in sys.modules \
                    else contextlib.nullcontext():
                module = importlib.import_module(f"{package}.{old}")
            assert module is importlib.import_module(new_path(f"{package}.{old}"))
    # the face moved up whole: each of its modules, the same object, one warning naming both
    sys.modules.pop("icl_core.interface", None)
    with pytest.warns(DeprecationWarning, match=r"icl_core\.interface is an old module path: "
                      r"import icl "):
        assert importlib.import_module("icl_core.interface") is importlib.import_module("icl")
    for name in ("api", "catalog", "console", "adaptive"):
        sys.modules.pop(f"icl_core.interface.{name}", None)
        with pytest.warns(DeprecationWarning, match=rf"icl_core\.interface\.{name} is an old "
                          rf"module path: import icl\.{name} \(the old path goes in "
                          rf"{REMOVED_IN}\)"):
            old = importlib.import_module(f"icl_core.interface.{name}")
        assert old is importlib.import_module(f"icl.{name}")
    assert new_path("icl_core.api") == "icl.api" and new_path("icl_core.spec.study") is None
    trainable = importlib.import_module("icl_core.trainable")  # Ray Tune's pickles name it
    assert trainable.__spec__.name == "icl_core.running.tune_trainable"
    assert trainable.tune_trainable.__module__ == "icl_core.running.tune_trainable"
    old_pickle = b"cicl_core.trainable\ntune_trainable\n."  # what a pickle of it said before
    assert pickle.loads(old_pickle) is trainable.tune_trainable
    from icl import Preset, Search, Store, Study, Sweep  # noqa: F401  (the public names)
    from icl_core import Preset as CorePreset

    assert CorePreset is Preset
    with pytest.warns(DeprecationWarning, match="from icl import Sweep"):
        from icl_core import Sweep as OldSweep
    assert OldSweep is Sweep


def test_an_old_path_still_runs_with_python_m():
    out = subprocess.run([sys.executable, "-m", "icl_core.catalog", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--preset" in out.stdout


def test_an_old_command_runs_the_new_one_and_names_it():
    """`python -m analysis.verdicts --help` (a command from before the one `icl`): one line on
    stderr naming `icl verdicts --help` and the version that removes the old command, then the
    new command's own output and exit status (--help: the check itself is tested elsewhere)."""
    from icl_core.old_paths import COMMANDS_MOVED, REMOVED_IN, moved_command

    out = subprocess.run([sys.executable, "-m", "analysis.verdicts", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.startswith("python -m analysis.verdicts is an old command: run icl "
                                 f"verdicts --help (the old command goes in {REMOVED_IN})")
    assert out.stdout.startswith("usage: icl verdicts") and "--check" in out.stdout
    assert moved_command("analysis.backtests", ["synthetic"]) == ["backtest", "--synthetic"]
    assert moved_command("analysis.backtests", ["scoreboard", "--out", "x"]) == [
        "scoreboard", "--out", "x"]
    assert moved_command("icl.regenerate_from_sweeps", ["depth_scaling"]) == [
        "regenerate", "--from-sweeps", "depth_scaling"]
    from icl.console import main

    commands = {c.split()[0] for new in COMMANDS_MOVED.values()
                for c in (new.values() if isinstance(new, dict) else [new])}
    for command in commands:  # every command they move to is an `icl` command
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0


def test_no_argument_parser_below_the_face():
    """Command lines are parsed in the face (icl) only: no module of icl_core or analysis
    imports argparse or declares an option (benchmarks/ are scripts of their own)."""
    found = [f"{path.relative_to(ROOT)}:{n}" for package in ("icl_core", "analysis")
             for path in sorted((ROOT / package).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "argparse" in line or ".add_argument(" in line or "ArgumentParser" in line]
    assert not found, found


def test_the_declarations_live_in_the_spec_layer():
    """Study, Search, Adaptive, Goal and Measure are declared in icl_core.spec (a sweep file
    imports them from icl); the modules that run or assess them re-export the same classes."""
    import icl
    from analysis.forecasts import adaptive_design, points
    from icl import adaptive
    from icl_core.running import search

    where = {name: getattr(icl, name).__module__
             for name in ("Study", "Preset", "Search", "Adaptive", "Goal", "Measure")}
    assert where == {"Study": "icl_core.spec.study", "Preset": "icl_core.spec.study",
                     "Search": "icl_core.spec.search", "Adaptive": "icl_core.spec.adaptive",
                     "Goal": "icl_core.spec.adaptive", "Measure": "icl_core.spec.adaptive"}
    assert search.Search is icl.Search and adaptive.Adaptive is icl.Adaptive
    assert adaptive_design.Goal is icl.Goal and points.Measure is icl.Measure
