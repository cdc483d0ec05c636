"""The one command line every sweep file shares (`python sweeps/<axis>.py --help`): a thin
layer over the Python API (icl.api): it parses the options into `Options`, calls the API,
prints a ConfigError as one line with exit status 2 and returns the run's exit status.
`--json`: stdout holds one JSON document and nothing else (the plan with --dry-run, else the
run's summary, written when it ends); every other line goes to stderr.

Everything is validated (plans expanded, configs resolved, storage probed) before Ray starts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from icl.api import JOB_STORAGE, LOGGERS, Options, execute, make_plan
from icl_core.spec.config import ConfigError
from icl_core.spec.study import PRESETS
from icl_core.training.stack_rules import STACK_MODES


def pack_arg(text: str) -> int | str:
    """--pack: an integer, 'auto' or 'gpu' (checked in make_plans, so the error is ours)."""
    if text in ("auto", "gpu"):
        return text
    try:
        return int(text)
    except ValueError:
        return text


def add_logger_arg(parser) -> None:
    """--logger (repeatable), of the sweep files' and the adaptive studies' command lines."""
    parser.add_argument(
        "--logger", action="append", choices=LOGGERS, default=[],
        help="also log trials to W&B or MLflow (extras [wandb], [mlflow]; repeatable); "
        "TensorBoard, CSV and JSON logs are always written")


def add_log_args(parser) -> None:
    """--quiet / --verbose / --log-file, of every command that runs studies."""
    how = parser.add_mutually_exclusive_group()
    how.add_argument("-q", "--quiet", action="store_true",
                     help="warnings and errors only (no progress, no plan lines)")
    how.add_argument("-v", "--verbose", action="store_true", help="debug lines too")
    parser.add_argument("--log-file", metavar="FILE",
                        help="also append every line of the run's level (--quiet: warnings "
                        "and errors), with its time, level and logger, to FILE")


def logging_of(args: argparse.Namespace):
    """The logging a parsed command line asked for (icl_core.common.log.configured), taking its
    three options out of `args`; undone as the command ends."""
    from icl_core.common.log import configured, level_of

    quiet, verbose = vars(args).pop("quiet"), vars(args).pop("verbose")
    return configured(level_of(quiet, verbose), vars(args).pop("log_file"))


def build_parser(sweep) -> argparse.ArgumentParser:
    studies = "\n".join(f"  {s.name}: {s.doc}" for s in sweep.studies)
    parser = argparse.ArgumentParser(
        prog=f"sweeps/{sweep.name}.py",
        description=f"Sweep {sweep.name!r}. Studies:\n{studies}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--preset", default="cpu", help=f"one of {', '.join(PRESETS)} (default: cpu)")
    add("--study", help="run one study (default: all studies of this file)")
    add("--storage", help="where rows go: a path or URI (s3://, gs://); default $ICL_STORAGE, "
        f"else ./results ({JOB_STORAGE} under ray job submit)")
    add("--address", help="Ray cluster address (default: embedded local Ray)")
    add("--no-dashboard", action="store_true",
        help="embedded local Ray without its dashboard (default: on, on 127.0.0.1 only; its "
        "address is printed as the run starts)")
    add("--dry-run", action="store_true", help="print the plan, run nothing")
    add("--json", action="store_true",
        help="one JSON document on stdout: the plan (with --dry-run), else the run's summary "
        "(per study its status counts; the exit status) when it ends; every other line "
        "goes to stderr")
    add("--plan-gpus", type=float, default=None,
        help="--dry-run: plan for a cluster with this many GPUs (default: this machine's)")
    add("--plan-cpus", type=float, default=None,
        help="--dry-run: plan for a cluster with this many CPUs (default: this machine's)")
    add("--trial-minutes", type=float, default=None,
        help="--pack auto: a trial's planned duration (default: 3 on CPUs, 15 on GPUs)")
    add("--yes", action="store_true",
        help="launch a plan above 10,000 configs or 1,000 H100-hours (see --dry-run)")
    add("--resume", action="store_true",
        help="searches: finish an interrupted search (Tuner.restore), then add trials up to "
        "--num-samples (extends a finished one); grids always skip finished configs, so a "
        "plain re-run resumes them")
    add("--max-concurrent", type=int, default=None, help="max trials at once")
    add("--num-samples", type=int, default=None,
        help="grids: seeds 0..K-1 (replaces the seed axis); searches: trials per search")
    add("--pack", type=pack_arg, default="auto",
        help="members per trial, or auto (default): members (or stacks) packed by the cost "
        "model into trials of about --trial-minutes, at least one trial per CPU/GPU slot, so "
        "start-up is paid once per trial, not per member; gpu: one trial per whole GPU, "
        "holding whole stacks that fit its memory, trained at once in one process")
    add("--stack", choices=STACK_MODES, default="auto",
        help="train a trial's members that differ only in their seeds at once, weights "
        "stacked: auto (default) on GPUs, always, never (one after another)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config field, e.g. --set model.width=128 (repeatable)")
    add("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
        help="grid over a config field: add or replace an axis, e.g. --sweep "
        "model.depth=1,2,8, or a range LO..HI:log:N / LO..HI:lin:N, e.g. --sweep "
        "train.steps=1e3..1e5:log:5 (repeatable; finished members are skipped)")
    add("--optuna-journal", metavar="FILE",
        help="searches without Ray: plain Optuna with a JournalStorage file")
    add("--seed", type=int, default=None,
        help="searches: the Optuna sampler's seed (default 0); grids take --num-samples")
    add("--figures", default=None, help="figure output folder (default: ./figures; under ray "
        "job submit, <storage>/figures, since the job's working folder is a temporary copy)")
    add("--no-figures", action="store_true", help="skip figure regeneration")
    add_logger_arg(parser)
    add_log_args(parser)
    return parser


def main(sweep, argv: list[str] | None = None) -> int:
    """Parse, then print the plan (--dry-run) or run it; the exit status. Every input is
    checked before Ray starts: a bad one is one line on stderr and exit status 2. With
    --json the plan or the run's summary is one JSON document on stdout, the rest on stderr
    (no document after a bad input: its line and exit status 2)."""
    args = build_parser(sweep).parse_args(argv)
    logs = logging_of(args)
    opts = Options.of(args)
    stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr) if opts.json else contextlib.nullcontext(), \
                logs:
            if opts.dry_run:
                document, status = make_plan(sweep, opts, echo=not opts.json).as_dict(), 0
            else:
                result = execute(sweep, opts)
                document, status = result.as_dict(), result.exit_status
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if opts.json:
        print(json.dumps(document, indent=1, default=str), file=stdout, flush=True)
    return status
