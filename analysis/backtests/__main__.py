"""python -m analysis.backtests backtest | scoreboard | synthetic [options]"""

from __future__ import annotations

import sys

USAGE = "usage: python -m analysis.backtests {backtest,scoreboard,synthetic} [options]"


def main(argv: list[str] | None = None) -> int:
    from icl_core.common.log import ensure_console

    ensure_console()  # its lines (a store's coverage, warnings) on the console
    argv = sys.argv[1:] if argv is None else argv
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "backtest":
        from analysis.backtests.backtest import main as backtest_main

        return backtest_main(rest, prog="python -m analysis.backtests backtest")
    if command == "scoreboard":
        import argparse

        from analysis.backtests.scoreboard import add_scoreboard_args, run_scoreboard

        parser = argparse.ArgumentParser(prog="python -m analysis.backtests scoreboard")
        add_scoreboard_args(parser)
        return run_scoreboard(parser.parse_args(rest))
    if command == "synthetic":
        from analysis.backtests.synthetic import main as synthetic_main

        return synthetic_main()
    if command in ("-h", "--help"):
        print(USAGE)
        return 0
    print(f"error: command: unknown {command!r}; choose one of backtest, scoreboard, synthetic\n"
          f"{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
