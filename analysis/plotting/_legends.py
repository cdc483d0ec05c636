"""Legends: one legend right of a panel (`legend_right`) or of a grid of panels
(`figure_legend`), every labelled artist once, titled with what the seed bands mean
(`legend_title`: analysis.plotting.seed_caption).
"""

from __future__ import annotations

from matplotlib.figure import Figure

from analysis.plotting._core import seed_caption


def _handles(axes) -> dict[str, object]:
    seen: dict[str, object] = {}
    for a in axes:
        for handle, label in zip(*a.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    return seen


def legend_title(axes, title: str | None = None) -> dict:
    """Legend keyword arguments for a title: `title`, else the seed caption of `axes`
    (`seed_caption`); {} when there is neither."""
    text = title if title is not None else seed_caption(list(axes))
    return {"title": text, "title_fontsize": 6.5, "alignment": "left"} if text else {}


def legend_right(axes, ax, title: str | None = None, **kwargs) -> None:
    """One legend right of `ax` with every labelled artist of `axes` (duplicates once),
    titled with `title` or the axes' seed caption."""
    seen = _handles(axes)
    if seen:
        ax.legend(list(seen.values()), list(seen), loc="center left", bbox_to_anchor=(1.01, 0.5),
                  **legend_title(axes, title), **kwargs)


def figure_legend(fig: Figure, axes, fontsize: float = 7, title: str | None = None) -> None:
    """One legend for a grid of small panels, right of the figure (no panel hides it),
    titled with `title` or the panels' seed caption."""
    axes = list(axes)
    seen = _handles(axes)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="center left",
                   bbox_to_anchor=(1.0, 0.5), fontsize=fontsize, **legend_title(axes, title))
