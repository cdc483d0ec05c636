"""`icl forecast`: sealed scaling forecasts and the adaptive design's checks (analysis.forecasts).

    icl forecast seal --storage results --sweep depth_scaling --study least_squares \
        --x model.depth --metric mse --at 12 16 [--id depth16]
    icl forecast score --storage results --sweep depth_scaling --study least_squares
    icl forecast design --sweep S --study T --x model.depth [--form power] [--at 64]
        where a study stands on an adaptive goal: its members, the goal widths, device-hours
    icl forecast replay --sweep S --study T --x model.width [--initial 8 32 128] [--batch 3]
    icl forecast replay --synthetic
        an adaptive design replayed on a measured dense grid (or synthetic ones)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings

from analysis.fitting.fit import DEFAULT_FORMS
from analysis.fitting.forms import FORMS
from analysis.forecasts.adaptive_design import (
    ESTIMATORS,
    Goal,
    assess,
    member_points,
    member_seconds,
)
from analysis.forecasts.adaptive_replay import replay, synthetic_replays
from analysis.forecasts.points import study_rows
from analysis.forecasts.score import score
from analysis.forecasts.seal import ForecastError, forecast_dir, seal
from analysis.reading.store import MissingResults
from icl_core.spec.adaptive import N_STAR, Measure


def add_measure_args(parser, metric_default: str | None = None) -> None:
    """The command-line flags of a Measure (seal, design, replay)."""
    parser.add_argument("--metric", required=metric_default is None, default=metric_default,
                        help=f"a row metric (mse, ...) or {N_STAR}")
    parser.add_argument("--statistic", default="median")
    parser.add_argument("--predictor", default="model")
    parser.add_argument("--test-dist", default="train")
    parser.add_argument("--threshold", type=float, default=None,
                        help=f"{N_STAR}: the target error")
    parser.add_argument("--curve-metric", default="mse", help=f"{N_STAR}: the recorded curve")
    parser.add_argument("--position", type=int, default=None,
                        help="the query position (default: each member's last)")


def measure_of(args: argparse.Namespace) -> Measure:
    return Measure(args.metric, args.statistic, args.predictor, args.test_dist,
                   args.threshold, args.curve_metric, args.position)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("seal", "score", "design", "replay"):
        p = sub.add_parser(name)
        p.add_argument("--storage", default="results")
        p.add_argument("--sweep", required=name != "replay")
        p.add_argument("--study", required=name != "replay")
        if name != "replay":
            p.add_argument("--preset", default=None,
                           help="only the members this preset's plan expects (a store that "
                                "holds several presets' runs of the study)")
    s = sub.choices["seal"]
    s.add_argument("--x", required=True, help="the axis column, e.g. model.depth")
    add_measure_args(s)
    s.add_argument("--at", required=True, nargs="+", type=float, help="x values not yet run")
    s.add_argument("--id", default=None, help="the forecast's name (default: metric-x-time)")
    s.add_argument("--forms", nargs="+", default=list(DEFAULT_FORMS))
    s.add_argument("--n-boot", type=int, default=1000)
    sub.choices["score"].add_argument("--no-figure", action="store_true")
    d = sub.choices["design"]
    d.add_argument("--x", required=True, help="the axis column, e.g. model.depth")
    d.add_argument("--form", default="power", choices=sorted(FORMS))
    d.add_argument("--at", type=float, default=None, help="forecast goal: the x")
    add_measure_args(d, metric_default="mse")
    r = sub.choices["replay"]
    r.add_argument("--synthetic", action="store_true",
                   help="replay on the synthetic grids of SYNTHETIC instead (minutes)")
    r.add_argument("--x", help="the axis column, e.g. model.depth")
    r.add_argument("--form", default="power", choices=sorted(FORMS))
    r.add_argument("--estimator", default="seeds", choices=ESTIMATORS)
    r.add_argument("--initial", type=float, nargs="+", default=None,
                   help="round-0 x values (default: the grid's smallest, middle, largest)")
    r.add_argument("--seeds", type=int, default=2, help="seeds per round-0 x")
    r.add_argument("--batch", type=int, default=3, help="trials per round")
    r.add_argument("--uniform-cost", action="store_true",
                   help="every trial costs the same in the look-ahead")
    add_measure_args(r, metric_default="mse")
    return parser


def main(argv: list[str] | None = None, prog: str = "icl forecast") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.command == "seal":
            return _seal(args)
        if args.command == "score":
            return _score(args)
        return _design(args) if args.command == "design" else _replay(args)
    except (ForecastError, FileExistsError, MissingResults, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0] if args.command == 'replay' else exc}",
              file=sys.stderr)
        return 2


def _seal(args) -> int:
    path, doc = seal(args.storage, args.sweep, args.study, args.x, measure_of(args), args.at,
                     args.id, forms=args.forms, n_boot=args.n_boot, preset=args.preset)
    fit = doc["fit"]
    print(f"sealed {path}\n  form {fit['form']} ({fit['formula']}), fit status {fit['status']}, "
          f"{len(doc['inputs']['config_hashes'])} members; content hash {doc['content_hash']}")
    for p in doc["points"]:
        print(f"  {doc['x']} = {p['x']:g}: {p['predicted']:.4g} "
              f"[{p['lo']:.4g}, {p['hi']:.4g}] ({doc['level']:.0%})")
    return 0


def _score(args) -> int:
    scores = score(args.storage, args.sweep, args.study, figure=not args.no_figure,
                   preset=args.preset)
    if not scores.forecasts and not scores.tampered:
        print(f"no forecasts under {forecast_dir(args.storage, args.sweep, args.study)}")
        return 2
    print(scores.markdown())
    for path in scores.paths:
        print(f"wrote {path}")
    return 0


def _rows(args):
    return study_rows(args.storage, args.sweep, args.study, getattr(args, "preset", None))


def _design(args) -> int:
    """A study's measured members, the goal widths (exponent; a forecast's with --at) and its
    device-hours, by each estimator."""
    rows = _rows(args)
    measure = measure_of(args)
    x, y, seeds = member_points(rows, args.x, measure)
    hours = float(member_seconds(rows)["seconds"].sum()) / 3600
    goals = [Goal("exponent", 1.0)] + ([Goal("forecast", 1.0, at=args.at)] if args.at else [])
    print(f"{args.sweep}/{args.study}: {rows['config_hash'].n_unique()} trials "
          f"({x.size} measured), {hours:.4f} device-hours")
    by = {"members": "members resampled", "seeds": "seeds resampled",
          "medians": "fit_gamma's: per-x medians, seeds resampled within x"}
    for goal in goals:
        what = "exponent 95% CI width" if goal.kind == "exponent" else \
            f"log10 width of the 90% band at {goal.at:g}"
        for estimator in ESTIMATORS:
            if estimator == "medians" and (goal.kind != "exponent" or args.form != "power"):
                continue
            width = assess(x, y, dataclasses.replace(goal, estimator=estimator), args.form,
                           400, 0, seeds=seeds).width
            print(f"  {args.form}: {what} {width:.4g} ({by[estimator]})")
    if measure.metric == N_STAR:
        _print_fit_gamma(rows, args.x, measure)
    return 0


def _print_fit_gamma(rows, axis: str, measure: Measure) -> None:
    """γ of n* ∝ N^γ by analysis.fitting.sample_complexity.fit_gamma, the n* figures' estimator."""
    from analysis.fitting.sample_complexity import error_curves, fit_gamma, n_star_table

    curves = error_curves(rows, measure.curve_metric, measure.statistic, measure.predictor,
                          measure.test_dist)
    try:
        g = fit_gamma(n_star_table(curves, measure.threshold, [axis]), axis)
    except ValueError as exc:
        print(f"  fit_gamma: {exc}")
        return
    print(f"  fit_gamma (the n* figures' estimator: per-{axis} medians, seeds resampled within "
          f"each): gamma {g.gamma:.4g} [{g.ci[0]:.4g}, {g.ci[1]:.4g}], 95% CI width "
          f"{g.ci[1] - g.ci[0]:.4g}")


