"""Scoring sealed forecasts against the rows that now exist (see analysis.forecasts.forecast for the
commands and the rules): the hash check, the truth per point with its censoring bounds, the
verdict per point (`judge`), the coverage across points, `forecasts/score.md` and the figure.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from analysis.forecasts.points import member_values, study_rows, truth_at
from analysis.forecasts.seal import forecast_dir, verify
from icl_core.spec.adaptive import Measure

COVERED, MISS, CONSISTENT, PENDING, TAMPERED = (
    "covered", "miss", "censored, consistent", "pending", "tampered")
POINT_SCHEMA = {"forecast": pl.String, "x": pl.Float64, "predicted": pl.Float64,
                "lo": pl.Float64, "hi": pl.Float64, "measured": pl.Float64,
                "measured_lo": pl.Float64, "measured_hi": pl.Float64, "n_seeds": pl.Int64,
                "log10_error": pl.Float64, "status": pl.String, "note": pl.String}
REPORT = "score.md"
FIGURE = "forecasts"

__all__ = ["CONSISTENT", "COVERED", "MISS", "PENDING", "TAMPERED", "Scores", "judge",
           "load_forecasts", "score", "score_forecast"]


def judge(lo: float, hi: float, truth_lo: float, truth_hi: float) -> str:
    """The verdict on an interval [lo, hi] for a truth known to lie in [truth_lo, truth_hi]
    (equal ends: measured). A censored truth is a miss only when the interval lies wholly
    beyond its known bound (below a right-censoring cap, above a left one), covered when the
    interval holds every value it may take, else "censored, consistent"."""
    if truth_lo == truth_hi:
        return COVERED if lo <= truth_lo <= hi else MISS
    if hi < truth_lo or lo > truth_hi:
        return MISS
    if lo <= truth_lo and truth_hi <= hi:
        return COVERED
    return CONSISTENT


def _error(predicted: float, truth_lo: float, truth_hi: float) -> tuple[float, str]:
    """log10(measured / predicted), or its bound for a censored truth, and a note."""
    if truth_lo == truth_hi:
        return math.log10(truth_lo / predicted), ""
    if truth_lo > 0:
        return math.log10(truth_lo / predicted), (
            f"censored: truth >= {truth_lo:.4g}, the log error is a lower bound")
    return math.log10(truth_hi / predicted), (
        f"left-censored: truth <= {truth_hi:.4g}, the log error is an upper bound")


def load_forecasts(folder: Path) -> list[tuple[str, dict | None]]:
    """(file stem, document or None when it cannot be read as JSON) per forecast file."""
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            doc = None
        out.append((path.stem, doc))
    return out


def _truth(rows: pl.DataFrame, doc: dict) -> pl.DataFrame:
    """The truth per x run so far (analysis.forecasts.points.truth_at); empty when no row has
    the forecast's x column."""
    if doc["x"] not in rows.columns:
        return pl.DataFrame(schema={"x": pl.Float64})
    return truth_at(member_values(rows, doc["x"], Measure.from_dict(doc["measure"])))


def score_forecast(doc: dict, rows: pl.DataFrame) -> list[dict]:
    """One scored row per point of a (verified) forecast, against the study's rows."""
    truth = _truth(rows, doc)
    out = []
    for point in doc["points"]:
        x, predicted, lo, hi = point["x"], point["predicted"], point["lo"], point["hi"]
        row = {"forecast": doc["id"], "x": x, "predicted": predicted, "lo": lo, "hi": hi,
               "status": PENDING, "note": "no rows at this x yet"}
        here = truth.filter((pl.col("x") - x).abs() <= 1e-9 * abs(x))
        if here.height:
            t = here.row(0, named=True)
            error, note = _error(predicted, t["lo"], t["hi"])
            row.update(measured=t["value"], measured_lo=t["lo"], measured_hi=t["hi"],
                       n_seeds=t["n_seeds"], log10_error=error,
                       status=judge(lo, hi, t["lo"], t["hi"]), note=note)
        out.append(row)
    return out


@dataclass
class Scores:
    """Every point of every forecast of a study, scored: `points` (POINT_SCHEMA), the verified
    forecasts by id, the tampered files, the files written."""

    points: pl.DataFrame
    forecasts: dict[str, dict] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)

    def count(self, status: str) -> int:
        return int((self.points["status"] == status).sum())

    @property
    def n_scored(self) -> int:
        """Points with a decided verdict: covered or missed."""
        return self.count(COVERED) + self.count(MISS)

    @property
    def coverage(self) -> float:
        """Empirical coverage over the decided points (NaN when none)."""
        return self.count(COVERED) / self.n_scored if self.n_scored else math.nan

    def summary(self) -> str:
        level = {f"{doc['level']:.0%}" for doc in self.forecasts.values()}
        head = f"coverage of the {'/'.join(sorted(level)) or '90%'} intervals: "
        head += (f"{self.count(COVERED)}/{self.n_scored} = {self.coverage:.2f}" if self.n_scored
                 else "no point scored yet")
        return (head + f"; {self.count(CONSISTENT)} censored, consistent; "
                f"{self.count(PENDING)} pending; {len(self.tampered)} tampered")

    def markdown(self) -> str:
        def cell(v) -> str:
            if isinstance(v, float):
                return "nan" if math.isnan(v) else f"{v:.4g}"
            return "" if v is None else str(v)

        frame = self.points
        lines = [f"# Forecast scores\n\n{self.summary()}\n",
                 "| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
        lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
        return "\n".join(lines) + "\n"


def _draw(scores: Scores, folder: Path) -> list[Path]:
    try:
        from analysis.forecasts.figure import forecast_figure
    except ImportError:  # no matplotlib: the table only
        return []
    return forecast_figure(scores.forecasts, scores.points, folder, FIGURE)


def score(storage: str, sweep: str, study: str, write: bool = True, figure: bool = True,
          preset: str | None = None) -> Scores:
    """Score every forecast of a study (see the module doc of analysis.forecasts.forecast). With `write`,
    writes forecasts/score.md (and with `figure` forecasts/forecasts.png|pdf). `preset`: the
    truth from that preset's members alone."""
    folder = forecast_dir(storage, sweep, study)
    rows = study_rows(storage, sweep, study, preset)
    records, scores = [], Scores(pl.DataFrame(schema=POINT_SCHEMA))
    for stem, doc in load_forecasts(folder):
        if doc is None or not verify(doc) or doc.get("id") != stem:
            scores.tampered.append(stem)
            why = ("cannot be read" if doc is None else "content hash does not match"
                   if not verify(doc) else "file name differs from its id")
            records.append({"forecast": stem, "status": TAMPERED, "note": f"{why}: not scored"})
            continue
        scores.forecasts[stem] = doc
        records.extend(score_forecast(doc, rows))
    scores.points = pl.DataFrame(records, schema=POINT_SCHEMA)
    if write and folder.exists():
        report = folder / REPORT
        report.write_text(scores.markdown())
        scores.paths.append(report)
        if figure and scores.forecasts:
            scores.paths += _draw(scores, folder)
    return scores
