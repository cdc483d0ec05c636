"""Back-test the forecast intervals on any row store: hold out a study's largest x, forecast
it from the rest, score against what was measured.

    icl backtest --storage S [--sweep W] [--study S] [--level 0.8]   (icl.commands.backtests)
    result = backtest_store("results", sweep="depth_scaling")     # Backtest: .table, .summary

Which studies. Every study of the store (of one sweep, or one study) whose rows have a numeric
scaling axis with >= 4 distinct x values: the axes of its grid in its manifest (study.json;
without one, every numeric config column `section.name` that varies), seeds excluded. The
other grid axes split the study into series (e.g. one per mixer; keys zipped with the axis,
like train.step_size with train.steps, do not); each series is back-tested
on its own. The measure is each member's final `--metric` at its query position
(analysis.forecasts.points.Measure: --statistic over prompts, --predictor, --test-dist; by
default the `train` test distribution, else the first one the rows hold).

The back-tests, the method (ours) and the two naive forecasters, and the scores are those of
analysis.backtests.interval; `summary` holds, per method, the back-tests, the empirical coverage
of the `level` intervals, the median |log10 error| and the mean interval score; `reliability`
the empirical coverage at each nominal level of `RELIABILITY_LEVELS` (per method). Only the columns the
measure needs are read (analysis.reading.store.read_rows(columns=...)).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow.fs as pafs

from analysis.backtests.interval import (
    LEVEL,
    RELIABILITY_LEVELS,
    SeriesGrid,
    backtest_grids,
    reliability,
    summarize,
)
from analysis.forecasts.points import exact, member_values
from analysis.reading.store import MissingResults, locate, read_rows
from icl_core.spec.adaptive import Measure
from icl_core.storage.store import read_manifest, redacted

MIN_X = 4
NOT_AXES = {"seed", "task_seed"}
READ = ["seed", "step", "metric", "value", "statistic", "position", "test_dist", "predictor"]
TABLE_COLUMNS = ("sweep", "study", "axis", "series", "held_out", "x", "method", "predicted",
                 "lo", "hi", "measured", "n_seeds", "log10_error", "hit", "interval_score")

__all__ = ["MIN_X", "Backtest", "RELIABILITY_LEVELS", "StoreError", "backtest_store",
           "summary_markdown", "table_markdown"]


class StoreError(ValueError):
    """A store, sweep or study that is not there (one line, exit 2)."""


@dataclass
class Backtest:
    """Every scored back-test (`table`, TABLE_COLUMNS), the studies that qualified and why
    the others did not, per-method summary and reliability (coverage per nominal level)."""

    table: pl.DataFrame
    level: float
    studies: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    reliability: dict[str, dict[float, float]] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)  # every row of backtest_grid, with hits

    @property
    def summary(self) -> dict[str, dict]:
        return summarize(self.table.to_dicts(), self.level)


def _folders(loc, folder: str) -> list[str]:
    infos = loc.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos
                  if i.type == pafs.FileType.Directory)


def _has_rows(loc, sweep: str, study: str) -> bool:
    return any(loc.fs.get_file_info(f"{loc.study_dir(sweep, study)}/{sub}").type
               == pafs.FileType.Directory for sub in ("rows", "compacted"))


def studies_of(storage: str, sweep: str | None, study: str | None) -> list[tuple[str, str]]:
    """(sweep, study) pairs with rows; StoreError naming the valid choices otherwise."""
    loc = locate(storage)
    if loc.local and loc.fs.get_file_info(loc.root).type != pafs.FileType.Directory:
        raise StoreError(f"--storage: no store at {redacted(storage)!r}")
    sweeps = [s for s in _folders(loc, loc.root)
              if any(_has_rows(loc, s, st) for st in _folders(loc, f"{loc.root}/{s}"))]
    if sweep is not None and sweep not in sweeps:
        raise StoreError(f"--sweep: no sweep {sweep!r} with rows under {redacted(storage)}; valid "
                         f"choices: {', '.join(sweeps) or '(none)'}")
    pairs = []
    for name in [sweep] if sweep else sweeps:
        names = [st for st in _folders(loc, f"{loc.root}/{name}") if _has_rows(loc, name, st)]
        if study is not None:
            if study not in names:
                raise StoreError(f"--study: no study {study!r} with rows in {name} under "
                                 f"{redacted(storage)}; valid choices: {', '.join(names) or '(none)'}")
            names = [study]
        pairs += [(name, st) for st in names]
    if study is not None and sweep is None and not pairs:
        raise StoreError(f"--study {study!r}: name its --sweep")
    return pairs


def _grid_axes(manifest: dict | None) -> list[list[str]] | None:
    """The manifest's grid axes, seeds excluded, as groups: a zipped axis's keys stay one group
    (train.steps with its train.step_size is one axis, not two); None: no manifest."""
    if manifest is None:
        return None
    groups = [[key] if isinstance(key, str) else list(key) for key in manifest.get("grid") or []]
    return [g for g in ([a for a in g if a not in NOT_AXES] for g in groups) if g]


def _config_columns(storage: str, sweep: str, study: str) -> list[str]:
    from analysis.reading.store import scan_rows

    frame = scan_rows(storage, sweep, study)[0]
    return [c for c in frame.collect_schema().names()
            if "." in c and c.split(".")[0] in ("model", "task", "train", "eval")]


def _measure(rows: pl.DataFrame, base: Measure) -> Measure | None:
    """The measure with its test distribution resolved (train, else the first the rows of
    this metric hold); None when the rows hold no value of it."""
    mine = rows.filter((pl.col("metric") == base.metric) & (pl.col("predictor") == base.predictor)
                       & (pl.col("statistic") == base.statistic))
    dists = sorted(d for d in mine["test_dist"].unique().to_list() if d is not None)
    if not dists:
        return None
    dist = base.test_dist if base.test_dist in dists else dists[0]
    return Measure(base.metric, base.statistic, base.predictor, dist)


def _series_rows(rows: pl.DataFrame, axis: str, others: list[str]):
    """(label, rows) per combination of the other axes' values."""
    others = [o for o in others if o in rows.columns and rows[o].n_unique() > 1]
    if not others:
        yield "", rows
        return
    for key, part in rows.group_by(others, maintain_order=True):
        label = ", ".join(f"{o}={v}" for o, v in zip(others, key, strict=True))
        yield label, part


