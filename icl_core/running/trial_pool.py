"""One pool of trials: every selected grid study of one or several sweep files goes to Ray Tune
as one set of trials, longest first, so no study waits for another's straggler.

`plan_pool` plans each study's unfinished members into cost-balanced trials
(icl_core.planning.resources.plan_trials with the cost model); `run_pool` runs them in one Tune run and
reports each study (statuses, figures, fit report) as soon as its own trials are done, then
every study the run left unreported. Searches run after the pool (icl_core.running.plans).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from icl_core.common.validation import ConfigError
from icl_core.running.tune_trainable import SPEC_KEY

logger = logging.getLogger(__name__)


@dataclass
class PoolStudy:
    sweep: object  # Sweep
    plan: object  # Plan (a grid study)
    trials: list  # PlannedTrial of its unfinished members
    claims: object = None  # icl_core.storage.claims.Claims held for them while they run
    others: dict = field(default_factory=dict)  # {hash: host:pid} held by another driver
    left: int = 0  # trials not ended yet
    reported: bool = False

    @property
    def label(self) -> str:
        return f"{self.sweep.name}/{self.plan.study.name}"


@dataclass
class StudyPool:
    """The studies of one Tune run and their trials' planned seconds, keyed by trial config."""

    studies: list[PoolStudy]
    report: object  # callable(PoolStudy) -> StudyOutcome (study_report)
    by_spec: dict = field(default_factory=dict)  # spec JSON -> (PoolStudy, seconds)
    outcomes: dict = field(default_factory=dict)  # label -> StudyOutcome

    def __post_init__(self):
        for study in self.studies:
            study.left = len(study.trials)

    def add(self, spec_json: str, study: PoolStudy, seconds: float) -> None:
        self.by_spec[spec_json] = (study, seconds)

    @property
    def total_seconds(self) -> float:
        return sum(seconds for _, seconds in self.by_spec.values())

    def seconds(self, config: dict) -> float:
        return self.by_spec.get(config.get(SPEC_KEY), (None, 0.0))[1]

    def trial_ended(self, config: dict) -> None:
        """A trial finished or failed for good: its study is reported once all of its are."""
        entry = self.by_spec.get(config.get(SPEC_KEY))
        if entry is None:
            return
        study = entry[0]
        study.left -= 1
        if study.left == 0:
            self.finish(study)

    def finish(self, study: PoolStudy) -> None:
        if not study.reported:
            study.reported = True
            outcome = self.report(study)
            self.outcomes[outcome.label] = outcome

    @property
    def status(self) -> int:
        """The pool's exit status: every reported study's, or-ed."""
        status = 0
        for outcome in self.outcomes.values():
            status |= outcome.exit_status
        return status

    def counts(self) -> str:
        done = sum(1 for s in self.studies if s.left == 0)
        if len(self.studies) < 2:
            return ""
        running = [f"{s.label} {len(s.trials) - s.left}/{len(s.trials)}"
                   for s in self.studies if 0 < s.left < len(s.trials)]
        return (f"studies {done}/{len(self.studies)} done"
                + (f" ({', '.join(running[:3])}{', ...' if len(running) > 3 else ''})"
                   if running else "") + ", ")


# ------------------------------------------------------------------------ the cluster


def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0


def cluster_cpus() -> float:
    import os

    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    return float(os.cpu_count() or 1)


# ------------------------------------------------------------------------ the cost model

CALIBRATE_ABOVE_S = 600.0  # calibrate when the FLOP estimate of the work exceeds this


def study_rows(store, sweep: str, study: str):
    """The throughput columns of a study's finished rows (a Polars frame), or None."""
    import polars as pl

    from icl_core.storage.store import storage_uri

    if "://" in storage_uri(store.uri):  # the cost model learns from local stores only
        return None
    from icl_core.storage.store import COMPACTED, LAST_METRIC

    folder = Path(store.study_dir(sweep, study))
    files = sorted((folder / "rows").glob("*.parquet"))
    columns = ["config_json", "step_time_s", "stack_size", "device_type", "threads",
               "wall_time_s", "train_time_s", "peak_memory_mb", "flops_fraction"]
    frames = []
    for path in files:
        try:
            frames.append(pl.read_parquet(path, columns=columns, n_rows=1))
        except Exception:  # a file without these columns (older rows) or unreadable: skipped
            continue
    for path in sorted((folder / COMPACTED).glob("*.parquet")):  # one row per member
        try:
            frames.append(pl.scan_parquet(path).filter(pl.col("metric") == LAST_METRIC)
                          .select(columns).collect())
        except Exception:
            continue
    return pl.concat(frames, how="vertical_relaxed") if frames else None


