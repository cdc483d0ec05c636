"""Pre-registered scaling forecasts: seal a prediction before the run, score it after.

    python -m analysis.forecasts.forecast seal --storage results --sweep depth_scaling \\
        --study least_squares --x model.depth --metric mse --at 12 16 [--id depth16]
    python -m analysis.forecasts.forecast score --storage results --sweep depth_scaling --study least_squares

    path, doc = seal(storage, sweep, study, x="model.depth", metric="mse", at=[12, 16])
    scores = score(storage, sweep, study)        # Scores: .points, .coverage, .tampered, ...

Seal (analysis.forecasts.seal). From the study's finished rows (analysis.reading.store.read_rows; one
measured value per member: analysis.forecasts.points) every form of analysis.fitting.fit is fitted to
the members that exist and the lowest-AIC one is kept (`compare_forms`); its seed bootstrap
(`fit_scaling`, `--n-boot` refits on resampled seeds) gives the 90% interval at each named x
not yet run. The interval is for what will be measured there, the median over the study's
number of seeds per x: each bootstrap curve plus the median of that many log residuals of the
fit drawn with replacement, 5th to 95th percentile (`curve_lo` / `curve_hi` keep the band of
the law alone). The forecast (points, form, parameters, ΔAIC per form, the config hashes of the
members used, created time) is written as sorted-key JSON with a SHA-256 `content_hash` over
every other field to `<storage>/<sweep>/<study>/forecasts/<id>.json`, created with O_EXCL: a
sealed forecast is never rewritten (sealing an id twice: exit 2). A point that already has rows
is refused (exit 2): that would not be a forecast.

Measures. `--metric mse` (any row metric): each member's final evaluation at its query
position (`--statistic` over test prompts, `--predictor`, `--test-dist`). `--metric n_star
--threshold T`: the samples a member needs to reach T on its recorded `--curve-metric` curve,
right-censored at the run's cap when never reached (analysis.fitting.sample_complexity).

Score (analysis.forecasts.score). Every forecast's hash is checked first: a file whose hash does
not match (or that cannot be read, or renamed) is reported as tampered and never scored. Where a
point's rows now exist, the truth is the median over its seeds (bounded when censored); per
point the log error log10(measured / predicted) and whether the interval covered the truth;
across the decided points the empirical coverage. A censored truth is a miss only when the
interval lies wholly beyond its known bound (wholly below the cap of a right-censored n*),
covered when the interval holds every value it may take, else "censored, consistent" (not in
the coverage). Points without rows are pending. Prints the table and writes
`forecasts/score.md` and the figure `forecasts/forecasts.png|pdf` (analysis.forecasts.figure).
Local (or shared-filesystem) storage only: O_EXCL needs a POSIX filesystem.
"""

from __future__ import annotations

import argparse
import sys

from analysis.fitting.fit import DEFAULT_FORMS
from analysis.forecasts.points import add_measure_args, measure_from_args
from analysis.forecasts.score import Scores, judge, score, score_forecast
from analysis.forecasts.seal import (
    LEVEL,
    ForecastError,
    build_forecast,
    content_hash,
    forecast_dir,
    seal,
    verify,
)
from analysis.reading.store import MissingResults
from icl_core.spec.adaptive import N_STAR, Measure

__all__ = ["LEVEL", "N_STAR", "ForecastError", "Measure", "Scores", "build_forecast",
           "content_hash", "forecast_dir", "judge", "main", "score", "score_forecast", "seal",
           "verify"]


def _parser(prog: str = "python -m analysis.forecasts.forecast") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=(
        "Seal scaling forecasts before a run; score them against the rows after it."))
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("seal", "score"):
        p = sub.add_parser(name)
        p.add_argument("--storage", default="results")
        p.add_argument("--sweep", required=True)
        p.add_argument("--study", required=True)
    s = sub.choices["seal"]
    s.add_argument("--x", required=True, help="the axis column, e.g. model.depth")
    add_measure_args(s)
    s.add_argument("--at", required=True, nargs="+", type=float, help="x values not yet run")
    s.add_argument("--id", default=None, help="the forecast's name (default: metric-x-time)")
    s.add_argument("--forms", nargs="+", default=list(DEFAULT_FORMS))
    s.add_argument("--n-boot", type=int, default=1000)
    sub.choices["score"].add_argument("--no-figure", action="store_true")
    return parser


def _seal(args) -> None:
    measure = measure_from_args(args)
    path, doc = seal(args.storage, args.sweep, args.study, args.x, measure, args.at, args.id,
                     forms=args.forms, n_boot=args.n_boot)
    fit = doc["fit"]
    print(f"sealed {path}\n  form {fit['form']} ({fit['formula']}), fit status {fit['status']}, "
          f"{len(doc['inputs']['config_hashes'])} members; content hash {doc['content_hash']}")
    for p in doc["points"]:
        print(f"  {doc['x']} = {p['x']:g}: {p['predicted']:.4g} "
              f"[{p['lo']:.4g}, {p['hi']:.4g}] ({doc['level']:.0%})")


def main(argv: list[str] | None = None,
         prog: str = "python -m analysis.forecasts.forecast") -> int:
    from icl_core.common.log import ensure_console

    ensure_console()  # its lines (a store's coverage, warnings) on the console
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "seal":
            _seal(args)
        else:
            scores = score(args.storage, args.sweep, args.study, figure=not args.no_figure)
            if not scores.forecasts and not scores.tampered:
                print(f"no forecasts under {forecast_dir(args.storage, args.sweep, args.study)}")
                return 2
            print(scores.markdown())
            for path in scores.paths:
                print(f"wrote {path}")
    except (ForecastError, FileExistsError, MissingResults, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
