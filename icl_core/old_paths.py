"""Module paths from before a move, still importable for a while, each with a warning.

`import icl_core.trial` or `python -m icl_core.catalog` (paths from before the sub-packages,
issue 31) and `icl_core.interface.<module>` (the face, moved above the core and analysis into
the `icl` package, issue 47) give the module at its new path (icl_core.running.trial,
icl.catalog): the same module object, not a copy, so pickles written before the move (Ray
Tune's experiment state names `icl_core.trainable`) still load, and scripts, notebooks and
sweep files outside this tree keep working. Each old path, imported, warns once
(DeprecationWarning) naming its new path and the version that removes it (`REMOVED_IN`). The
one place old paths live; new code, docs and sweep files use the new paths (docs/developing.md,
"Public imports"). `icl_core` installs the icl_core table, `analysis` the analysis one.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

REMOVED_IN = "0.3.0"  # the version that removes every old path below
PACKAGES_MOVED = {"icl_core.interface": "icl"}  # whole packages: the face, above core and analysis

MOVED = {
    "icl_core": {
    "validation": "common.validation", "registry": "common.registry", "batch": "common.batch",
    "device": "common.device", "baselines": "algorithms.baselines",
    "closed_forms": "algorithms.closed_forms", "floor": "algorithms.floor",
    "teacher_baseline": "algorithms.teacher_baseline", "optimizers": "algorithms.optimizers",
    "config": "spec.config", "study": "spec.study", "train": "training.train",
    "stacked": "training.stacked", "evaluate": "training.evaluate", "trivial": "training.trivial",
    "flops": "training.flops", "throughput": "training.throughput", "store": "storage.store",
    "artifacts": "storage.artifacts", "member_store": "storage.member_store",
    "provenance": "storage.provenance", "claims": "storage.claims",
    "object_claims": "storage.object_claims", "compaction": "storage.compaction",
    "journal": "storage.journal", "signing": "storage.signing", "cost": "planning.cost",
    "calibration": "planning.calibration", "resources": "planning.resources",
    "schedule": "planning.schedule", "memory": "planning.memory", "orchestrate": "running.plans",
    "launch": "running.ray_launch", "pool": "running.trial_pool", "trial": "running.trial",
    "trainable": "running.tune_trainable", "search": "running.search",
    "searcher": "running.optuna_searcher", "tracking": "running.tracking",
    "trackers": "running.wandb_mlflow", "hparams": "running.tune_trainable",
    "report": "running.study_report", "preflight": "interface.preflight", "api": "interface.api",
    "cli": "interface.cli", "console": "interface.console", "catalog": "interface.catalog",
    "sweep": "interface.sweep", "adaptive": "interface.adaptive", "levels": "interface.levels",
    "outcome": "interface.outcome", "plan_report": "interface.plan_cost",
    "regenerate": "interface.regenerate_from_sweeps",
    # issue 47: modules named after what they hold
    "tasks.sparse_retrieval": "tasks.qstr", "models.construction": "models.baseconv_gd",
    "models.retrieval": "models",  # split into attention_mlp, mha_mlp, ffn, bigru (one each)
    "running.hparams": "running.tune_trainable",  # trial_hparams: beside the trial format
    },
    "analysis": {
    "store": "reading.store", "frames": "reading.frames", "spreads": "reading.spreads",
    "regime": "reading.regime", "fit": "fitting.fit", "fit_forms": "fitting.forms",
    "fit_result": "fitting.result", "fit_solve": "fitting.solve",
    "sample_complexity": "fitting.sample_complexity", "forecast": "forecasts.forecast",
    "forecast_points": "forecasts.points", "forecast_score": "forecasts.score",
    "forecast_seal": "forecasts.seal", "figures_forecast": "forecasts.figure",
    "adaptive": "forecasts.adaptive_design", "figures_algoformer": "figures.algoformer",
    "figures_axis": "figures.mse_vs_axis", "figures_construction": "figures.construction",
    "figures_deep": "figures.deep_shift", "figures_deep_depth": "figures.deep_depth",
    "figures_deep_scaling": "figures.deep_scaling", "figures_lsa": "figures.lsa",
    "figures_precision": "figures.precision", "figures_retrieval": "figures.retrieval",
    "figures.by_name": "figures.registry",  # issue 47 (its depth figure: figures.depth)
    "figures.axis": "figures.mse_vs_axis", "figures.deep": "figures.deep_shift",
    },
}


# commands from before the one `icl` (issue 47): `python -m <module> [options]` -> `icl <command>`
# (a module of several commands maps its first argument to each one's new command)
COMMANDS_MOVED = {
    "analysis.regenerate": "regenerate",
    "icl.regenerate_from_sweeps": "regenerate --from-sweeps",
    "analysis.verdicts": "verdicts",
    "analysis.claims.evidence": "evidence",
    "analysis.backtests.backtest": "backtest",
    "analysis.backtests.synthetic": "backtest --synthetic",
    "analysis.backtests": {"backtest": "backtest", "scoreboard": "scoreboard",
                           "synthetic": "backtest --synthetic"},  # by its first argument
    "analysis.forecasts.forecast": "forecast",  # seal | score
    "analysis.forecasts.adaptive_design": "forecast design",
    "analysis.forecasts.adaptive_replay": "forecast replay",
}


def moved_command(old: str, argv: list[str]) -> list[str]:
    """The `icl` arguments an old `python -m <old> <argv>` command line means now."""
    new = COMMANDS_MOVED[old]
    if isinstance(new, dict):  # the first argument names the command
        first, argv = (argv[0], argv[1:]) if argv else ("", [])
        new = new.get(first, first)
    return [*new.split(), *argv]


def run_moved_command(old: str) -> None:
    """`python -m <old>` of a command that moved into `icl`: one line on stderr naming the new
    command and the version that removes the old one, then the new command runs in this
    process's place (same arguments, same exit status). Analysis imports nothing of the face:
    the hand-over is a new program, as a user typing the new command."""
    import logging
    import os
    import shlex

    from icl_core.common.log import ensure_console

    ensure_console()
    argv = moved_command(old, sys.argv[1:])
    logging.getLogger(__name__).warning(  # the console handler flushes every line it writes
        f"python -m {old} is an old command: run icl {shlex.join(argv)} (the old command goes "
        f"in {REMOVED_IN})")
    os.execv(sys.executable, [sys.executable, "-m", "icl", *argv])


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path (for `python -m`, its code)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec  # the import machinery set the old path's spec

    def get_code(self, name: str):  # runpy: `python -m <old path>` runs the new module
        return importlib.util.find_spec(self.new).loader.get_code(self.new)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, package: str):
        self.package, self.table = package, MOVED[package]

    def find_spec(self, fullname, path=None, target=None):
        new = new_path(fullname) if fullname.partition(".")[0] == self.package else None
        if new is None:
            return None
        warn_moved(fullname, new)
        origin = importlib.util.find_spec(new).origin
        return importlib.util.spec_from_loader(fullname, _Alias(new), origin=origin)


def new_path(old: str) -> str | None:
    """The module an old path names now (`icl_core.api` -> `icl.api`), or None if not moved."""
    head, _, rest = old.partition(".")
    new = f"{head}.{MOVED[head][rest]}" if rest in MOVED.get(head, {}) else old
    for before, after in PACKAGES_MOVED.items():
        if new == before or new.startswith(before + "."):
            new = after + new[len(before):]
    return None if new == old else new


def warn_moved(old: str, new: str, kind: str = "module path", how: str = "import") -> None:
    """The one deprecation line of an old path, a module's or a public name's (Python shows it
    once per place it is met): "<old> is an old <kind>: <how> <new> (... goes in REMOVED_IN)"."""
    warnings.warn(f"{old} is an old {kind}: {how} {new} (the old path goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=3)


def install(package: str) -> None:
    """Old paths of `package` import from their new paths (once per process)."""
    if not any(isinstance(f, _Finder) and f.package == package for f in sys.meta_path):
        # first: a module under a moved package (icl_core.interface.api) must not be found
        # again by the path finder under its parent's new __path__ (a second copy of icl.api)
        sys.meta_path.insert(0, _Finder(package))
