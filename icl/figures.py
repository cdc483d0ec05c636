"""A study's figures and fit report, drawn as it ends: the function the face hands the core's
pool (icl_core.running.study_report.report_study), so the core never imports analysis."""

from __future__ import annotations

from collections.abc import Callable

Draw = Callable[[str, str, str], list]


def figure_drawer(figures: str | None, no_figures: bool = False) -> Draw | None:
    """draw(sweep, study, storage_uri) -> the paths written (figures and fit reports) into
    `figures` (default ./figures); None with `no_figures`."""
    if no_figures:
        return None

    def draw(sweep: str, study: str, storage_uri: str) -> list[str]:
        from analysis.regenerate import regenerate

        summaries = regenerate(sweep, study, storage=storage_uri, out=figures)
        return [str(p) for s in summaries for p in (*s.get("paths", ()), *s.get("report", ()))]

    return draw
