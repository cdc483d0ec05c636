"""Scaling-law fits: the one fitter (fit: Huber log-space fits, bootstrap CIs, AIC, held-out
error), its forms (forms), optimiser and bootstrap (solve), the Fit result (result), sample
complexity n* and its exponent (sample_complexity).

Imports nothing of analysis or icl_core outside this package.
"""
