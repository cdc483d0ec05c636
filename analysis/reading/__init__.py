"""Reading rows: the store reader (store: rows -> Polars, schema checks, coverage, artifacts),
the shared data shaping of figures and verdicts (frames), a cell's seed spread (spreads), the
learned-regime bar against trivial predictors (regime).

Imports icl_core.storage only; never the orchestration (running, planning) nor the face (icl).
"""
