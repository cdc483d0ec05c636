"""Analysis of sweep results: read the row store, fit scaling laws, regenerate figures.

    python -m analysis.regenerate depth_scaling            # figures/depth_scaling/<study>/...
    python -m analysis.regenerate --all

Modules: `store` (rows -> Polars), `fit` (the one scaling-law fitter), `plotting` (the shared
look), `figures` (one function per figure name), `regenerate` (the command line).
"""
