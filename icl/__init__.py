"""icl: the face of the project, above the science core (icl_core) and analysis, the only
package that joins them: a sweep file's Sweep (sweep) and adaptive studies (adaptive), its
command line (cli), the Python API (api) and what it returns (outcome), the `icl` console
command (console), every sweep file by name (catalog), checks of the command line's places
before anything starts (preflight), the plan --dry-run prints (plan_cost), `icl levels`
(levels), regeneration from the sweep files (regenerate_from_sweeps).

May import analysis and every layer of icl_core; neither imports it (pyproject.toml,
[tool.importlinter]). The names a sweep file or a notebook needs are importable from here,
loaded on first use so `import icl` stays cheap:

    from icl import Preset, Study, Sweep
"""

_PUBLIC = {
    "Sweep": "icl.sweep", "Adaptive": "icl_core.spec.adaptive", "adaptive_main": "icl.adaptive:main",
    "load_sweep": "icl.catalog", "sweep_names": "icl.catalog",
    "Study": "icl_core.spec.study", "Preset": "icl_core.spec.study",
    "PRESETS": "icl_core.spec.study", "Search": "icl_core.spec.search",
    "Store": "icl_core.storage.store", "ConfigError": "icl_core.common.validation",
    "best_settings": "analysis.reading.best", "Goal": "icl_core.spec.adaptive",
    "Measure": "icl_core.spec.adaptive", "set_log_level": "icl_core.common.log",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    from icl_core.common.lazy import lazy_attribute

    return lazy_attribute("icl", _PUBLIC, globals(), name)
