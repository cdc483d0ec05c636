"""Forecasts and adaptive choice: sealed forecasts of a law at larger scale (forecast: the command
line; points, seal, score), their figure (figure), and where the next trials most shrink a
law's uncertainty (adaptive_design).

Imports analysis.fitting, analysis.reading and analysis.plotting; never the orchestration.
"""
