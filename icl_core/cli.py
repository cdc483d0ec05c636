"""The one command line every sweep file shares (`python sweeps/<axis>.py --help`): it parses
the options and reports; icl_core.orchestrate plans and runs.

Everything is validated (plans expanded, configs resolved, storage probed) before Ray starts.
"""

from __future__ import annotations

import argparse
import os
import sys

from icl_core.config import ConfigError
from icl_core.orchestrate import make_plans, run_plans, run_standalone
from icl_core.plan_report import check_size, print_plan
from icl_core.stacked import STACK_MODES
from icl_core.store import uri_join
from icl_core.study import PRESETS

DEFAULT_STORAGE = "results"
JOB_STORAGE = "~/icl_results"  # under `ray job submit` the cwd is a temporary copy


def default_storage() -> str:
    from icl_core.launch import in_ray_job

    env = os.environ.get("ICL_STORAGE")
    if env:
        return env
    return JOB_STORAGE if in_ray_job() else DEFAULT_STORAGE


def default_figures(storage_uri: str) -> str:
    """Where figures go without --figures: ./figures; under `ray job submit` (whose working
    folder is a temporary copy nobody finds) a folder beside the rows of a local storage, else
    ~/icl_figures. The run prints where they went."""
    from icl_core.launch import in_ray_job

    if not in_ray_job():
        return "figures"
    return f"{storage_uri}/figures" if "://" not in storage_uri \
        else os.path.expanduser("~/icl_figures")


def pack_arg(text: str) -> int | str:
    """--pack: an integer or 'auto' (checked in make_plans, so the error is ours)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        return text


def add_logger_arg(parser) -> None:
    """--logger (repeatable), of the sweep files' and the adaptive studies' command lines."""
    parser.add_argument(
        "--logger", action="append", choices=("wandb", "mlflow"), default=[],
        help="also log trials to W&B or MLflow (extras [wandb], [mlflow]; repeatable); "
        "TensorBoard, CSV and JSON logs are always written")


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
    add("--dry-run", action="store_true", help="print the plan, run nothing")
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
        help="members per trial, or auto (default): about 4 trials per CPU/GPU slot, so "
        "start-up is paid once per trial, not per member")
    add("--stack", choices=STACK_MODES, default="auto",
        help="train a trial's members that differ only in their seeds at once, weights "
        "stacked: auto (default) on GPUs, always, never (one after another)")
    add("--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config field, e.g. --set model.width=128 (repeatable)")
    add("--optuna-journal", metavar="FILE",
        help="searches without Ray: plain Optuna with a JournalStorage file")
    add("--seed", type=int, default=None,
        help="searches: the Optuna sampler's seed (default 0); grids take --num-samples")
    add("--figures", default=None, help="figure output folder (default: ./figures; under ray "
        "job submit, <storage>/figures, since the job's working folder is a temporary copy)")
    add("--no-figures", action="store_true", help="skip figure regeneration")
    add_logger_arg(parser)
    return parser


def main(sweep, argv: list[str] | None = None) -> int:
    """Parse, plan, then print the plan (--dry-run) or run it; the exit status. Every input
    is checked before Ray starts: a bad one is one line on stderr and exit status 2."""
    args = build_parser(sweep).parse_args(argv)
    try:
        plans, store = preflight(sweep, args)
        if args.dry_run:
            cost = print_plan(sweep, plans, args, store)
            print(f"total: {cost.summary()}")
            return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.optuna_journal:
        return run_standalone(sweep, plans, store, args)
    if not any(plan.members for plan in plans):
        return 0  # every search already has its trials (said above): nothing to start
    try:
        check_size(plans, args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_plans([(sweep, plans)], store, args)


def preflight(sweep, args):
    """(plans, store): every member validated, the storage, Ray address and figures folder
    checked (icl_core.preflight); Ray is not started, and nothing is written unless every
    check passed (the storage's write probe comes last). The sweep files, `icl` and the
    catalog's --run all come through here."""
    from icl_core.preflight import check_loggers, check_writable_dir, open_store, probe_address

    plans = make_plans(sweep, args)
    store = open_store(args.storage or default_storage())
    args.figures = args.figures or default_figures(store.uri)
    if not args.dry_run:
        if not args.no_figures:
            check_writable_dir("figures", args.figures)
        check_loggers(args.logger, store.uri)
        if not args.optuna_journal:
            probe_address(args.address)
        try:  # last of the checks that write nothing: this one creates the storage folder
            store.check_writable()
        except OSError as exc:
            raise ConfigError(f"--storage: cannot write to {store.uri!r} ({exc})") from None
        if not args.optuna_journal:
            skip_finished_searches(sweep, plans, store, args)
    return plans, store


def skip_finished_searches(sweep, plans, store, args) -> None:
    """Drop the grid points whose search already has its trials (said, one line each); an
    unfinished search run that exists needs --resume. Before Ray starts."""
    from icl_core.search import check_not_started, finished_points

    for plan in plans:
        if not plan.is_search:
            continue
        search = plan.study
        done = finished_points(sweep.name, search, plan.members, store.uri, plan.num_samples)
        plan.members = [p for p in plan.members if p not in done]
        if args.resume:
            continue
        for point in plan.members:
            check_not_started(f"{sweep.name}/{search.name}@{point.hash[:8]}",
                              uri_join(store.uri, sweep.name, search.name, "tune", f"search-{point.hash}"))
