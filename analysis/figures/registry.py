"""Figures by name (`Study.figure` in a sweep file names one): fn(rows, out_dir) -> summary dict.

The registry `FIGURES` imports the figure modules (depth, precision, construction, retrieval,
deep_shift, deep_depth, deep_scaling, algoformer, lsa, mse_vs_axis), never the reverse, and
says which columns each reads (`FIGURE_COLUMNS`). The shared data steps (which members count, each member's
final evaluation, the reference predictors' levels) live in analysis.reading.frames.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial

from analysis.figures.algoformer import ALGOFORMER_FIGURES
from analysis.figures.construction import CONSTRUCTION_FIGURES
from analysis.figures.deep_depth import DEPTH_FIGURES
from analysis.figures.deep_scaling import SCALING_FIGURES
from analysis.figures.deep_shift import DEEP_FIGURES
from analysis.figures.depth import depth_figure
from analysis.figures.lsa import lsa_convergence_figure, lsa_scaling_figure
from analysis.figures.precision import PRECISION_FIGURES
from analysis.figures.retrieval import RETRIEVAL_FIGURES
from analysis.reading.frames import HELPER_COLUMNS, SHARED_COLUMNS

# name -> fn(rows, out_dir, name=..., n_boot=..., storage=...) -> summary (see depth_figure)
FIGURES: dict[str, Callable[..., dict]] = {
    "depth": depth_figure,
    "lsa_convergence": lsa_convergence_figure,
    "lsa_scaling": lsa_scaling_figure,
    # icl_prefix, precision_depth, primitives_depth, multiply_width, multiply_heads,
    # multiply_mlp, multiply_steps, features_depth
    **PRECISION_FIGURES,
    **CONSTRUCTION_FIGURES,  # construction, explicit_gradient
    # str_sample_complexity, str_heads, str_attention (sparse token retrieval)
    **RETRIEVAL_FIGURES,
    **DEEP_FIGURES,  # deep_shift (Wu et al. 2024)
    **DEPTH_FIGURES,  # deep_depth (Wu et al. 2024)
    **SCALING_FIGURES,  # deep_scaling (its scale-up)
    # algo_examples, algo_loops, algo_layers_heads, algo_newton (AlgoFormer)
    **ALGOFORMER_FIGURES,
}


def figure_columns(fn) -> tuple[str, ...]:
    """The columns figure `fn` reads: the shared ones (analysis.reading.frames.SHARED_COLUMNS, and
    HELPER_COLUMNS unless its module sets NARROW_COLUMNS), its module's COLUMNS and, for a
    figure made with functools.partial (mse_vs_axis), the columns its arguments name (x, hue,
    facet). Every figure module declares COLUMNS."""
    func, named = fn, []
    while isinstance(func, partial):
        named += [v for value in func.keywords.values()
                  for v in (value if isinstance(value, (list, tuple)) else [value])
                  if isinstance(v, str) and "." in v]
        func = func.func
    module = sys.modules[func.__module__]
    helpers = () if getattr(module, "NARROW_COLUMNS", False) else HELPER_COLUMNS
    return tuple(dict.fromkeys([*SHARED_COLUMNS, *helpers, *module.COLUMNS, *named]))


# The columns each figure reads: regenerate reads only these from the store (projection
# pushdown; a study of 100,000 members then fits in memory), with the study's grid axes and
# figure arguments. A module's COLUMNS must name every config column its figures (and the
# helpers they call) look at, including those only checked for
# (tests/test_figure_columns.py compares each figure from these columns and from all).
FIGURE_COLUMNS: dict[str, tuple[str, ...]] = {name: figure_columns(fn)
                                              for name, fn in FIGURES.items()}
# Figures drawn the same from strings read as Categorical (4 bytes a row where a config's
# value repeats on each of its rows): what keeps 100,000 members of a study within 2 GB. Not
# every figure: a sort or tie-break on a Categorical follows its categories, not the text, and
# string operations (.str) refuse it (tests/test_figure_columns.py checks those listed).
CATEGORICAL_FIGURES = frozenset({"depth"})
