"""The Python API of a sweep file, for notebooks and scripts (docs/python_api.md):

    from sweeps.depth_scaling import SWEEP
    result = SWEEP.run(study="least_squares", preset="smoke", storage="results")
    result.rows()        # a Polars frame of the run's studies (analysis.reading.store)
    result.summary       # {study: {"ok": n, "diverged": n, "failed": n, ...}}
    plan = SWEEP.plan(preset="gpu", plan_gpus=8)   # what --dry-run prints, as data

No argparse and no sys.exit: bad input raises icl_core.spec.config.ConfigError with the line the
command line prints after "error: " (and exits 2 on). Every command-line option is a keyword;
the command line (icl.cli) parses into the same `Options` and calls `execute` and
`make_plan`, so both paths share every check. Ray: a Ray the caller already started
(`ray.init(...)` in the notebook) is used and left running; otherwise the embedded local Ray
(or `address`) is started for the run and stopped after it, as the command line does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from dataclasses import dataclass, field

from icl.outcome import PlanData, RunResult, plan_data, run_result
from icl_core.common.validation import unknown
from icl_core.spec.config import ConfigError

DEFAULT_STORAGE = "results"
JOB_STORAGE = "~/icl_results"  # under `ray job submit` the cwd is a temporary copy
LOGGERS = ("wandb", "mlflow")


@dataclass
class Options:
    """Every option of a sweep file's command line, by its argparse name (`--max-concurrent`:
    max_concurrent); the defaults are the command line's. The face's own: the layers below take
    the typed values they use (`plan_request`, `launch`) and never write to it."""

    preset: str = "cpu"
    study: str | None = None
    storage: str | None = None
    address: str | None = None
    no_dashboard: bool = False
    dry_run: bool = False
    plan_gpus: float | None = None
    plan_cpus: float | None = None
    trial_minutes: float | None = None
    yes: bool = False
    resume: bool = False
    max_concurrent: int | None = None
    num_samples: int | None = None
    pack: int | str = "auto"
    stack: str = "auto"
    set: list = field(default_factory=list)  # "KEY=VALUE" strings
    sweep: list = field(default_factory=list)  # "KEY=V1,V2,..." or "KEY=LO..HI:log:N" strings
    optuna_journal: str | None = None
    seed: int | None = None
    figures: str | None = None
    no_figures: bool = False
    logger: list = field(default_factory=list)
    json: bool = False  # the command line's: one JSON document on stdout (cli.main)

    @classmethod
    def of(cls, namespace) -> Options:
        """From a parsed command line (argparse.Namespace): its options that are run options."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in vars(namespace).items() if k in names})

    def plan_request(self):
        """What planning takes (icl_core.running.plans.PlanRequest)."""
        from icl_core.running.plans import PlanRequest

        self.launch()  # its own checks (--trial-minutes) too, before anything is planned
        return PlanRequest(
            preset=self.preset, study=self.study, sets=tuple(self.set), sweeps=tuple(self.sweep),
            num_samples=self.num_samples, seed=self.seed, optuna_journal=self.optuna_journal,
            max_concurrent=self.max_concurrent, pack=self.pack, plan_gpus=self.plan_gpus,
            dry_run=self.dry_run, address=self.address, resume=self.resume)

    def launch(self):
        """What running takes (icl_core.running.plans.Launch); a search's seed defaults to 0."""
        from icl_core.running.plans import Launch

        return Launch(
            address=self.address, dashboard=not self.no_dashboard,
            max_concurrent=self.max_concurrent, pack=self.pack, stack=self.stack,
            trial_minutes=self.trial_minutes, seed=0 if self.seed is None else self.seed,
            resume=self.resume, loggers=tuple(self.logger), optuna_journal=self.optuna_journal,
            figures=self.figures)


def set_pairs(sets) -> list[str]:
    """`sets` as the command line's KEY=VALUE strings: a dict ({"model.width": 128}; a value
    other than a string is written as JSON, as --set takes it) or a list of such strings."""
    import json

    if sets is None:
        return []
    if isinstance(sets, str):
        return [sets]
    if isinstance(sets, dict):
        return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sets.items()]
    return [str(s) for s in sets]


def sweep_pairs(sweeps) -> list[str]:
    """`sweeps` as the command line's KEY=V1,V2,... strings: a dict of value lists
    ({"model.depth": [1, 2, 8]}; a value other than a string is written as JSON) or of strings
    ({"train.steps": "1e3..1e5:log:5"}), or a list of such KEY=... strings."""
    import json

    if not isinstance(sweeps, dict):
        return set_pairs(sweeps)

    def text(values) -> str:
        if isinstance(values, str):
            return values
        return ",".join(v if isinstance(v, str) else json.dumps(v) for v in values)

    return [f"{key}={text(values)}" for key, values in sweeps.items()]