def _grid(members: pl.DataFrame) -> SeriesGrid:
    x = np.sort(members["x"].unique().to_numpy())
    xi = np.searchsorted(x, members["x"].to_numpy())
    return SeriesGrid(x, xi, members["lo"].to_numpy()[None, :])


def _study(storage: str, sweep: str, study: str, base: Measure
           ) -> tuple[list[tuple[dict, SeriesGrid]], str | None]:
    """((labels, grid) per series to back-test, why the study does not qualify or None)."""
    loc = locate(storage)
    groups = _grid_axes(read_manifest(loc.fs, loc.study_dir(sweep, study)))
    if groups is None:
        groups = [[c] for c in _config_columns(storage, sweep, study) if c not in NOT_AXES]
    axes = [a for g in groups for a in g]
    if not axes:
        return [], "no grid axis"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows, _ = read_rows(storage, sweep, study, columns=READ + axes)
    measure = _measure(rows, base)
    if measure is None:
        return [], f"no {base.metric} rows ({base.predictor}, {base.statistic})"
    numeric = [a for a in axes if a in rows.columns and rows.schema[a].is_numeric()]
    counts = {a: rows[a].drop_nulls().n_unique() for a in numeric}
    # per group, its first key with enough x (a zipped partner is the same axis: not a series)
    chosen = [(g, a) for g in groups
              for a in [next((a for a in g if counts.get(a, 0) >= MIN_X), None)] if a]
    if not chosen:
        shown = ", ".join(f"{a} {counts[a]}" for a in numeric) or "none numeric"
        return [], f"no numeric axis with >= {MIN_X} distinct x (distinct x: {shown})"
    out = []
    for partners, axis in chosen:
        for label, part in _series_rows(rows, axis, [a for a in axes if a not in partners]):
            members = exact(member_values(part, axis, measure))
            if members["x"].n_unique() >= MIN_X:
                out.append(({"sweep": sweep, "study": study, "axis": axis, "series": label},
                            _grid(members)))
    return out, None if out else f"fewer than {MIN_X} x with measured values per series"


def backtest_store(storage: str, sweep: str | None = None, study: str | None = None,
                   level: float = LEVEL, measure: Measure | None = None) -> Backtest:
    """Back-test every qualifying study of the store (see the module doc); the extrapolation
    prior is pooled over all their series (analysis.backtests.interval.backtest_grids)."""
    base = measure or Measure("mse")
    series, qualified, skipped = [], [], []
    for sw, st in studies_of(storage, sweep, study):
        try:
            found, why = _study(storage, sw, st, base)
        except MissingResults as exc:
            found, why = [], str(exc).splitlines()[0]
        if why:
            skipped.append(f"{sw}/{st}: {why}")
        else:
            qualified.append(f"{sw}/{st}")
            series += found
    scored = backtest_grids([grid for _, grid in series], level)
    rows = [{**r, **labels} for (labels, _), part in zip(series, scored, strict=True)
            for r in part]
    table = pl.DataFrame([{c: r.get(c) for c in TABLE_COLUMNS} for r in rows],
                         schema_overrides={"series": pl.String}) if rows else \
        pl.DataFrame(schema={c: pl.Float64 for c in TABLE_COLUMNS})
    return Backtest(table, level, qualified, skipped, reliability(rows), rows)


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def table_markdown(table: pl.DataFrame, method: str = "ours") -> str:
    """The back-tests of one method as a Markdown table (the interval in one cell)."""
    part = table.filter(pl.col("method") == method)
    head = ["study", "axis", "series", "x", "held out", "predicted", "interval", "measured",
            "log10 error", "hit"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in part.iter_rows(named=True):
        lines.append("| " + " | ".join([
            f"{r['sweep']}/{r['study']}", r["axis"], r["series"] or "", _fmt(r["x"]),
            str(r["held_out"]), _fmt(r["predicted"]), f"[{_fmt(r['lo'])}, {_fmt(r['hi'])}]",
            _fmt(r["measured"]), f"{r['log10_error']:+.3f}", "yes" if r["hit"] else "no"])
            + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(summary: dict[str, dict], level: float) -> str:
    lines = [f"| method | back-tests | coverage of the {level:.0%} intervals | median abs "
             "log10 error | mean interval score (log10) | median width (log10) |",
             "|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(f"| {name} | {s['n']} | {s['coverage']:.3f} | "
                     f"{s['median_abs_log10_error']:.4f} | {s['interval_score']:.4f} | "
                     f"{s['median_width']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # the command moved to the face: `icl backtest`
    from icl_core.old_paths import run_moved_command

    run_moved_command("analysis.backtests.backtest")
