"""What the Python API (icl.api) hands back: `RunResult` of a run (status counts per
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

    def as_dict(self) -> dict:
        """The run as plain data for JSON (`--json`): sweep, preset, storage, exit_status, ok;
        per study (in the plan's order) its kind and status counts; the figures written."""
        return {"sweep": self.sweep, "preset": self.preset, "storage": self.storage,
                "exit_status": self.exit_status, "ok": self.ok,
                "studies": [{"study": name, "kind": "grid" if hashes is not None else "search",
                             **self.summary[name]} for name, hashes in self.hashes.items()],
                "figures": [str(p) for p in self.figures]}

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


def run_result(sweep, plans, store, preset: str, report) -> RunResult:
    """The RunResult of a run: counts and figures as each grid study's report returned them
    (`report`: icl_core.running.plans.RunReport), else read from the store (searches, a run
    with nothing left)."""
    summary, figures, hashes = {}, [], {}
    for plan in plans:
        name = plan.study.name
        outcome = report.outcomes.get(f"{sweep.name}/{name}")
        counts = (outcome.counts if outcome else None) or stored_counts(store, sweep, plan)
        summary[name] = {k: counts.get(k, 0) for k in KINDS}
        figures += [Path(p) for p in (outcome.figures if outcome else ())]
        hashes[name] = None if plan.is_search else [m.hash for m in plan.members]
    return RunResult(sweep.name, preset, store.uri, summary, figures, report.exit_status, hashes)


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
    members_per_trial: list[int] = field(default_factory=list)  # the sizes its trials pack, sorted
    memory_bytes: float | None = None  # peak of its largest member (None: nothing left to run)
    memory_limit_bytes: float | None = None  # what that member must fit ...
    memory_limit: str = ""  # ... and which memory that is ("this machine's RAM", a GPU's)
    largest_member: str = ""  # that member's config hash
    grid: dict = field(default_factory=dict)  # axis ("a,b": zipped) -> its values, as planned


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
        """One row per study (its grid left out: axes differ from study to study)."""
        import dataclasses

        import polars as pl

        return pl.DataFrame([{k: v for k, v in dataclasses.asdict(s).items() if k != "grid"}
                             for s in self.studies])

    def as_dict(self) -> dict:
        """The plan as plain data for JSON (`--dry-run --json`): the cluster planned for, per
        study its numbers (`StudyPlan`, with its sweep and `gpu_minutes`, the cost model's
        time on one GPU), and the totals."""
        import dataclasses

        studies = [{"sweep": self.sweep, **dataclasses.asdict(s),
                    "gpu_minutes": s.h100_hours * 60} for s in self.studies]
        return {"sweep": self.sweep, "preset": self.preset, "storage": self.storage,
                "gpus": self.gpus, "cpus": self.cpus, "unit": self.unit, "studies": studies,
                "total": {"configs": self.configs, "trials": self.trials,
                          "device_hours": self.device_hours, "wall_hours": self.wall_hours,
                          "lower_bound_hours": self.lower_bound_hours,
                          "utilisation": self.utilisation, "h100_hours": self.h100_hours,
                          "gpu_minutes": self.h100_hours * 60}}

    def __str__(self) -> str:
        return self.text


def plan_data(sweep, plans, store, opts, cost, text: str) -> PlanData:
    """PlanData from the plan's cost (icl.plan_cost.PlanCost, as print_plan made it)."""
    from icl.plan_cost import (
        device_hours,
        finished_count,
        largest_memory,
        study_grid,
    )

    studies = []
    for plan, h100_s, trials in cost.by_study:
        memory = largest_memory(plan, cost.gpus)
        member, estimate, limit, where = memory or (None, None, None, "")
        studies.append(StudyPlan(
            plan.study.name, "search" if plan.is_search else "grid", plan.trials, len(trials),
            device_hours(trials), cost.schedule(trials).makespan_s / 3600, h100_s / 3600,
            finished_count(sweep, plan, store), plan.study.doc,
            sorted({t.members for t in trials}), estimate.total if estimate else None, limit, where,
            member.hash if member else "", study_grid(plan, opts)))
    sched = cost.schedule()
    return PlanData(sweep.name, opts.preset, store.uri, cost.gpus, cost.cpus, cost.unit,
                    studies, cost.configs, len(cost.trials), cost.device_hours,
                    sched.makespan_s / 3600, sched.lower_bound_s / 3600, sched.utilisation,
                    cost.h100_s / 3600, text)
