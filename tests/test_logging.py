"""Where a run's lines go (icl_core.common.log): the standard logging module, one logger per
package, the console as it always read (INFO on stdout, warnings on stderr), --quiet /
--verbose / --log-file on the command lines, a notebook's own level kept, and no print() below
the face; the commands set the console up in a fresh interpreter. A smoke run with --log-file
and --quiet: tests/test_sweep_e2e.py."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from icl_core.common.log import LEVEL_ENV, ConsoleHandler, configured, ensure_console, level_of

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|DEBUG|ERROR) +"
                  r"(icl_core|analysis)(\.\w+)*: .+")


def test_console_lines_read_as_before_info_on_stdout_warnings_on_stderr(capsys):
    with configured(logging.INFO):
        logging.getLogger("icl_core.running.plans").info("[s/a] 4 configs")
        logging.getLogger("icl_core.storage.claims").warning("claims: lost abc to another driver")
        logging.getLogger("analysis.reading.store").debug("not shown at INFO")
    out, err = capsys.readouterr()
    assert (out, err) == ("[s/a] 4 configs\n", "claims: lost abc to another driver\n")


def test_quiet_keeps_warnings_verbose_adds_debug_and_both_are_refused(capsys):
    with configured(level_of(quiet=True)):
        logging.getLogger("icl_core.running.plans").info("progress")
        logging.getLogger("icl_core.running.plans").error("error: a study crashed")
    assert capsys.readouterr() == ("", "error: a study crashed\n")
    with configured(level_of(verbose=True)):
        logging.getLogger("analysis.reading.store").debug("a debug line")
    assert capsys.readouterr().out == "a debug line\n"
    with pytest.raises(ValueError, match="exclude each other"):
        level_of(quiet=True, verbose=True)


def test_a_log_file_gets_every_line_with_time_level_and_logger(tmp_path, capsys):
    log = tmp_path / "logs" / "run.log"  # its folder is made
    with configured(logging.INFO, str(log)):
        logging.getLogger("icl_core.running.trial_pool").info("[s/a] 4 configs, 0 already finished")
        logging.getLogger("icl_core.storage.store").warning("untrusted row file x; moved")
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all(LINE.fullmatch(line) for line in lines), lines
    assert lines[0].endswith("INFO    icl_core.running.trial_pool: [s/a] 4 configs, 0 already "
                             "finished")
    assert " WARNING icl_core.storage.store: " in lines[1]
    capsys.readouterr()
    logging.getLogger("icl_core.running.plans").warning("after the command")  # file closed
    assert len(log.read_text().splitlines()) == 2


def test_a_command_undoes_its_set_up_and_keeps_a_notebooks_level(monkeypatch, capsys):
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    core = logging.getLogger("icl_core")
    saved = (core.level, list(core.handlers), core.propagate)
    try:
        core.handlers[:] = []
        core.setLevel(logging.NOTSET)
        core.setLevel(logging.WARNING)  # a notebook: warnings only
        ensure_console()
        assert core.level == logging.WARNING  # kept
        assert [type(h) for h in core.handlers] == [ConsoleHandler]
        ensure_console()
        assert len(core.handlers) == 1  # idempotent
        with configured(logging.DEBUG):
            assert core.level == logging.DEBUG and os.environ[LEVEL_ENV] == "DEBUG"
        assert core.level == logging.WARNING and LEVEL_ENV not in os.environ
        logging.getLogger("icl_core.running.plans").info("hidden")
        assert capsys.readouterr().out == ""
    finally:
        core.setLevel(saved[0])
        core.handlers[:] = saved[1]
        core.propagate = saved[2]


def test_the_python_api_shows_its_lines_without_any_set_up():
    """A fresh interpreter (a notebook): `execute` attaches the console handler at INFO before
    anything, here before the bad preset is refused; the caller's level is kept."""
    code = (
        "import logging\n"
        "from icl.api import execute, Options\n"
        "from icl_core.spec.config import ConfigError\n"
        "from sweeps.depth_scaling import SWEEP\n"
        "core = logging.getLogger('icl_core')\n"
        "assert not core.handlers\n"
        "try:\n"
        "    execute(SWEEP, Options(preset='nope'))\n"
        "except ConfigError:\n"
        "    pass\n"
        "print([type(h).__name__ for h in core.handlers], logging.getLevelName(core.level))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['ConsoleHandler'] INFO"


@pytest.mark.parametrize("argv", [["-q", "-v"], ["--quiet", "--verbose"]])
def test_quiet_and_verbose_together_are_one_line_and_exit_2(argv, capsys):
    from sweeps.depth_scaling import SWEEP

    with pytest.raises(SystemExit) as exc:
        SWEEP.main(["--preset", "smoke", "--dry-run", *argv])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def prints_in(path: Path) -> list[int]:
    tree = ast.parse(path.read_text())
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "print"]