def cost_model(gpus: float, threads: int, store=None, studies=(), calibrate: bool = False):
    """The cost model of the cluster's device kind: cached calibrations, then what finished
    rows of `studies` ((sweep, study name, members)) teach, then (with `calibrate`, and only
    when the FLOP estimate of the work exceeds CALIBRATE_ABOVE_S) a calibration of the shapes
    not yet known: on this process's device, or on a cluster GPU through Ray."""
    import torch

    from icl_core.planning import calibration, cost
    on_gpu = gpus > 0
    name = torch.cuda.get_device_name(0) if on_gpu and torch.cuda.is_available() else None
    model = cost.load(cost.device_label("cuda" if on_gpu else "cpu", threads, name), threads)
    members = [m for _, _, ms in studies for m in ms]
    if store is not None:
        for sweep, study, _ in studies:
            cost.learn_from_rows(model, study_rows(store, sweep, study))
    if not calibrate or sum(model.member_seconds(m) for m in members) < CALIBRATE_ABOVE_S:
        return model
    import time

    start = time.monotonic()
    try:
        if on_gpu and name is None:
            model = remote_calibration(model, members, threads)
        elif calibration.calibrate(model, members, stacks=on_gpu):
            cost.save(model)
    except calibration.CalibrationFailed as exc:
        if not exc.member_hash:
            raise ConfigError(f"calibration on a cluster GPU failed: {exc.error} (nothing was "
                              "trained)") from None
        where = next((f"{sweep}/{study}" for sweep, study, ms in studies
                      if any(m.hash == exc.member_hash for m in ms)), "?")
        raise ConfigError(f"[{where}@{exc.member_hash[:8]}] calibration failed: {exc.error} "
                          "(nothing was trained; fix that member's config)") from None
    known = sum(1 for v in model.table.values() if v.source == "calibration")
    logger.info(f"cost model: {known} step shape(s) calibrated on {model.device} "
                f"({time.monotonic() - start:.1f} s; cached in {cost.cache_file()})")
    return model


def remote_calibration(model, members: list, threads: int):
    """Calibrate on one cluster GPU (the driver has none): a Ray task times the shapes and
    sends back its device's step times, cached under that device's name."""
    import ray

    from icl_core.planning import calibration, cost
    @ray.remote(num_gpus=1, num_cpus=threads)
    def _calibrate(members, threads):
        import torch

        try:
            label = cost.device_label("cuda", threads, torch.cuda.get_device_name(0))
            remote = cost.load(label, threads)
            calibration.calibrate(remote, members, stacks=True)
        except calibration.CalibrationFailed as exc:  # sent back as data: one line at the driver
            return None, {"failed": [exc.member_hash, exc.error]}
        except Exception as exc:  # noqa: BLE001  (the worker's GPU, not a member)
            return None, {"failed": ["", calibration.short_error(exc)]}
        cost.save(remote)
        return label, remote.to_json()

    label, table = ray.get(_calibrate.remote(members, threads))
    if "failed" in table:
        raise calibration.CalibrationFailed(*table["failed"])
    learned = cost.CostModel.from_json(label, threads, table)
    learned.table.update({k: v for k, v in model.table.items() if v.source == "rows"})
    return learned


# --------------------------------------------------------------------- planning and running


def study_trials(plan, gpus: float, cpus: float, pack: int | str = "auto", stack: str = "auto",
                 target_s: float | None = None, members=None, model=None) -> list:
    """A grid study's members (or `members`, e.g. its unfinished ones) as cost-balanced
    PlannedTrials (icl_core.planning.resources.plan_trials: `pack` members per trial or auto,
    trials of about `target_s` seconds, `stack` mode); `model`: the cost model (default: the
    cluster's device kind, cached calibrations, no calibration here)."""
    from icl_core.planning.resources import plan_trials

    if model is None:
        model = cost_model(gpus, max(1, int(plan.study.cpus_per_trial)))
    return plan_trials(plan.members if members is None else members, gpus,
                       plan.study.cpus_per_trial, pack, cpus, stack, cost=model,
                       target_s=target_s)


