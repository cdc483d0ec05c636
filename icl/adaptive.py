"""Adaptive studies: spend trials where the scaling law is uncertain (issue #22).

    from icl import Adaptive, Goal, adaptive_main

    ADAPTIVE = Adaptive(name="least_squares_adaptive", study=LEAST_SQUARES, axis="model.depth",
                        bounds=(1, 8), initial=[1, 3, 8], seeds=2, goal=Goal("exponent", 0.3),
                        budget_trials=24, presets={"smoke": {...}})
    if __name__ == "__main__":
        raise SystemExit(adaptive_main("adaptive_depth", [ADAPTIVE]))

A declaration names a base `Study` (its preset's base config is every member's config, the
axis set per point; its grid is not used), the axis (a dotted config key), its bounds, the
round-0 points and seeds per point, the goal (icl_core.spec.adaptive.Goal), the form of the law
and a budget in trials and/or device-hours (the rows' wall_time_s). `presets` override any of
these fields per preset (e.g. smaller bounds for smoke).

The runner (`run_adaptive`). Round 0 runs the initial points x seeds. Then each round reads
the study's rows (analysis.reading.store.read_rows), fits, and stops when the goal is reached or the
budget is spent; otherwise analysis.forecasts.adaptive_design.choose picks the next `batch` trials (x, seed) on
a log-spaced candidate lattice within the bounds (integers when the axis is) by the most
bootstrap variance of the goal removed per unit of cost, a trial's cost at x fitted to the
measured members' wall times (seconds = c x^k: analysis.forecasts.adaptive_design.measured_cost; uniform until
two x are measured, or with `cost_weighted=False`), and they run
through Ray Tune (icl_core.running.ray_launch.run_tune), one member per trial. Members are keyed by
config hash as in a grid: a finished config is never rerun. Every round is planned into the
rounds log `<storage>/<sweep>/<study>/adaptive-<preset>.json` before it runs and marked done after, so
re-running the command resumes: an unfinished round is finished first, then rounds go on from
the rows. The choice is deterministic for the rows and the round (its seed is the round index).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from analysis.forecasts.adaptive_design import (
    assess,
    choose,
    measured_cost,
    member_points,
    member_seconds,
)
from icl_core.spec.adaptive import Adaptive, Goal, Measure, member_at  # noqa: F401  (re-exported)
from icl_core.spec.config import MemberConfig
from icl_core.storage.store import Store

LOG = "adaptive-{preset}.json"  # one rounds log per preset
OLD_LOG = "adaptive.json"  # the one log of earlier versions (its "preset" says whose)

logger = logging.getLogger(__name__)






# ------------------------------------------------------------------------ rows and the log


def log_path(store: Store, sweep: str, name: str, preset: str) -> str:
    """A preset's rounds log: each preset's rounds (and rows) are their own study's."""
    return f"{store.study_dir(sweep, name)}/{LOG.format(preset=preset)}"


def read_log(store: Store, sweep: str, name: str, preset: str) -> dict:
    """The preset's rounds log ({"rounds": []} before round 0); a log of one file for every
    preset (`adaptive.json`, as written before) is read where it is this preset's."""
    import pyarrow.fs as pafs

    for path in (log_path(store, sweep, name, preset), f"{store.study_dir(sweep, name)}/{OLD_LOG}"):
        if store.fs.get_file_info(path).type == pafs.FileType.NotFound:
            continue
        with store.fs.open_input_stream(path) as f:
            log = json.loads(f.read().decode())
        if log.get("preset", preset) == preset:
            return log
    return {"rounds": []}


def write_log(store: Store, sweep: str, name: str, log: dict) -> None:
    text = json.dumps(log, indent=1, sort_keys=True, default=float)
    store.write_bytes(log_path(store, sweep, name, log["preset"]), text.encode())


@dataclass
class Spent:
    """What the study has used: members with a row file (any status), device-hours; and each
    member's axis value and wall seconds (what a trial costs where: the cost-weighted choice)."""

    trials: int = 0
    hours: float = 0.0
    x: np.ndarray = field(default_factory=lambda: np.empty(0))
    seconds: np.ndarray = field(default_factory=lambda: np.empty(0))
    seeds: np.ndarray = field(default_factory=lambda: np.empty(0))

    def taken(self) -> list[tuple[float, int]]:
        """(x, seed) of every member with a row file: a seed never to be chosen again."""
        return [(float(x), int(s)) for x, s in zip(self.x, self.seeds, strict=True)
                if np.isfinite(x)]

    def left(self, adaptive: Adaptive) -> int:
        """Trials the budget still allows (a large number when only hours bound it)."""
        if adaptive.budget_hours is not None and self.hours >= adaptive.budget_hours:
            return 0
        if adaptive.budget_trials is None:
            return 10**9
        return max(0, adaptive.budget_trials - self.trials)


