"""Analysis of sweep results: read the row store, fit scaling laws, regenerate figures.

    python -m analysis.regenerate depth_scaling            # figures/depth_scaling/<study>/...
    python -m analysis.regenerate --all

Modules: `store` (rows -> Polars, with schema checks and coverage; `load_artifact`), `fit` (the
one scaling-law fitter: Huber log-space fits, bootstrap CIs, AIC, held-out error; `Fit` and
`fit_status`, from `fit_result`; the forms in `fit_forms`, the optimiser and bootstrap in
`fit_solve`), `regime` (the learned-regime bar against trivial predictors), `spreads` (a cell's
seed spread), `verdicts` (the rules; orderings and claim verdicts that can fail),
`sample_complexity` (n* per seed, γ of n* ∝ N^γ), `frames` (data shaping shared by the
figures), the figure toolkit `plotting` (one public import: style, seed bands, fitted curves,
reference lines, save, baseline looks, panel notes, legends), the figure modules `figures_*` (one
function per paper figure, data shaping apart from drawing), `figures` (the registry: one
function per figure name), `regenerate` (the command line).
"""
