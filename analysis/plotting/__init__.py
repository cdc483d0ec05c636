"""The figure toolkit, one public import for every figure module:
`from analysis.plotting import ...`. Its parts are private modules, by what they draw:

* _core: the shared look of every figure (style, the colour-blind-safe `PALETTE`, log axes and
  ticks, seed bands, fitted curves, reference lines, grids of panels, `save` / `finish`); see
  its docstring.
* _baselines: every baseline predictor in its own `Look`, its value in the legend.
* _notes: human titles, panel notes and the learned-regime verdict on panels, rings around
  cells outside the learned regime.
* _legends: one legend per panel or figure, titled with the seed caption.
"""

from __future__ import annotations

from analysis.plotting._baselines import (
    LOOKS,
    TRIVIAL_LOOKS,
    Look,
    baseline_curve,
    baseline_line,
    draw_references,
    look,
    ridge_solves,
    trivial_lines,
)
from analysis.plotting._core import (
    COLORS,
    DPI,
    FORMATS,
    LEGEND_NAMES,
    ONE_PANEL,
    PALETTE,
    PROMPT_IQR,
    SEED_SPREAD,
    band,
    draw_fit,
    finish,
    fit_label,
    grid_ticks,
    log_axes,
    palette,
    panel_grid,
    power_reference,
    prompt_iqr,
    reference_line,
    save,
    seed_band,
    seed_caption,
    seed_level,
    style,
)
from analysis.plotting._legends import figure_legend, legend_right, legend_title
from analysis.plotting._notes import (
    NOT_LEARNED_LABEL,
    TITLES,
    hollow,
    panel_note,
    regime_note,
    study_title,
)

__all__ = [
    "FORMATS",
    "DPI",
    "PALETTE",
    "COLORS",
    "style",
    "band",
    "SEED_SPREAD",
    "seed_band",
    "seed_level",
    "PROMPT_IQR",
    "prompt_iqr",
    "seed_caption",
    "LEGEND_NAMES",
    "fit_label",
    "draw_fit",
    "reference_line",
    "power_reference",
    "log_axes",
    "ONE_PANEL",
    "panel_grid",
    "save",
    "finish",
    "grid_ticks",
    "palette",
    "Look",
    "LOOKS",
    "TRIVIAL_LOOKS",
    "look",
    "baseline_line",
    "baseline_curve",
    "draw_references",
    "ridge_solves",
    "trivial_lines",
    "TITLES",
    "study_title",
    "panel_note",
    "regime_note",
    "NOT_LEARNED_LABEL",
    "hollow",
    "legend_title",
    "legend_right",
    "figure_legend",
]
