"""Analysis of sweep results: read the row store, fit scaling laws, regenerate figures.

    python -m analysis.regenerate depth_scaling            # figures/depth_scaling/<study>/...
    python -m analysis.regenerate --all

Modules: `store` (rows -> Polars, with schema checks and coverage; `load_artifact`), `fit` (the
one scaling-law fitter: forms, Huber log-space fits, bootstrap CIs, AIC, held-out error, and
`fit_status`: is a fit resolved or not), `verdicts` (the learned-regime bar against trivial
predictors, seed spreads, orderings and claim verdicts that can fail), `sample_complexity` (n*
per seed, γ of n* ∝ N^γ), `frames` (data shaping shared by the figures), `plotting` (the shared
look: palette, baseline styles, titles, regime notes), `figures` (one function per figure
name), `regenerate` (the command line).
"""
