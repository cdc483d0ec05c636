"""What a study leaves beside its rows and says when it ends: its manifest (what analysis needs
of a study, so analysis never imports the orchestration) and its statuses (`report_study`,
called by the pool as soon as the study's own trials are done), with its figure and fit report
drawn by the `draw` the face passes down (icl.figures: the core imports no analysis).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from icl_core.spec.config import ConfigError, to_plain
from icl_core.spec.search import Search
from icl_core.spec.study import PRESETS

logger = logging.getLogger(__name__)


def study_manifest(sweep, study, presets=PRESETS, strict: bool = True) -> dict:
    """What analysis needs of a study, written beside its rows when it runs (read by
    analysis.regenerate, which never imports this module): its place in the sweep file, kind,
    figure and figure arguments, grid axes (a zipped axis as a list of keys), doc, and per
    preset the sorted config hashes of its plan ("expected"; grid studies only). `strict`:
    a preset that does not expand raises; otherwise it is recorded as None."""
    search = isinstance(study, Search)
    expected = {}
    for preset in [p for p in presets if p in study.presets] if not search else ():
        try:
            expected[preset] = sorted(m.hash for m in study.members(preset))
        except ConfigError:
            if strict:
                raise
            expected[preset] = None
    return {
        "sweep": sweep.name, "study": study.name,
        "order": [s.name for s in sweep.studies].index(study.name),
        "kind": "search" if search else "grid", "figure": study.figure,
        "figure_args": to_plain(study.figure_args),
        "grid": [list(k) if isinstance(k, tuple) else k for k in study.grid],
        "doc": study.doc, "expected": expected,
    }


def write_manifest(store, sweep, study) -> None:
    """The study's manifest (every preset's plan) into the store, before it runs."""
    store.write_manifest(sweep.name, study.name, study_manifest(sweep, study, strict=False))


@dataclass
class StudyOutcome:
    """How a grid study ended: its exit status, status counts and the figures drawn."""

    label: str  # "<sweep>/<study>"
    exit_status: int
    counts: dict = field(default_factory=dict)  # status -> members
    figures: list = field(default_factory=list)  # paths written


def report_study(sweep, plan, store, others: dict | None = None, draw=None) -> StudyOutcome:
    """A grid study's statuses, figure and fit report, once its trials are done (`others`:
    {hash: host:pid} of configs another driver holds, counted as claimed; `draw(sweep, study,
    storage_uri) -> [paths]`, its figures, None for none); never raises (a study's report must
    not end the pool's other studies)."""
    from icl_core.running.store_checkpoints import with_checkpoints

    study = plan.study
    label = f"{sweep.name}/{study.name}"
    try:
        statuses = store.member_status(sweep.name, study.name, [m.hash for m in plan.members])
        statuses.update((h, ("claimed", f"by another driver ({who})"))
                        for h, who in (others or {}).items() if statuses[h][0] == "missing")
        statuses = with_checkpoints(store, sweep.name, study.name, statuses)
        compact_study(store, sweep.name, study.name)
        return report_statuses(label, statuses, sweep, study, store, draw)
    except Exception as exc:
        logger.warning(f"[{label}] report failed: {type(exc).__name__}: {exc}")
        return StudyOutcome(label, 1)


def compact_study(store, sweep: str, study: str) -> None:
    """Merge a finished study's member row files (icl_core.storage.compaction) when there are at
    least COMPACT_AT of them; says what it merged; a failure is one line, never raised (the
    member files stay and remain the truth)."""
    from icl_core.storage.compaction import COMPACT_AT, compact

    try:
        result = compact(store, sweep, study, min_files=COMPACT_AT)
    except Exception as exc:
        logger.warning(f"[{sweep}/{study}] compaction failed ({type(exc).__name__}: {exc}); the member "
                       "files stay")
        return
    if result.merged or result.removed or result.rewritten:
        logger.info(result.line())


def report_statuses(label, statuses, sweep, study, store, draw=None) -> StudyOutcome:
    """Say the study's statuses, draw its figure (`draw`, when it has one and a member ended
    ok); its StudyOutcome."""
    kinds = ("ok", "diverged", "pruned", "failed", "missing", "claimed")
    counts = {s: sum(1 for v in statuses.values() if v[0] == s) for s in kinds}
    figures = []
    logger.info(f"[{label}] finished: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n or s not in ("pruned", "claimed")))
    for h, (status, reason) in statuses.items():
        if status in ("failed", "diverged", "missing"):
            logger.info(f"[{label}]   {status} {h}: {reason}")
    failed_figure = False
    if study.figure and draw is not None and counts["ok"]:
        try:
            figures = draw(sweep.name, study.name, store.uri)
        except Exception as exc:  # the rows are stored; say what failed and how to retry
            failed_figure = True
            logger.warning(f"[{label}] figure failed ({type(exc).__name__}: {exc}); the rows are stored: "
                           f"icl regenerate {sweep.name} --study {study.name} "
                           f"--storage {store.redacted}")
    return StudyOutcome(label, exit_status(label, counts, failed_figure), counts, figures)


def exit_status(label: str, counts: dict, failed_figure: bool) -> int:
    """1 when a member failed or is missing, the figure failed, or no member ended ok but
    some diverged (a study of nothing but diverged members); else 0."""
    if counts["diverged"] and not counts["ok"] and not counts["failed"] + counts["missing"]:
        logger.warning(f"[{label}] every member diverged: exit status 1")
        return 1
    return 1 if counts["failed"] or counts["missing"] or failed_figure else 0
