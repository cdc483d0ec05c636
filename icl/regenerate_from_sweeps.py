"""`python -m icl.regenerate_from_sweeps`: analysis.regenerate with the studies read from the sweep
files (icl.catalog) instead of the manifests in the store.

The fallback for stores written before study manifests existed (and for rows written without
a sweep run): the same arguments as `python -m analysis.regenerate`, and `--all` visits every
file in sweeps/. Analysis itself never imports the orchestration; this entry point passes it
the sweep files' manifests (`lookup`).
"""

from __future__ import annotations

from analysis import regenerate as _analysis
from icl.catalog import load_sweep, study_manifests, sweep_names  # noqa: F401  (re-exported)


def regenerate(sweep: str, study: str | None = None, storage: str = "results",
               out: str = "figures", n_boot: int = 1000, preset: str | None = None
               ) -> list[dict]:
    """analysis.regenerate.regenerate, the studies taken from sweeps/<sweep>.py."""
    return _analysis.regenerate(sweep, study, storage, out, n_boot, preset,
                                lookup=study_manifests)


def main(argv: list[str] | None = None) -> int:
    return _analysis.main(argv, lookup=study_manifests, sweep_names=sweep_names,
                          prog="python -m icl.regenerate_from_sweeps")


if __name__ == "__main__":
    raise SystemExit(main())
