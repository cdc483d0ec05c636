"""Back-tested forecasts: on every study with a numeric axis of >= 4 distinct x, hold out the
largest x, forecast it from the rest with intervals honest about extrapolation (interval, over
the candidate forms' prefix fits in fits), score it beside two naive forecasters (backtest),
check the intervals on laws with a known truth (synthetic), and write docs/FORECASTS.md with its
reliability figure (scoreboard, figure).

    icl backtest --storage S [--sweep W] [--study S] [--level 0.8]
    icl scoreboard --storage A [--storage B ...] --out docs/FORECASTS.md
    icl backtest --synthetic

Imports analysis.forecasts (measures, sealed forecasts), analysis.fitting, analysis.reading and
analysis.plotting; never the orchestration.
"""
