"""The figure modules: one function per paper figure, data shaping apart from drawing
(depth, precision, construction, retrieval, deep_shift, deep_depth, deep_scaling, algoformer,
lsa, mse_vs_axis), and the registry of figures by name (registry: FIGURES, FIGURE_COLUMNS; also
importable from here, loaded on first use).

Imports analysis.plotting, analysis.fitting, analysis.reading and icl_core's storage, algorithms
and tasks; never the orchestration.
"""


def __getattr__(name: str):
    if name.startswith("__") or name in ("by_name", "registry", "depth"):
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module("analysis.figures.registry"), name)