def _choice(flag: str, value, choices) -> None:
    if value not in choices:
        raise unknown(flag, "", value, choices)


def make_options(*, study=None, preset="cpu", storage=None, sets=None, sweeps=None,
                 num_samples=None, pack="auto", stack="auto", max_concurrent=None,
                 trial_minutes=None, address=None, resume=False, seed=None, figures=None, loggers=(),
                 optuna_journal=None, yes=False, dry_run=False, plan_gpus=None,
                 plan_cpus=None, dashboard=True) -> Options:
    """Options from the API's keywords (see `run` and `plan`); checks what argparse checks on
    the command line (--stack and --logger choices)."""
    from icl_core.training.stack_rules import STACK_MODES

    loggers = [loggers] if isinstance(loggers, str) else list(loggers or ())
    _choice("--stack", stack, STACK_MODES)
    for name in loggers:
        _choice("--logger", name, LOGGERS)
    return Options(
        preset=preset, study=study, storage=None if storage is None else str(storage),
        address=address, no_dashboard=not dashboard, dry_run=dry_run, plan_gpus=plan_gpus,
        plan_cpus=plan_cpus,
        trial_minutes=trial_minutes, yes=yes, resume=resume, max_concurrent=max_concurrent,
        num_samples=num_samples, pack=pack, stack=stack, set=set_pairs(sets),
        sweep=sweep_pairs(sweeps),
        optuna_journal=None if optuna_journal is None else str(optuna_journal), seed=seed,
        figures=None if figures in (None, True, False) else str(figures),
        no_figures=figures is False, logger=loggers)


def run(sweep, *, study: str | None = None, preset: str = "cpu", storage=None, sets=None,
        sweeps=None, num_samples: int | None = None, pack: int | str = "auto", stack: str = "auto",
        max_concurrent: int | None = None, trial_minutes: float | None = None,
        address: str | None = None, resume: bool = False, seed: int | None = None,
        figures=None, loggers=(), optuna_journal=None, yes: bool = False,
        dashboard: bool = True) -> RunResult:
    """Run the sweep's studies (`study`: one of them) under `preset`; the RunResult.

    storage: a path or URI (default $ICL_STORAGE, else ./results); sets: config overrides,
    {"model.width": 128} or ["model.width=128"]; sweeps: grid axes added or replaced,
    {"model.depth": [1, 2, 8]}, {"train.steps": "1e3..1e5:log:5"} or ["model.depth=1,2,8"]
    (grids only); num_samples: grids, seeds 0..K-1; searches,
    trials per search; pack: members per trial or "auto"; stack: "auto", "always", "never";
    figures: a folder (default ./figures), or False for none; loggers: "wandb", "mlflow";
    yes: launch a plan above the size limit; dashboard: False for an embedded local Ray
    without its dashboard (--no-dashboard). The rest as the command line's options of the
    same name (`python sweeps/<file>.py --help`). Bad input raises ConfigError before Ray
    starts; failed or diverged trials do not raise (see RunResult.summary, .exit_status)."""
    opts = make_options(study=study, preset=preset, storage=storage, sets=sets, sweeps=sweeps,
                        num_samples=num_samples, pack=pack, stack=stack,
                        max_concurrent=max_concurrent, trial_minutes=trial_minutes,
                        address=address, resume=resume, seed=seed, figures=figures,
                        loggers=loggers, optuna_journal=optuna_journal, yes=yes,
                        dashboard=dashboard)
    return execute(sweep, opts)


def plan(sweep, *, study: str | None = None, preset: str = "cpu", storage=None, sets=None,
         sweeps=None, num_samples: int | None = None, pack: int | str = "auto", stack: str = "auto",
         trial_minutes: float | None = None, seed: int | None = None,
         plan_gpus: float | None = None, plan_cpus: float | None = None,
         optuna_journal=None, echo: bool = False) -> PlanData:
    """The plan --dry-run prints, as data (PlanData: per study its configs, trials,
    device-hours and wall estimate; the totals; `.text`, the printed plan). Runs nothing and
    writes nothing. plan_gpus / plan_cpus: the cluster to plan for (default: this machine);
    echo: also print the plan as it is made."""
    opts = make_options(study=study, preset=preset, storage=storage, sets=sets, sweeps=sweeps,
                        num_samples=num_samples, pack=pack, stack=stack,
                        trial_minutes=trial_minutes, seed=seed, optuna_journal=optuna_journal,
                        dry_run=True, plan_gpus=plan_gpus, plan_cpus=plan_cpus)
    return make_plan(sweep, opts, echo)


# ------------------------------------------------------------------ shared with the CLI


