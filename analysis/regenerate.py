"""Regenerate a sweep's figures and fit reports from its stored rows.

    python -m analysis.regenerate depth_scaling [--study S] [--storage results] [--out figures]
    python -m analysis.regenerate --all

Each study's figure name comes from its sweep file (`sweeps/<sweep>.py`, `Study.figure`).
Output per study: <out>/<sweep>/<study>/<figure>.png|.pdf, fits.parquet and fits.md.
Exit status 2 when there are no results (the message names the command producing them).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from pathlib import Path

import polars as pl

from analysis.figures import FIGURES
from analysis.fit import Fit
from analysis.store import MissingResults, load_rows, missing_message
from icl_core.store import Store

REPO_ROOT = Path(__file__).resolve().parent.parent
SWEEPS_DIR = REPO_ROOT / "sweeps"


def sweep_names() -> list[str]:
    """Sweep files in sweeps/ (the file stem is the sweep name)."""
    return sorted(p.stem for p in SWEEPS_DIR.glob("*.py") if not p.name.startswith("_"))


def load_sweep(sweep: str):
    """The module-level `SWEEP` of sweeps/<sweep>.py."""
    path = SWEEPS_DIR / f"{sweep}.py"
    if not path.is_file():
        raise ValueError(f"sweep: no file {path}; valid choices: {', '.join(sweep_names())}")
    spec = importlib.util.spec_from_file_location(f"_icl_sweep_{sweep}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the file resolve their module
    spec.loader.exec_module(module)
    return module.SWEEP


def _scalar(value) -> bool:
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def fit_rows(sweep: str, study: str, figure: str, summary: dict) -> list[dict]:
    """Tidy fit rows of one figure: its scalar summary values plus each fit's own row."""
    base = {"sweep": sweep, "study": study, "figure": figure}
    base.update({k: v for k, v in summary.items() if _scalar(v)})
    fits: list[Fit] = summary.get("fits") or ([summary["fit"]] if summary.get("fit") else [])
    return [{**base, **fit.to_row()} for fit in fits] or [{**base, "form": None}]


def markdown_table(frame: pl.DataFrame) -> str:
    """A GitHub Markdown table (floats in 4 significant digits)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines) + "\n"


def write_fit_report(out_dir: Path, rows: list[dict]) -> list[Path]:
    """fits.parquet and fits.md in out_dir."""
    frame = pl.DataFrame(rows, strict=False)
    parquet, md = out_dir / "fits.parquet", out_dir / "fits.md"
    frame.write_parquet(parquet)
    title = f"# Fits: {rows[0]['sweep']}/{rows[0]['study']}\n\n"
    md.write_text(title + markdown_table(frame))
    return [parquet, md]


def describe(summary: dict) -> str:
    """'b = 1.29 [1.25, 1.33], c = 3.1e-07 [..]' or the figure's note."""
    fit: Fit | None = summary.get("fit")
    if fit is None:
        return summary.get("note") or "no fit"
    text = fit.label()
    if "c" in fit.ci:
        lo, hi = fit.ci["c"]
        text += f" [{lo:.1e}, {hi:.1e}]"
    return text + f" (rms log residual {fit.rms_log_residual:.3f})"


def regenerate(sweep: str, study: str | None = None, storage: str = "results",
               out: str = "figures", n_boot: int = 1000) -> list[dict]:
    """Figures and fit reports of one sweep (one study, or every study with results)."""
    spec = load_sweep(sweep)
    studies = [spec.study(study)] if study else list(spec.studies)
    summaries, missing = [], []
    for s in studies:
        if not s.figure:
            continue
        if s.figure not in FIGURES:
            raise ValueError(f"{sweep}/{s.name}: figure {s.figure!r} unknown; valid choices: "
                             f"{', '.join(FIGURES)}")
        try:
            rows = load_rows(storage, sweep, s.name)
        except MissingResults:
            if study:
                raise
            missing.append(s.name)
            continue
        out_dir = Path(out) / sweep / s.name
        summary = FIGURES[s.figure](rows, out_dir, name=s.figure, n_boot=n_boot)
        summary.update(sweep=sweep, study=s.name, figure=s.figure)
        summary["report"] = write_fit_report(out_dir, fit_rows(sweep, s.name, s.figure, summary))
        print(f"{summary['paths'][0]}: {describe(summary)}; {summary.get('excluded', 0)} "
              f"members excluded", flush=True)
        summaries.append(summary)
    if missing and not summaries:
        raise MissingResults(missing_message(sweep, None, Store(storage).uri, storage=storage))
    for name in missing:
        print(f"[{sweep}/{name}] skipped: no results", file=sys.stderr)
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.regenerate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help=f"one of: {', '.join(sweep_names())}")
    parser.add_argument("--all", action="store_true", help="every sweep in sweeps/ with results")
    parser.add_argument("--study", help="one study (default: every study of the sweep)")
    parser.add_argument("--storage", default=os.environ.get("ICL_STORAGE", "results"),
                        help="row store path or URI (default: $ICL_STORAGE, else results)")
    parser.add_argument("--out", default="figures", help="figure folder (default: figures)")
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (1000)")
    args = parser.parse_args(argv)
    if bool(args.sweep) == args.all:
        parser.error("name one sweep or pass --all")
    names = sweep_names() if args.all else [args.sweep]
    done, missing = 0, []
    for name in names:
        try:
            done += len(regenerate(name, args.study, args.storage, args.out, args.n_boot))
        except MissingResults as exc:
            missing.append((name, str(exc)))
        except ValueError as exc:  # unknown sweep, study or figure (ConfigError included)
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for name, message in missing:
        print(f"[{name}] skipped: no results" if done else message, file=sys.stderr)
    return 2 if missing and not done else 0


if __name__ == "__main__":
    raise SystemExit(main())
