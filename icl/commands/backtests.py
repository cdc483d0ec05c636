"""`icl backtest` and `icl scoreboard`: back-tested forecasts on any row store, and the forecast
scoreboard, docs/FORECASTS.md (analysis.backtests).

    icl backtest --storage S [--sweep W] [--study S] [--level 0.8] [--figure DIR]
    icl backtest --synthetic        # the intervals on laws with a known truth (seconds)
    icl scoreboard --storage A [--storage B ...] [--out docs/FORECASTS.md] [--note TEXT ...]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from analysis.backtests.backtest import (
    MIN_X,
    StoreError,
    backtest_store,
    summary_markdown,
    table_markdown,
)
from analysis.backtests.interval import LEVEL, summarize
from analysis.backtests.scoreboard import scoreboard as write_scoreboard
from analysis.backtests.scoreboard import shown
from analysis.backtests.synthetic import LAWS, synthetic_backtests
from analysis.reading.store import DEFAULT_STORAGE, MissingResults
from icl_core.spec.adaptive import Measure
from icl_core.storage.store import redacted


def backtest(argv: list[str] | None = None, prog: str = "icl backtest") -> int:
    """The table, the summary, the skipped studies (exit 2 on a missing store, sweep or study)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", default=DEFAULT_STORAGE)
    parser.add_argument("--sweep", default=None, help="one sweep (default: every sweep)")
    parser.add_argument("--study", default=None, help="one study (with --sweep)")
    parser.add_argument("--level", type=float, default=LEVEL, help="the intervals' level")
    parser.add_argument("--metric", default="mse")
    parser.add_argument("--statistic", default="median")
    parser.add_argument("--predictor", default="model")
    parser.add_argument("--test-dist", default="train")
    parser.add_argument("--figure", default=None, help="write the reliability figure here "
                        "(a folder)")
    parser.add_argument("--synthetic", action="store_true",
                        help="back-test laws with a known truth instead of a store (seconds)")
    args = parser.parse_args(argv)
    if args.synthetic:
        return synthetic()
    if not 0 < args.level < 1:
        print(f"error: --level must lie in (0, 1), got {args.level}", file=sys.stderr)
        return 2
    measure = Measure(args.metric, args.statistic, args.predictor, args.test_dist)
    try:
        result = backtest_store(args.storage, args.sweep, args.study, args.level, measure)
    except (StoreError, MissingResults) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in result.skipped:
        print(f"skipped {line}")
    if result.table.is_empty():
        print(f"no study under {redacted(args.storage)} qualifies: none has a numeric axis with >= "
              f"{MIN_X} distinct x values and measured {args.metric}")
        return 0
    print(table_markdown(result.table))
    print(summary_markdown(result.summary, args.level))
    if args.figure:
        from analysis.backtests.figure import reliability_figure

        for path in reliability_figure(result.reliability, args.figure):
            print(f"wrote {path}")
    return 0


def synthetic() -> int:
    """The synthetic back-tests' summary, per method and per law."""
    start = time.perf_counter()
    rows = synthetic_backtests()
    took = time.perf_counter() - start
    n = sum(r["method"] == "ours" for r in rows)
    print(f"{n} synthetic back-tests in {took:.1f} s")
    for name, s in summarize(rows).items():
        print(f"  {name:5s} coverage {s['coverage']:.3f}  median |log10 err| "
              f"{s['median_abs_log10_error']:.4f}  interval score {s['interval_score']:.4f}  "
              f"median width {s['median_width']:.3f}")
    for law in LAWS:
        s = summarize([r for r in rows if r["law"] == law])["ours"]
        print(f"  ours on {law}: n {s['n']} coverage {s['coverage']:.3f} "
              f"median |err| {s['median_abs_log10_error']:.4f}")
    return 0


def scoreboard(argv: list[str] | None = None, prog: str = "icl scoreboard") -> int:
    """Write docs/FORECASTS.md (analysis.backtests.scoreboard) and its figure."""
    parser = argparse.ArgumentParser(prog=prog, description=scoreboard.__doc__)
    parser.add_argument("--storage", action="append", default=[], required=True,
                        help="a store to back-test (repeat for several)")
    parser.add_argument("--out", default="docs/FORECASTS.md")
    parser.add_argument("--figures", default="docs/figures")
    parser.add_argument("--level", type=float, default=LEVEL)
    parser.add_argument("--laws", type=int, default=100, help="synthetic laws")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic laws")
    parser.add_argument("--note", action="append", default=[],
                        help="free prose for the stores' section (repeatable); it judges "
                        "nothing: the judgement sentences are computed")
    args = parser.parse_args(argv)
    command = "icl scoreboard " + " ".join(
        [f"--storage {shlex.quote(shown(s))}" for s in args.storage]
        + [f"--out {shlex.quote(shown(args.out))}"]
        + [f"--note {shlex.quote(n)}" for n in args.note])
    for path in write_scoreboard(args.storage, args.out, args.figures, args.level, args.laws,
                                 args.seed, command, args.note):
        print(f"wrote {path}")
    return 0
