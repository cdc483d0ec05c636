"""What the Python API (icl_core.interface.api) hands back: `RunResult` of a run (status counts per
study, figures written, the rows on demand) and `PlanData`, the plan --dry-run prints, as data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from icl_core.common.validation import unknown

KINDS = ("ok", "diverged", "pruned", "failed", "missing", "claimed")


@dataclass
class RunResult:
    """A run of a sweep file's studies.

    summary: per study, how many of its configs ended in each status (KINDS: "missing", no row
    file; "claimed", trained by another driver at the time); figures: the files the run wrote
    (figures and fit reports); exit_status: the command line's (0 all ok, 1 a failed or
    missing config or figure, 2 bad input met while running, 130 stopped by Ctrl-C)."""

    sweep: str
    preset: str
    storage: str  # the store's URI
    summary: dict[str, dict[str, int]]
    figures: list[Path]
    exit_status: int
    hashes: dict[str, list[str] | None] = field(repr=False)  # per study; None: a search

    @property
    def studies(self) -> list[str]:
        return list(self.hashes)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def rows(self, study: str | None = None):
        """The rows (a Polars DataFrame) of the run's studies, or of one: of a grid study only
        its configs in this run's plan (a store also holds other presets' rows), of a search
        every stored trial. Failed and diverged configs are kept with their status and
        reason. Read through analysis.reading.store (imported here, on call: the orchestration does
        not load analysis until asked); raises analysis.reading.store.MissingResults when none."""
        import polars as pl

        from analysis.reading.store import MissingResults, concat_rows, missing_message, read_rows

        if study is not None and study not in self.hashes:
            raise unknown("study", "", study, self.studies)
        frames = []
        for name in [study] if study else self.studies:
            hashes = self.hashes[name]
            try:
                rows, _ = read_rows(self.storage, self.sweep, name, hashes)
            except MissingResults:
                if study:
                    raise
                continue
            frames.append(rows if hashes is None else
                          rows.filter(pl.col("config_hash").is_in(hashes)))
        if not frames:
            raise MissingResults(missing_message(self.sweep, None, self.storage))
        return concat_rows(frames)


def stored_counts(store, sweep, plan) -> dict[str, int]:
    """A study's status counts read from the store (a grid: its plan's configs; a search:
    every stored trial)."""
    if plan.is_search:
        statuses = store.statuses(sweep.name, plan.study.name)
    else:
        statuses = store.member_status(sweep.name, plan.study.name,
                                       [m.hash for m in plan.members])
    return {k: sum(1 for s, _ in statuses.values() if s == k) for k in KINDS}


def run_result(sweep, plans, store, opts, exit_status: int) -> RunResult:
    """The RunResult of a run: counts and figures as each study's report recorded them
    (icl_core.running.study_report.record), else read from the store (searches, a run with nothing left)."""
    summary, figures, hashes = {}, [], {}
    for plan in plans:
        name = plan.study.name
        recorded = opts.outcomes.get(f"{sweep.name}/{name}", {})
        counts = recorded.get("counts") or stored_counts(store, sweep, plan)
        summary[name] = {k: counts.get(k, 0) for k in KINDS}
        figures += [Path(p) for p in recorded.get("figures", ())]
        hashes[name] = None if plan.is_search else [m.hash for m in plan.members]
    return RunResult(sweep.name, opts.preset, store.uri, summary, figures, exit_status, hashes)


@dataclass
class StudyPlan:
    """One study's line of the plan (--dry-run). configs: grid configs, or a search's Optuna
    trials; trials: Ray Tune trials (packed members); device_hours: by the cost model, GPU-h on
    GPUs else CPU-h; wall_hours: the study alone on the planned cluster; h100_hours: the
    planner's estimate on one H100-class GPU; finished: configs (Optuna trials) in the store."""

    study: str
    kind: str  # "grid" or "search"
    configs: int
    trials: int
    device_hours: float
    wall_hours: float
    h100_hours: float
    finished: int
    doc: str = ""


@dataclass
class PlanData:
    """The plan --dry-run prints: per study (`studies`) and in total, the whole file's studies
    as one pool, longest first, on the planned cluster (`gpus`, `cpus`). `text`: the printed
    plan; `frame()`: the studies as a Polars DataFrame."""

    sweep: str
    preset: str
    storage: str
    gpus: float
    cpus: float
    unit: str  # "GPU-h" or "CPU-h"
    studies: list[StudyPlan]
    configs: int
    trials: int
    device_hours: float
    wall_hours: float
    lower_bound_hours: float
    utilisation: float
    h100_hours: float
    text: str = field(repr=False, default="")

    def frame(self):
        import dataclasses

        import polars as pl

        return pl.DataFrame([dataclasses.asdict(s) for s in self.studies])

    def __str__(self) -> str:
        return self.text


def finished_count(sweep, plan, store) -> int:
    """Configs (a search: Optuna trials) of the plan already in the store."""
    if not plan.is_search:
        return len(store.finished(sweep.name, plan.study.name, [m.hash for m in plan.members]))
    from icl_core.running.optuna_searcher import finished_trials, journal_path, journal_study_name

    journal = journal_path(store.uri, sweep.name, plan.study.name)
    return sum(finished_trials(journal, journal_study_name(journal, sweep.name, plan.study.name, p))
               for p in plan.members)


def plan_data(sweep, plans, store, opts, cost, text: str) -> PlanData:
    """PlanData from the plan's cost (icl_core.interface.plan_cost.PlanCost, as print_plan made it)."""
    from icl_core.interface.plan_cost import device_hours

    studies = []
    for plan, h100_s, trials in cost.by_study:
        studies.append(StudyPlan(
            plan.study.name, "search" if plan.is_search else "grid", plan.trials, len(trials),
            device_hours(trials), cost.schedule(trials).makespan_s / 3600, h100_s / 3600,
            finished_count(sweep, plan, store), plan.study.doc))
    sched = cost.schedule()
    return PlanData(sweep.name, opts.preset, store.uri, cost.gpus, cost.cpus, cost.unit,
                    studies, cost.configs, len(cost.trials), cost.device_hours,
                    sched.makespan_s / 3600, sched.lower_bound_s / 3600, sched.utilisation,
                    cost.h100_s / 3600, text)
