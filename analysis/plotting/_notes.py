"""Text and marks on panels: a human title per study (`TITLES`, `study_title`), small grey
notes (`panel_note`), the learned-regime verdict boxed in dark red (`regime_note`), and a ring
around points outside the learned regime (`hollow`).
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.axes import Axes

TITLES = {
    # Liu et al. 2024 (least squares to high precision)
    "least_squares": "Liu et al. Fig 2: least squares, query MSE vs depth",
    "least_squares_depth_width": "Scale-up: least squares, query MSE vs depth x width x D",
    "ls_mixer_depth": "Liu et al. Figs 2, 10: least squares vs depth, Transformer vs BaseConv",
    "primitives_depth": "Liu et al. Figs 3, 8: READ / AFFINE / MULTIPLY vs depth, ± LayerNorm",
    "construction": "Liu et al. Fig 5: hand-built BaseConv GD vs GD",
    "features_depth": "Liu et al. Fig 6: error of w* vs depth, construction features k",
    "explicit_gradient": "Liu et al. Fig 7: explicit gradient and iterative inference",
    "multiply_heads": "Liu et al. Fig 4 (middle): MULTIPLY vs attention heads",
    "multiply_width": "Liu et al. Fig 4 (left): MULTIPLY vs attention width",
    "multiply_mlp": "Liu et al. Fig 4 (right): MULTIPLY vs MLP width",
    "multiply_steps": "Liu et al. Fig 9: MULTIPLY vs training steps",
    "icl_prefix": "Liu et al. Fig 1: MSE vs in-context examples, model vs OLS",
    "least_squares_heads": "Least squares vs attention heads (Liu et al. Fig 4 setting)",
    "least_squares_width": "Least squares vs width (Liu et al. Fig 4 setting)",
    "least_squares_steps": "Least squares vs training steps (Liu et al. Fig 9 setting)",
    "fixed_n_points": "Least squares vs prompt length N",
    # Mousavi-Hosseini et al. (sparse token retrieval)
    "str_1": "Mousavi-Hosseini et al. Fig 1a: samples to reach a test MSE on 1STR",
    "str_simple": "Mousavi-Hosseini et al. Fig 1b: samples to reach a test MSE on simple-1STR",
    "str_heads": "Mousavi-Hosseini et al. Prop. 3: qSTR (q = 2) with H attention heads",
    "str_attention": "Mousavi-Hosseini et al. Fig 2: learned |W_QK|",
    # Wu et al. 2024 (transformers as deep optimizers)
    "teacher_shift": "Wu et al. Figs 1-2: R² vs in-context examples under teacher shift",
    "transformer_depth": "Wu et al. Fig 3: R² vs transformer depth",
    "scaleup": "Scale-up of Wu et al.: 1 - R² vs depth x width",
    # AlgoFormer
    "examples": "AlgoFormer Fig 2: error vs in-context examples",
    "loops": "AlgoFormer Fig 3: error vs inference loops",
    "layers_heads": "AlgoFormer Fig 4: error vs layers and heads",
    "vs_newton": "AlgoFormer Fig 5: AlgoFormer vs GD and Newton–Schulz",
    # Ahn et al. 2023 (preconditioned GD)
    "fig1_sparse": "Ahn et al. Figs 1-2: sparse LSA learns preconditioned GD",
    "fig3_sparse_b": "Ahn et al. Figs 3-4: LSA with B",
    "lsa_layers": "Ahn et al.: trained LSA loss vs layers L, next to f_L*",
    "lsa_context": "Ahn et al.: trained LSA loss vs context length n, next to f_L*",
    "lsa_dim": "Ahn et al.: trained 3-layer LSA loss at n = 10 vs dimension d, next to f_3*",
}


def study_title(rows, suffix: str = "") -> str:
    """A human title for the rows' study (`TITLES`, else "sweep/study"), e.g. "Liu et al.
    Figs 2, 10: least squares vs depth, Transformer vs BaseConv (float32)"."""
    studies = sorted(str(v) for v in rows["study"].drop_nulls().unique().to_list()) \
        if "study" in rows.columns else []
    if len(studies) == 1 and studies[0] in TITLES:
        title = TITLES[studies[0]]
    else:
        sweeps = sorted(str(v) for v in rows["sweep"].drop_nulls().unique().to_list()) \
            if "sweep" in rows.columns else []
        title = f"{'/'.join(sweeps) or '?'}/{'/'.join(studies) or '?'}"
    title = f"{title} ({suffix})" if suffix else title
    scales = rows["scale"].drop_nulls().unique().to_list() if "scale" in rows.columns else []
    return f"{title} [{scales[0]}]" if len(scales) == 1 else title


def panel_note(ax: Axes, lines, loc: str = "lower left", fontsize: float = 6.5):
    """Small grey text in a corner of the panel (lines joined by newlines); None if empty."""
    lines = [t for t in lines if t]
    if not lines:
        return None
    x, ha = (0.02, "left") if "left" in loc else (0.98, "right")
    y, va = (0.02, "bottom") if "lower" in loc else (0.98, "top")
    return ax.text(x, y, "\n".join(lines), transform=ax.transAxes, ha=ha, va=va,
                   fontsize=fontsize, color="0.3", zorder=9,
                   bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "alpha": 0.7,
                         "edgecolor": "none"})


def regime_note(ax: Axes, lines, loc: str = "below", width: int = 64):
    """The learned-regime verdict of a panel ("not testable at this scale: ..."), boxed in
    dark red so a reader cannot miss it: under the panel's x label ("below", where it hides no
    data) or in a corner ("upper left", ...), lines wrapped at `width` characters; None when
    there is nothing to say."""
    lines = [textwrap.fill(t, width, subsequent_indent="  ") for t in lines if t]
    if not lines:
        return None
    box = {"boxstyle": "round,pad=0.25", "facecolor": "white", "alpha": 0.85,
           "edgecolor": "#8b0000", "linewidth": 0.6}
    if loc == "below":
        return ax.annotate("\n".join(lines), xy=(0.0, 0.0), xycoords="axes fraction",
                           xytext=(0, -38), textcoords="offset points", ha="left", va="top",
                           fontsize=6.5, color="#8b0000", bbox=box, annotation_clip=False)
    x, ha = (0.02, "left") if "left" in loc else (0.98, "right")
    y, va = (0.98, "top") if "upper" in loc else (0.02, "bottom")
    return ax.text(x, y, "\n".join(lines), transform=ax.transAxes, ha=ha, va=va, fontsize=6.5,
                   color="#8b0000", zorder=10, bbox=box)


NOT_LEARNED_LABEL = "ring: not in the learned regime"


def hollow(ax: Axes, x, y, color) -> None:
    """A ring around each point outside the learned regime (the point itself stays visible),
    and one legend entry saying what a ring means."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size == 0:
        return
    labels = {h.get_label() for h in ax.get_lines()}
    ax.plot(x, y, linestyle="none", marker="o", markersize=9, markerfacecolor="none",
            markeredgecolor=color, markeredgewidth=1.1, zorder=4)
    if NOT_LEARNED_LABEL not in labels:
        ax.plot([], [], linestyle="none", marker="o", markersize=7, markerfacecolor="none",
                markeredgecolor="0.3", label=NOT_LEARNED_LABEL)