def read_state(store: Store, sweep: str, adaptive: Adaptive, base: dict):
    """(x, y, seed) of the preset's measured members, and the budget spent (from the rows).
    A member is the preset's where its config is `member_at(base, x, seed)`: the rows of
    another preset run into the same study folder are not its points, nor its budget."""
    from analysis.reading.store import MissingResults, read_rows

    empty = np.empty(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows, _ = read_rows(store.uri, sweep, adaptive.name)
    except MissingResults:
        return (empty, empty, empty), Spent()
    rows = rows.filter(pl.col("config_hash").is_in(_own_hashes(rows, adaptive, base)))
    per = member_seconds(rows, adaptive.axis)
    spent = Spent(per.height, float(per["seconds"].sum()) / 3600.0,
                  per["x"].fill_null(np.nan).to_numpy(), per["seconds"].to_numpy(),
                  per["seed"].fill_null(-1).to_numpy())
    if adaptive.axis not in rows.columns:
        return (empty, empty, empty), spent
    return member_points(rows, adaptive.axis, adaptive.measure), spent


def _own_hashes(rows, adaptive: Adaptive, base: dict) -> list[str]:
    """The config hashes among the rows that are the preset's members (at their axis value
    and seed); [] where the rows do not carry the axis."""
    if adaptive.axis not in rows.columns:
        return []
    pairs = rows.select(adaptive.axis, "seed").drop_nulls().unique().iter_rows()
    return [member_at(base, adaptive, x, s).hash for x, s in pairs]


# ------------------------------------------------------------------------------- running


def run_members(members: list[MemberConfig], sweep: str, adaptive: Adaptive, store: Store,
                provenance: dict, max_concurrent: int | None, loggers=()) -> int:
    """Run the members without a row file through Ray Tune, one member per trial; returns how
    many ran (a finished config is never rerun)."""
    from icl_core.planning.resources import member_resources
    from icl_core.running.ray_launch import run_tune
    from icl_core.running.store_checkpoints import clear_leftovers
    from icl_core.running.trial import TrialSpec
    from icl_core.running.trial_pool import cluster_gpus

    done = store.finished(sweep, adaptive.name, [m.hash for m in members])
    todo = list({m.hash: m for m in members if m.hash not in done}.values())
    if not todo:
        return 0
    gpus = cluster_gpus()
    specs = []
    for member in todo:
        res = member_resources(member, gpus, adaptive.study.cpus_per_trial)
        specs.append(TrialSpec(sweep, adaptive.name, store.uri, [member.to_dict()],
                               threads=max(1, int(res.cpu)), gpu=res.gpu,
                               provenance=provenance, hashes=[member.hash]))
    clear_leftovers(store, sweep, adaptive.name, [m.hash for m in todo])  # what a killed run left
    label = f"{sweep}/{adaptive.name}"
    run_tune(specs, label, f"{store.study_dir(sweep, adaptive.name)}/tune", max_concurrent,
             loggers=loggers)
    return len(specs)


def write_manifest(store: Store, sweep: str, adaptive: Adaptive) -> None:
    """What analysis needs of the study (kind "adaptive": no fixed plan to expect)."""
    study = adaptive.study
    store.write_manifest(sweep, adaptive.name, {
        "sweep": sweep, "study": adaptive.name, "order": 0, "kind": "adaptive",
        "figure": study.figure, "figure_args": study.figure_args,
        "grid": [adaptive.axis, "seed"], "doc": adaptive.doc or study.doc, "expected": {}})


def _header(adaptive: Adaptive, preset: str) -> dict:
    return {"study": adaptive.name, "base_study": adaptive.study.name, "preset": preset,
            "axis": adaptive.axis, "bounds": list(adaptive.bounds), "form": adaptive.form,
            "goal": dataclasses.asdict(adaptive.goal), "goal_text": adaptive.goal.describe(),
            "budget_trials": adaptive.budget_trials, "budget_hours": adaptive.budget_hours,
            "candidates": adaptive.lattice().tolist()}


def _next_round(adaptive: Adaptive, state, spent: Spent, index: int) -> tuple[dict | None, str]:
    """The next round's plan (None and why the study stops) from the measured points."""
    (x, y, seeds) = state
    status = assess(x, y, adaptive.goal, adaptive.form, adaptive.n_boot, seeds=seeds)
    summary = {"n_points": int(x.size), "width": status.width, "spent_trials": spent.trials,
               "spent_hours": spent.hours}
    if status.reached:
        return summary, "goal reached"
    left = spent.left(adaptive)
    if left <= 0:
        return summary, "budget spent"
    try:
        cost = measured_cost(spent.x, spent.seconds) if adaptive.cost_weighted else None
        choice = choose(x, y, seeds, adaptive.lattice(), adaptive.goal, min(adaptive.batch, left),
                        adaptive.form, adaptive.fantasies, seed=index, cost=cost,
                        taken=spent.taken())
    except ValueError as exc:
        return summary, f"cannot choose: {exc}"
    plan = {"round": index, "done": False, "trials": [list(t) for t in choice.trials],
            "variance_now": choice.variance_now, "variance_after": choice.variance_after}
    return {**summary, "plan": plan}, ""


def run_adaptive(sweep: str, adaptive: Adaptive, preset: str, store: Store,
                 max_concurrent: int | None = None, provenance: dict | None = None,
                 max_rounds: int | None = None, loggers=()) -> dict:
    """Run (or resume) an adaptive study under a preset; returns the rounds log. `max_rounds`:
    run at most that many rounds in this call (round 0 counts); `loggers`: --logger."""
    adaptive = adaptive.for_preset(preset)
    base, _ = adaptive.study.base_and_grid(preset)
    label = f"{sweep}/{adaptive.name}"
    write_manifest(store, sweep, adaptive)
    log = {**read_log(store, sweep, adaptive.name, preset), **_header(adaptive, preset)}
    if not log["rounds"]:
        log["rounds"].append({"round": 0, "done": False,
                              "trials": [list(t) for t in adaptive.round0()]})
    ran = 0
    while True:
        current = log["rounds"][-1]
        if not current["done"]:
            if max_rounds is not None and ran >= max_rounds:
                log["stopped"] = f"paused after {ran} round(s) (max_rounds); re-run to go on"
                break
            members = [member_at(base, adaptive, x, s) for x, s in current["trials"]]
            write_log(store, sweep, adaptive.name, log)  # planned before it runs
            logger.info(f"[{label}] round {current['round']}: {len(members)} trials at "
                        f"{adaptive.axis} = {sorted({m for m, _ in current['trials']})}")
            current["ran"] = run_members(members, sweep, adaptive, store, provenance or {},
                                         max_concurrent, loggers)
            current.update(done=True, hashes=[m.hash for m in members],
                           finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            ran += 1
        state, spent = read_state(store, sweep, adaptive, base)
        summary, stop = _next_round(adaptive, state, spent, len(log["rounds"]))
        plan = summary.pop("plan", None)
        current["after"] = summary
        logger.info(f"[{label}] after round {current['round']}: {summary['n_points']} measured "
                    f"points, goal width {summary['width']:.3g} (target "
                    f"{adaptive.goal.target:g}), {spent.trials} trials, {spent.hours:.3f} "
                    "device-hours")
        if stop or _repeats(plan, store, sweep, adaptive, base):
            log["stopped"] = stop or "no new trials: the chosen configs all have row files"
            break
        log["rounds"].append(plan)
    write_log(store, sweep, adaptive.name, log)
    logger.info(f"[{label}] stopped: {log['stopped']}")
    return log


def _repeats(plan, store: Store, sweep: str, adaptive: Adaptive, base: dict) -> bool:
    """Whether every chosen trial already has a row file (a failed config chosen again)."""
    if plan is None:
        return False
    statuses = store.member_status(sweep, adaptive.name, [
        member_at(base, adaptive, x, s).hash for x, s in plan["trials"]])
    return all(status != "missing" for status, _ in statuses.values())


# -------------------------------------------------------------------------- command line


def dry_run(sweep: str, adaptive: Adaptive, preset: str, store: Store) -> None:
    """Print round 0 (its configs, how many are finished), the candidates, goal and budget."""
    adaptive = adaptive.for_preset(preset)
    base, _ = adaptive.study.base_and_grid(preset)
    members = [member_at(base, adaptive, x, s) for x, s in adaptive.round0()]
    done = store.finished(sweep, adaptive.name, [m.hash for m in members])
    budget = ", ".join(part for part in (
        f"{adaptive.budget_trials} trials" if adaptive.budget_trials is not None else "",
        f"{adaptive.budget_hours:g} device-hours" if adaptive.budget_hours is not None else "")
        if part)
    rounds = read_log(store, sweep, adaptive.name, preset)["rounds"]
    print(f"{sweep}/{adaptive.name} [{preset}]: adaptive over {adaptive.axis} in "
          f"{list(adaptive.bounds)}, law {adaptive.form}, goal: {adaptive.goal.describe()}\n"
          f"  round 0: {len(members)} trials ({adaptive.axis} = {adaptive.initial} x "
          f"{adaptive.seeds} seeds), {sum(m.hash in done for m in members)} already finished\n"
          f"  then rounds of <= {adaptive.batch} trials chosen from {adaptive.axis} = "
          f"{[int(v) if adaptive.integer else v for v in adaptive.lattice()]}\n"
          f"  budget: {budget}; rounds logged so far: {len(rounds)}"
          + (f" -- {adaptive.doc}" if adaptive.doc else ""))


def _parser(sweep: str, adaptives: list[Adaptive]):
    import argparse

    from icl.cli import add_log_args, add_logger_arg
    from icl_core.spec.study import PRESETS

    parser = argparse.ArgumentParser(
        prog=f"sweeps/{sweep}.py", description=f"Adaptive studies of {sweep!r}: "
        + "; ".join(f"{a.name} ({a.axis})" for a in adaptives))
    add = parser.add_argument
    add("--preset", default="cpu", choices=PRESETS)
    add("--study", help="one adaptive study (default: all)")
    add("--storage", help="where rows go (default $ICL_STORAGE, else ./results)")
    add("--address", help="Ray cluster address (default: embedded local Ray)")
    add("--no-dashboard", action="store_true",
        help="embedded local Ray without its dashboard (default: on, 127.0.0.1 only)")
    add("--dry-run", action="store_true", help="show round 0 and the budget, run nothing")
    add("--max-concurrent", type=int, default=None)
    add("--max-rounds", type=int, default=None, help="rounds to run in this call (resumable)")
    add("--target", type=float, default=None, help="override the goal's target width")
    add("--budget-trials", type=int, default=None, help="override the budget in trials")
    add_logger_arg(parser)
    add_log_args(parser)
    return parser


def with_overrides(adaptive: Adaptive, preset: str, args) -> Adaptive:
    """The declaration with the command line's --target / --budget-trials for this preset."""
    over = dict(adaptive.presets.get(preset, {}))
    if args.target is not None:
        over["goal"] = dataclasses.replace(over.get("goal", adaptive.goal), target=args.target)
    if args.budget_trials is not None:
        over["budget_trials"] = args.budget_trials
    return dataclasses.replace(adaptive, presets={**adaptive.presets, preset: over})


def main(sweep: str, adaptives: list[Adaptive], argv: list[str] | None = None) -> int:
    """The command line of a sweep file of adaptive studies; the exit status."""
    from icl.cli import logging_of

    args = _parser(sweep, adaptives).parse_args(argv)
    with logging_of(args):
        return _main(sweep, adaptives, args)


def _main(sweep: str, adaptives: list[Adaptive], args) -> int:
    import sys

    from icl.api import default_storage
    from icl.preflight import check_loggers, open_store, probe_address
    from icl_core.common.validation import unknown
    from icl_core.spec.config import ConfigError

    chosen = [with_overrides(a, args.preset, args) for a in adaptives
              if args.study in (None, a.name)]
    if not chosen:
        print(f"error: {unknown('--study', '', args.study, [a.name for a in adaptives])}",
              file=sys.stderr)
        return 2
    try:
        store = open_store(args.storage or default_storage())
        args.storage = store.uri  # without the keys it may have carried (pickled with Tune's state)
        for adaptive in chosen:  # every round-0 config validated before anything runs
            ready = adaptive.for_preset(args.preset)
            base, _ = ready.study.base_and_grid(args.preset)
            [member_at(base, ready, x, s) for x, s in ready.round0()]
        if not args.dry_run:  # the sweep files' checks (icl.api.preflight), same order
            check_loggers(args.logger, store.uri)
            probe_address(args.address)
            try:
                store.check_writable(sweep)
            except OSError as exc:
                raise ConfigError(f"--storage: cannot write to {store.redacted!r} ({exc})") from None
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for adaptive in chosen:
            dry_run(sweep, adaptive, args.preset, store)
        return 0
    return _run_all(sweep, chosen, store, args)


def _run_all(sweep: str, chosen: list[Adaptive], store: Store, args) -> int:

    from icl_core.running.ray_launch import Interrupted, init_ray
    from icl_core.storage.provenance import driver_provenance

    started = init_ray(args.address, dashboard=not args.no_dashboard)
    try:
        logs = [run_adaptive(sweep, a, args.preset, store, args.max_concurrent,
                             driver_provenance(), args.max_rounds, args.logger)
                for a in chosen]
    except Interrupted as exc:  # Ctrl-C: the round stays planned, not done (its log says so)
        logger.warning(exc)
        return exc.exit_status
    finally:
        if started:
            import ray

            ray.shutdown()
    return 0 if all(not log["stopped"].startswith("cannot") for log in logs) else 1
