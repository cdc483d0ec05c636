"""analysis.regenerate with the studies read from the sweep files (icl.catalog) instead of the
manifests in the store: the fallback for stores written before study manifests existed (and for
rows written without a sweep run). Its command line is `icl regenerate --from-sweeps`
(icl.commands.regenerate); analysis itself never imports the orchestration, so this face passes
it the sweep files' manifests (`lookup`).
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


if __name__ == "__main__":  # the command moved: `icl regenerate --from-sweeps`
    from icl_core.old_paths import run_moved_command

    run_moved_command("icl.regenerate_from_sweeps")