def execute(sweep, opts: Options) -> RunResult:
    """Check every input (`preflight`), then run: the RunResult. A ConfigError is raised
    before Ray starts, except a storage the cluster's nodes cannot share (found once Ray is
    up; a Ray this started is stopped first)."""
    from icl.figures import figure_drawer
    from icl.plan_cost import check_size
    from icl_core.common.log import ensure_console
    from icl_core.running.plans import RunReport, run_plans, run_standalone

    ensure_console()  # the run's lines, in a notebook too, at the level its caller chose
    plans, store = preflight(sweep, opts)
    if opts.optuna_journal:
        report = RunReport(run_standalone(sweep, plans, store, opts.launch()))
    elif not any(p.members for p in plans):
        report = RunReport()  # every search already has its trials (said by preflight)
    else:
        check_size(plans, opts)
        report = run_plans([(sweep, plans)], store, opts.launch(),
                           draw=figure_drawer(opts.figures, opts.no_figures))
    return run_result(sweep, plans, store, opts.preset, report)


class _Tee(io.TextIOBase):
    """Keeps what is written; also passes it on to `out` (None: keeps it only)."""

    def __init__(self, out):
        self.out, self.parts = out, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        if self.out is not None:
            self.out.write(text)
        return len(text)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()


def make_plan(sweep, opts: Options, echo: bool = False) -> PlanData:
    """The --dry-run plan: printed by icl.plan_cost (kept as `.text`; `echo` also
    prints it) and returned as data."""
    from icl.plan_cost import print_plan

    opts.dry_run = True
    plans, store = preflight(sweep, opts)
    tee = _Tee(sys.stdout if echo else None)
    with contextlib.redirect_stdout(tee):
        cost = print_plan(sweep, plans, opts, store)
        print(f"total: {cost.summary()}")
    return plan_data(sweep, plans, store, opts, cost, "".join(tee.parts))


def default_storage() -> str:
    from icl_core.running.ray_launch import in_ray_job

    env = os.environ.get("ICL_STORAGE")
    if env:
        return env
    return JOB_STORAGE if in_ray_job() else DEFAULT_STORAGE


def default_figures(storage_uri: str) -> str:
    """Where figures go without --figures: ./figures; under `ray job submit` (whose working
    folder is a temporary copy nobody finds) a folder beside the rows of a local storage, else
    ~/icl_figures. The run prints where they went."""
    from icl_core.running.ray_launch import in_ray_job

    if not in_ray_job():
        return "figures"
    return f"{storage_uri}/figures" if "://" not in storage_uri \
        else os.path.expanduser("~/icl_figures")


def preflight(sweep, args: Options):
    """(plans, store): every member validated, the storage, Ray address and figures folder
    checked (icl.preflight); Ray is not started, and nothing is written unless every
    check passed (the storage's write probe comes last). The API, the sweep files' command
    line, `icl` and the catalog's --run all come through here."""
    from icl.preflight import (
        check_loggers,
        check_writable_dir,
        open_store,
        probe_address,
    )
    from icl_core.running.plans import make_plans

    plans = make_plans(sweep, args.plan_request())
    store = open_store(args.storage or default_storage())
    args.storage = store.uri  # without the keys it may have carried (pickled with Tune's state)
    args.figures = args.figures or default_figures(store.uri)
    if not args.dry_run:
        if not args.no_figures:
            check_writable_dir("figures", args.figures)
        check_loggers(args.logger, store.uri)
        if not args.optuna_journal:
            probe_address(args.address)
        try:  # last of the checks that write nothing: this one creates the sweep's folder
            store.check_writable(sweep.name)
        except OSError as exc:
            raise ConfigError(f"--storage: cannot write to {store.redacted!r} ({exc})") from None
        if not args.optuna_journal:
            skip_finished_searches(sweep, plans, store, args)
    return plans, store


def skip_finished_searches(sweep, plans, store, args) -> None:
    """Drop the grid points whose search already has its trials (said, one line each); an
    unfinished search run that exists needs --resume. Before Ray starts."""
    from icl_core.running.search import check_not_started, finished_points
    from icl_core.storage.store import uri_join

    for plan_ in plans:
        if not plan_.is_search:
            continue
        search = plan_.study
        done = finished_points(sweep.name, search, plan_.members, store.uri, plan_.num_samples)
        plan_.members = [p for p in plan_.members if p not in done]
        if args.resume:
            continue
        for point in plan_.members:
            check_not_started(f"{sweep.name}/{search.name}@{point.hash[:8]}",
                              uri_join(store.uri, sweep.name, search.name, "tune",
                                       f"search-{point.hash}"))


__all__ = ["Options", "PlanData", "RunResult", "execute", "make_plan", "plan", "preflight",
           "run"]
