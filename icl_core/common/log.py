"""Where the lines of a run go: the standard `logging` module, one logger per package
("icl", "icl_core", "analysis"; modules log to `logging.getLogger(__name__)`, below them).

The console shows each line as it always read, without time or level: INFO and below on
stdout, WARNING and above on stderr, both streams looked up as each line is written (so a
redirected or captured sys.stdout, `--json`'s, a test's, the live progress line's, gets them).
A log file (`--log-file`) gets every line with its time, level and logger.

    >>> from icl import set_log_level
    >>> set_log_level("WARNING")  # a notebook: warnings only, from every package
    >>> set_log_level(None)  # back to the default (INFO)

`configured` is the command lines' (--quiet, --verbose, --log-file); `ensure_console` is what a
run calls first, so the Python API shows its lines without any set-up and never overrides a
level or handlers the caller chose.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings

PACKAGES = ("icl", "icl_core", "analysis")
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
LEVEL_ENV = "ICL_LOG_LEVEL"  # the driver's level, inherited by a local Ray's workers


class ConsoleHandler(logging.Handler):
    """A line as it is, to the current sys.stdout (below WARNING) or sys.stderr (WARNING up)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # a closed stream: logging's own policy, never the run's failure
            self.handleError(record)


def level_of(quiet: bool = False, verbose: bool = False) -> int:
    """--quiet: warnings and errors only; --verbose: debug lines too; else INFO."""
    if quiet and verbose:
        raise ValueError("--quiet and --verbose exclude each other")
    return logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO


def set_log_level(level: int | str | None) -> None:
    """Every package's level at once (icl, icl_core, analysis): logging's names or numbers
    ("WARNING", logging.DEBUG); None: unset, so a run shows INFO again."""
    for name in PACKAGES:
        logging.getLogger(name).setLevel(logging.NOTSET if level is None else level)


def ensure_console() -> None:
    """Each package logger without handlers of its own gets the console handler; its level,
    where nobody set one, is $ICL_LOG_LEVEL or INFO. Idempotent; a caller's handlers or level
    are kept (then lines also reach the root logger's handlers, as logging does)."""
    default = os.environ.get(LEVEL_ENV, "INFO")
    for name in PACKAGES:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(default)
        if not logger.handlers:
            logger.addHandler(ConsoleHandler())
            logger.propagate = False  # one console line, not a second from a root handler


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning during a command: one line of the run's log (and its file), as the
    run's other warnings read, not a source location and a quoted line of code."""
    name = "" if category is UserWarning else f"{category.__name__}: "
    logging.getLogger("icl").warning(f"warning: {name}{message}")


@contextlib.contextmanager
def warning_lines():
    """A command's Python warnings as lines of its log (`_warning_line`), restored after."""
    saved, warnings.showwarning = warnings.showwarning, _warning_line
    try:
        yield
    finally:
        warnings.showwarning = saved


@contextlib.contextmanager
def configured(level: int = logging.INFO, log_file: str | None = None):
    """A command's set-up, undone as it ends (a notebook or a test process runs the next
    command as if this one had not): the packages' level (also for the workers of a local Ray
    started meanwhile, through $ICL_LOG_LEVEL), the console handler, `log_file` (appended
    to; every line with its time, level and logger) when given, and Python's warnings as
    lines of the log (`warning_lines`)."""
    loggers = [logging.getLogger(name) for name in PACKAGES]
    saved = [(lg.level, list(lg.handlers), lg.propagate) for lg in loggers]
    saved_env = os.environ.get(LEVEL_ENV)
    ensure_console()
    os.environ[LEVEL_ENV] = logging.getLevelName(level)
    handler = None
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter(FILE_FORMAT))
    for lg in loggers:
        lg.setLevel(level)
        if handler is not None:
            lg.addHandler(handler)
    try:
        with warning_lines():
            yield
    finally:
        if handler is not None:
            handler.close()
        for lg, (lvl, handlers, propagate) in zip(loggers, saved, strict=True):
            lg.setLevel(lvl)
            lg.handlers[:] = handlers
            lg.propagate = propagate
        if saved_env is None:
            os.environ.pop(LEVEL_ENV, None)
        else:
            os.environ[LEVEL_ENV] = saved_env
