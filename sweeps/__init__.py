"""Sweep files, one per scaling axis: each defines a module-level `SWEEP` (icl.sweep.Sweep)
and runs it as a script (`python sweeps/<axis>.py --preset smoke`, also under
`ray job submit`). Shared settings live in helper modules (bases.py) that define no SWEEP.

Imported as a package (`sweeps.<axis>`) by icl.catalog, which lists and loads them by
name; run as a script, a file imports its helpers from its own folder (see the two-way import
at the top of each file).
"""
