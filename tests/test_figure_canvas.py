"""A figure lays out only the panels it draws and fills its saved canvas: one panel is not a
sliver beside the empty space a long title or a grid sized for more panels leaves (the reduced
deep_shift figure drew its one panel in a sixth of a 1,600-pixel image)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import polars as pl
import pytest
from matplotlib.transforms import Bbox

from analysis.figures.registry import FIGURES
from analysis.plotting import DPI, ONE_PANEL, panel_grid, save, style
from tests.test_figure_honesty import deep_rows

# the title of the reduced run under docs/figures/reduced/ (regenerate --scale): long
SCALE = "reduced: d = 4, teacher width 16, inputs N(0, I), 10k steps"



def shift_rows(teacher_depths=(3,), dists=("w0.0",)) -> pl.DataFrame:
    """deep_rows (two mixers, three seeds) at these teacher depths and test mixtures, at the
    reduced scale."""
    rows = pl.concat([deep_rows().with_columns(
        pl.lit(n).alias("task.depth"), (pl.col("config_hash") + f"N{n}").alias("config_hash"))
        for n in teacher_depths])
    return rows.filter(pl.col("test_dist").is_in(dists)).with_columns(
        pl.lit(SCALE).alias("scale"))


def canvas_share(fig, png) -> float:
    """The share of the saved PNG's width spanned by the figure's axes together."""
    renderer = fig.canvas.get_renderer()
    panels = Bbox.union([ax.get_window_extent(renderer) for ax in fig.axes])
    return panels.width / fig.dpi * DPI / plt.imread(png).shape[1]


def drawn(fig) -> bool:
    """Every axes of the figure is visible and has something drawn on it."""
    return all(ax.get_visible() and ax.has_data() for ax in fig.axes)


def test_one_panel_fills_its_canvas(tmp_path, kept_figures):
    summary = FIGURES["deep_shift"](shift_rows(), tmp_path)
    pngs = [p for p in summary["paths"] if p.suffix == ".png"]
    assert len(kept_figures) == len(pngs) == 3  # softmax, ReLU, summary (no epoch rows)
    for fig, png in zip(kept_figures, pngs, strict=True):
        assert len(fig.axes) == 1 and drawn(fig), png.name
        assert canvas_share(fig, png) >= 0.5, png.name  # was 0.19: title and legend around it
        assert fig.get_size_inches()[0] >= ONE_PANEL[0]


def test_a_grid_keeps_every_panel_it_draws(tmp_path, kept_figures):
    summary = FIGURES["deep_shift"](shift_rows((2, 3), ("w0.0", "w0.5")), tmp_path)
    pngs = [p for p in summary["paths"] if p.suffix == ".png"]
    shift, _, summary_fig = kept_figures
    assert len(shift.axes) == 4 and drawn(shift)  # teacher depth N x ω₂
    assert [ax.get_title() for ax in shift.axes[:2]] == ["ω₂ = 0", "ω₂ = 0.5"]
    assert len(summary_fig.axes) == 2 and drawn(summary_fig)  # one panel per N
    for fig, png in zip(kept_figures, pngs, strict=True):
        assert canvas_share(fig, png) >= 0.5, png.name


def test_panel_grid_is_sized_by_its_panels_and_never_below_one_panel():
    fig, axes = panel_grid(2, 3, (2.6, 2.2))
    assert axes.shape == (2, 3) and tuple(fig.get_size_inches()) == pytest.approx((7.8, 4.4))
    plt.close(fig)
    fig, axes = panel_grid(1, 1, (2.6, 2.2))
    assert axes.shape == (1, 1) and tuple(fig.get_size_inches()) == pytest.approx(ONE_PANEL)
    plt.close(fig)


def test_a_long_panel_title_wraps_at_the_figure_and_keeps_its_text(tmp_path):
    """A panel's title wider than the figure (a study title with its scale) is wrapped while
    the figure is saved: the canvas keeps the figure's width, and the title its text."""
    style()
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    title = f"Liu et al. Figs 2, 10: least squares vs depth, Transformer vs BaseConv [{SCALE}]"
    ax.set_title(title, fontsize=9)
    png = save(fig, tmp_path, "long_title")[0]
    assert plt.imread(png).shape[1] <= (fig.get_size_inches()[0] + 0.2) * DPI  # pad 0.1 a side
    assert canvas_share(fig, png) >= 0.7 and ax.get_title() == title
    plt.close(fig)