def plan_pool(entries, store, provenance, launch, gpus: float, cpus: float):
    """(PoolStudy per grid study, [(TrialSpec, PoolStudy, seconds)] longest first). Clears
    what a killed run left in each study's checkpoints/ (of the members this driver claimed)
    and says how many of them go on from a checkpoint."""
    from icl_core.running.store_checkpoints import clear_leftovers
    from icl_core.running.study_report import write_manifest
    from icl_core.running.trial import TrialSpec
    from icl_core.storage.claims import plan_claims, skipped_line

    todo_of, claimed = {}, {}
    for sweep, plan in entries:
        label = f"{sweep.name}/{plan.study.name}"
        write_manifest(store, sweep, plan.study)
        claims, mine, others = plan_claims(store, sweep.name, plan.study.name,
                                           [m.hash for m in plan.members])
        mine_set = set(mine)
        resuming = len(clear_leftovers(store, sweep.name, plan.study.name, mine) & mine_set)
        todo_of[id(plan)] = [m for m in plan.members if m.hash in mine_set]
        claimed[id(plan)] = (claims, others)
        logger.info(f"[{label}] {len(plan.members)} configs, {len(plan.members) - len(mine) - len(others)}"
                    f" already finished, running {len(mine)}"
                    + (f" ({resuming} with a checkpoint to go on from)" if resuming else ""))
        if others:
            logger.info(f"[{label}] {skipped_line(others)}")
    threads = max((int(p.study.cpus_per_trial) for _, p in entries), default=1)
    try:
        model = cost_model(gpus, max(1, threads), store,
                           [(s.name, p.study.name, todo_of[id(p)]) for s, p in entries],
                           calibrate=True)
    except ConfigError:  # nothing runs: this driver's claims go at once
        for claims, _ in claimed.values():
            claims.release()
        raise
    studies, specs = [], []
    for sweep, plan in entries:
        trials = study_trials(plan, gpus, cpus, launch.pack, launch.stack, launch.target_s,
                              todo_of[id(plan)], model)
        study = PoolStudy(sweep, plan, trials, *claimed[id(plan)])
        studies.append(study)
        for t in trials:
            spec = TrialSpec(sweep.name, plan.study.name, store.uri,
                             [m.to_dict() for m in t.members], threads=max(1, int(t.res.cpu)),
                             gpu=t.res.gpu, provenance=provenance,
                             hashes=[m.hash for m in t.members], stack=t.stack,
                             driver=study.claims.owner.driver, interleave=t.interleave)
            specs.append((spec, study, t.seconds))
    specs.sort(key=lambda s: -s[2])  # longest first: no straggler starts last
    return studies, specs


def run_pool(entries, store, provenance, launch, label: str, tune_dir: str,
             draw=None) -> tuple[int, dict]:
    """Run the grid studies `entries` ((sweep, plan) pairs) as one pool: (the exit status, each
    study's StudyOutcome by label); `launch`: icl_core.running.plans.Launch; `draw`: each
    study's figures as it ends (icl_core.running.study_report.report_study).
    Raises icl_core.running.ray_launch.Interrupted after Ctrl-C, once every study is reported."""
    from icl_core.running.ray_launch import Interrupted, run_tune
    from icl_core.running.study_report import report_study

    studies, specs = plan_pool(entries, store, provenance, launch, cluster_gpus(),
                               cluster_cpus())
    pool = StudyPool(studies, report=lambda s: report_study(s.sweep, s.plan, store, s.others,
                                                             draw))
    for spec, study, seconds in specs:
        pool.add(spec.to_json(), study, seconds)
    for study in studies:
        if not study.trials:
            pool.finish(study)
    interrupted = None
    with contextlib.ExitStack() as held:  # every study's claims refreshed while trials run
        for study in studies:
            held.enter_context(study.claims.keep())
        if specs:
            # share x seconds, as --dry-run counts device-hours (icl.plan_cost.device_hours)
            hours = sum((s.gpu or s.threads) * sec for s, _, sec in specs) / 3600
            logger.info(f"[{label}] {len(specs)} trials of {sum(1 for s in studies if s.trials)} "
                        f"studies in one pool, longest first (~{hours:.2f} device-h planned; --pack "
                        f"{launch.pack}, --stack {launch.stack})")
            try:
                run_tune([s for s, _, _ in specs], label, tune_dir, launch.max_concurrent, pool,
                         list(launch.loggers))
            except Interrupted as exc:  # raised on once the summaries say what was stored
                interrupted = exc
            except Exception as exc:  # the summaries below still say what was stored
                logger.warning(f"[{label}] Ray Tune stopped: {type(exc).__name__}: {exc}; what finished "
                               "is stored, run the same command again to finish the rest")
        for study in studies:  # every study is reported, whatever Tune did
            pool.finish(study)
    if interrupted is not None:
        raise interrupted
    return pool.status, pool.outcomes
