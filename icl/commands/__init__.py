"""The command lines of the analysis commands (`icl regenerate`, `icl verdicts`, `icl backtest`,
`icl scoreboard`, `icl evidence`, `icl forecast`): each module parses its options and calls the
analysis library with the values, so no argument parser lives below the face (a test).
"""
