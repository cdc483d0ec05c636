"""icl_core: the science core of in-context-learning scaling studies and the orchestration that
runs them, in sub-packages that are layers (each imports only the ones below it; the contracts
are [tool.importlinter] in pyproject.toml, the map is docs/developing.md):

    interface   the ways in: sweep files' Sweep, the command lines (cli, icl, catalog), the API
    running     Ray Tune and Optuna: plans, the trial pool, trials, searches, tracking
    planning    cost model, calibration, resources and packing, memory, the cluster simulator
    storage     the row store, member files, artifacts, claims, compaction, journals, signing
    training    the one training driver, stacks, the evaluator, FLOPs and throughput
    spec        the member config and the declarative Study
    models | tasks   architectures and data-generating tasks (never each other)
    algorithms  baselines, closed forms, the Bayes floor, optimizers
    common      validation, registries, the Batch contract, devices

The public names a sweep file or a notebook needs are importable from here (loaded on first use,
so `import icl_core` stays cheap): Sweep, Study, Preset, PRESETS, Search, best_settings,
Adaptive, adaptive_main, Store, ConfigError, load_sweep, sweep_names. Module paths from before
the move into sub-packages still import (icl_core.old_paths), for stored pickles and old scripts.
"""

from icl_core import old_paths as _old_paths

__version__ = "0.1.0"

_PUBLIC = {
    "Sweep": "icl_core.interface.sweep", "Study": "icl_core.spec.study",
    "Preset": "icl_core.spec.study", "PRESETS": "icl_core.spec.study",
    "Search": "icl_core.running.search", "best_settings": "icl_core.running.search",
    "Adaptive": "icl_core.interface.adaptive", "adaptive_main": "icl_core.interface.adaptive:main",
    "Store": "icl_core.storage.store", "ConfigError": "icl_core.common.validation",
    "load_sweep": "icl_core.interface.catalog", "sweep_names": "icl_core.interface.catalog",
}
__all__ = sorted(_PUBLIC)

_old_paths.install("icl_core")


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'icl_core' has no attribute {name!r}")
    import importlib

    module, _, attr = _PUBLIC[name].partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value