def test_no_print_below_the_face():
    """Below icl (the commands and the API) every line is a log record, so a notebook can
    silence or redirect it: in icl_core and in all of analysis (the commands that print what
    they were asked for live in the face, icl.commands)."""
    below = list((ROOT / "icl_core").rglob("*.py")) + list((ROOT / "analysis").rglob("*.py"))
    assert len(below) > 120
    found = {str(p.relative_to(ROOT)): lines for p in below if (lines := prints_in(p))}
    assert found == {}


def test_an_analysis_command_shows_the_stores_coverage_line(tmp_path):
    """`python -m icl regenerate` in a fresh interpreter: the coverage line, logged by the
    library (analysis.reading.store), reaches the console through the command's set-up."""
    out = subprocess.run(
        [sys.executable, "-m", "icl", "regenerate", "algoformer", "--study", "examples",
         "--storage", str(ROOT / "evidence" / "reduced"), "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^\[algoformer/examples\] trials: \d+ expected .*, \d+ read ", out.stdout,
                     re.M), out.stdout


def test_a_notebook_sets_every_packages_level_at_once(capsys, monkeypatch):
    from icl import set_log_level

    monkeypatch.delenv(LEVEL_ENV, raising=False)
    saved = {n: logging.getLogger(n).level for n in ("icl", "icl_core", "analysis")}
    try:
        set_log_level("WARNING")
        ensure_console()  # what a run does first: the level chosen is kept
        for name in ("icl.adaptive", "icl_core.running.plans", "analysis.reading.store"):
            logging.getLogger(name).info("hidden")
            logging.getLogger(name).warning(f"{name} shown")
        assert capsys.readouterr() == ("", "icl.adaptive shown\nicl_core.running.plans shown\n"
                                           "analysis.reading.store shown\n")
        set_log_level(None)
        ensure_console()
        logging.getLogger("icl_core.running.plans").info("shown again")
        assert capsys.readouterr().out == "shown again\n"
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_a_commands_python_warnings_are_one_line_of_its_log(tmp_path, capsys):
    """A warning raised during a command (a figure pooling configs, a skipped row file) reads
    as the run's other warnings: one line on stderr and in --log-file, not a source location
    and a quoted line of code; outside a command, Python's own display comes back."""
    import warnings

    log = tmp_path / "run.log"
    with configured(logging.INFO, str(log)), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("several configs share a (depth, seed)", UserWarning, stacklevel=1)
        warnings.warn("an old path", DeprecationWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err == ("warning: several configs share a (depth, seed)\n"
                   "warning: DeprecationWarning: an old path\n")
    assert "WARNING icl: warning: several configs share" in log.read_text()
    assert warnings.showwarning.__module__ == "warnings"


def test_a_local_rays_start_lines_follow_the_commands_level():
    """Ray's INFO line on starting ("Started a local Ray instance. View the dashboard at ...",
    which the run's own dashboard line already says) only with --verbose; with --quiet, also
    its notice that token authentication is on (a local Ray's default, nothing to act on)."""
    from icl_core.running.ray_launch import quiet_startup, ray_logging_level

    assert ray_logging_level(logging.DEBUG) == logging.INFO
    assert ray_logging_level(logging.INFO) == ray_logging_level(logging.WARNING) == logging.WARNING
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    before = notice.level
    try:
        with configured(level_of()):
            assert quiet_startup() == logging.INFO and notice.level == before
        with configured(level_of(quiet=True)):
            assert quiet_startup() == logging.WARNING and notice.level == logging.ERROR
    finally:
        notice.setLevel(before)


@pytest.mark.slow
def test_a_quiet_sweep_that_starts_ray_prints_nothing(tmp_path):
    """The quick start's file with --quiet on a Ray it starts itself: nothing on stdout or
    stderr (Ray's start-up and token lines printed there before)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "sweeps" / "depth_scaling.py"), "--preset", "smoke",
         "--study", "least_squares", "--storage", str(tmp_path), "--no-figures", "--quiet"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
