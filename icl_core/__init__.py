"""icl_core: the science core of in-context-learning scaling studies and the orchestration that
runs them, in sub-packages that are layers (each imports only the ones below it; the contracts
are [tool.importlinter] in pyproject.toml, the map is docs/developing.md):

    running     Ray Tune and Optuna: plans, the trial pool, trials, searches, tracking
    planning    cost model, calibration, resources and packing, memory, the cluster simulator
    storage     the row store, member files, artifacts, claims, compaction, journals, signing
    training    the one training driver, stacks, the evaluator, FLOPs and throughput
    spec        the member config and the declarative Study
    models | tasks   architectures and data-generating tasks (never each other)
    algorithms  baselines, closed forms, the Bayes floor, optimizers
    common      validation, registries, the Batch contract, devices

The ways in (sweep files' Sweep, the command lines, the Python API, the catalog, adaptive runs)
are the `icl` package, above the core and analysis: a sweep file imports its public names from
there (`from icl import Preset, Study, Sweep`). The core's own public names are importable from
here (loaded on first use, so `import icl_core` stays cheap): Study, Preset, PRESETS, Search,
Store, ConfigError; the face's (Sweep, Adaptive, adaptive_main, best_settings, load_sweep,
sweep_names) still are, with a warning, until icl_core.old_paths.REMOVED_IN. Module paths from
before a move still import (icl_core.old_paths), for stored pickles and old scripts.
"""

from icl_core import old_paths as _old_paths

__version__ = "0.1.0"

_PUBLIC = {
    "Study": "icl_core.spec.study", "Preset": "icl_core.spec.study",
    "PRESETS": "icl_core.spec.study", "Search": "icl_core.spec.search",
    "Store": "icl_core.storage.store", "ConfigError": "icl_core.common.validation",
}
_FACE = ("Sweep", "Adaptive", "adaptive_main", "best_settings", "load_sweep", "sweep_names")
__all__ = sorted(_PUBLIC)  # the face's names: `from icl import ...`

_old_paths.install("icl_core")


def __getattr__(name: str):
    if name in _FACE:  # moved up into the face (issue 47): from icl, with a warning
        import importlib

        _old_paths.warn_moved(f"icl_core.{name}", name, kind="path", how="from icl import")
        return getattr(importlib.import_module("icl"), name)
    from icl_core.common.lazy import lazy_attribute

    return lazy_attribute("icl_core", _PUBLIC, globals(), name)
