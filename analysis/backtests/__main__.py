"""`python -m analysis.backtests backtest|scoreboard|synthetic`: moved to `icl backtest`,
`icl scoreboard` and `icl backtest --synthetic` (icl.commands.backtests); this runs the new
command with a line naming it, until the old one goes (icl_core.old_paths)."""

from icl_core.old_paths import run_moved_command

run_moved_command("analysis.backtests")