def _replay(args) -> int:
    """Would the design have reached the grid's width, with what share of its trials and
    device-hours (analysis.forecasts.adaptive_replay)?"""
    if args.synthetic:
        print("the design against synthetic dense grids (x in 1-64, noise 0.2; round 0: "
              "smallest, middle, largest x x 2 seeds; 3 trials a round; any seed at the "
              "grid's x):")
        synthetic_replays(echo=print)
        return 0
    missing = [f"--{n}" for n in ("sweep", "study", "x") if not getattr(args, n)]
    if missing:
        print(f"error: {', '.join(missing)} required (or --synthetic)", file=sys.stderr)
        return 2
    goal = Goal("exponent", 1.0, estimator=args.estimator)
    rows = _rows(args)
    x, y, seeds = member_points(rows, args.x, measure_of(args))
    wall = {(a, int(s)): t for a, s, t in member_seconds(rows, args.x).select(
        "x", "seed", "seconds").iter_rows()}
    seconds = [wall.get((float(a), int(s)), 0.0) for a, s in zip(x, seeds, strict=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = replay(x, y, seeds, seconds, goal, args.form, args.initial, args.seeds,
                        args.batch, cost_weighted=not args.uniform_cost)
    print(f"{args.sweep}/{args.study}: grid {result.grid_trials} members, "
          f"{result.grid_hours:.4f} device-hours; {goal.describe().split(' <=')[0]} "
          f"by {args.form}: {result.target:.4g}")
    for r in result.rounds:
        spread = ", ".join(f"{a:g}: {n}" for a, n in r["x"].items())
        print(f"  round {r['round']}: {r['trials']} trials, {r['hours']:.4f} device-hours, "
              f"width {r['width']:.4g}  (x: seeds {spread})")
    if result.rounds:
        print(f"  {result.stop}: {result.trials}/{result.grid_trials} trials "
              f"({result.trials / result.grid_trials:.0%}), {result.hours:.4f}/"
              f"{result.grid_hours:.4f} device-hours "
              f"({result.hours / max(result.grid_hours, 1e-12):.0%})")
    else:
        print(f"  {result.stop}")
    return 0
