"""headlens draws without pyplot, so a notebook shows its Figures only through ``_repr_png_``.

Jupyter's inline backend registers its PNG hook only once pyplot is imported; without it a bare
matplotlib Figure shows as ``<Figure size ...>`` text.  Every figure headlens hands a user
(a study's ``plot()``, ``plot_heads``, ``plot_pattern``, a view's ``plot()``) must display as a PNG
in a plain IPython display formatter (no inline backend).
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from IPython.core.formatters import DisplayFormatter  # the test extra's ipykernel brings IPython
from matplotlib.figure import Figure
from matplotlib.image import imread

from headlens.reports.render.attention_view_plots import plot_heads, plot_pattern
from headlens.reports.render.figures.common import heatmap_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _shown(fig) -> dict:
    data, _ = DisplayFormatter().format(fig)
    return data


def test_a_bare_matplotlib_figure_is_text_only_without_the_inline_backend():
    """The premise: what a plain Figure shows in a formatter with no inline hook (this test
    failing would mean the problem, and the class below, are moot)."""
    assert "image/png" not in _shown(Figure())


@pytest.mark.parametrize("make", ["heatmap", "plot_heads", "plot_pattern"])
def test_headlens_figures_display_as_png(make):
    if make == "heatmap":
        fig = heatmap_figure(np.arange(6, dtype=float).reshape(2, 3), title="t", cbar_label="score")
    elif make == "plot_heads":
        table = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "score": [0.1, 0.2, 0.3, 0.4]})
        fig = plot_heads(table, "score")
    else:
        fig = plot_pattern(np.tril(np.full((3, 3), 1 / 3)), ["a", "b", "c"])
    png = _shown(fig).get("image/png")
    assert png is not None, f"{make}: no image/png in the notebook display"
    assert png[:8] == PNG_MAGIC and len(png) > 1000


def _edges_are_background(png: bytes) -> dict[str, bool]:
    """Whether each edge row/column of the image is all background (white): a label or title
    cut by the image border leaves ink on the edge."""
    rgb = np.asarray(imread(io.BytesIO(png), format="png"))[..., :3]
    ink: np.ndarray = np.asarray((rgb < 0.9).any(axis=-1))
    return {"top": not ink[0].any(), "bottom": not ink[-1].any(), "left": not ink[:, 0].any(), "right": not ink[:, -1].any()}


@pytest.mark.parametrize("make", ["heatmap", "ablation", "plot_heads"])
def test_notebook_png_is_not_clipped(make):
    """The notebook PNG is drawn with a tight bounding box, as the files are: the x-label "head"
    and the title lie inside the image (before, the heatmap's "head" label was cut at the bottom)."""
    from headlens.reports.render.figures.ablation import ablation_heatmap_figure

    if make == "heatmap":
        fig = heatmap_figure(np.arange(8, dtype=float).reshape(2, 4), title="induction score (uniform baseline 0.100)")
    elif make == "ablation":
        table = pd.DataFrame(
            {"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "delta": [0.1, -0.2, 0.3, 0.05], "metric": ["loss"] * 4, "method": ["zero"] * 4}
        )
        fig = ablation_heatmap_figure(table, n_layers=2, n_heads=2, baseline=4.5)
    else:
        table = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "score": [0.1, 0.2, 0.3, 0.4]})
        fig = plot_heads(table, "score")
    label = fig.axes[0].xaxis.label
    assert label.get_text(), "the figure has an x-label to check"
    png = _shown(fig)["image/png"]
    edges = _edges_are_background(png)
    assert all(edges.values()), f"{make}: ink on the image border (clipped): {edges}"
