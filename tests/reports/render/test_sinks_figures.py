"""The sink figures say what they show: ``sink_lengths`` as small multiples (one quantity per
panel, one solid line per layer, a y range that fits the data), the content heatmap with labels
that stay readable when there are many heads."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import headlens.reports.render.figures.sinks as sink_figs
from headlens.analyses.sinks.lengths import LengthsConfig, run_sink_lengths

#: Smallest font a label may have (points) once the figure is shown at its own width.
MIN_LABEL_PT = 8
#: Widest figure (inches) a page shows without scaling it down (about 1150 px at 96 dpi).
MAX_WIDTH_IN = 12.5
#: A panel's data must fill at least this share of its y range (no lines piled near 0).
MIN_FILL = 0.5


@pytest.fixture
def captured(monkeypatch):
    """The figures the module saves, drawn, instead of files."""
    figs = []

    def keep(fig, out_dir, stem):
        fig.canvas.draw()
        figs.append(fig)
        return []

    monkeypatch.setattr(sink_figs, "_save", keep)
    return figs


def test_sink_lengths_figure_is_one_quantity_per_panel(family_model, captured, tmp_path):
    model = family_model("mistral")  # sliding windows of 16 keys on every layer
    table = run_sink_lengths(model, LengthsConfig(lengths=(16, 32, 64), n_sequences=1, attention="eager")).table
    table = pd.concat([table.assign(bos=True), table.assign(bos=False)], ignore_index=True)
    sink_figs.lengths_plot(table, tmp_path, 0.3)
    (fig,) = captured
    axes = [ax for ax in fig.axes if ax.get_xscale() == "log"]  # the colour bar, if any, is not a panel
    assert len(axes) == 2 * 5, [ax.get_title() for ax in fig.axes]  # 4 quantities + window layers' visible alpha, per setting
    titles = [ax.get_title() for ax in axes]
    for quantity in ("alpha (all queries", "sink rate", "first-token share", "value-norm share", "queries i < w"):
        assert sum(quantity in t for t in titles) == 2, (quantity, titles)
    for ax in axes:
        layer_lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("layer ")]
        assert len(layer_lines) == model.n_layers, ax.get_title()
        assert {ln.get_linestyle() for ln in layer_lines} == {"-"}, ax.get_title()  # one style: a line per layer, no piled styles
        assert len({ln.get_color() for ln in layer_lines}) == model.n_layers
        assert [int(x) for x in ax.get_xticks()] == [16, 32, 64]  # the lengths run, on a log-2 axis
        if "sink rate" not in ax.get_title():
            top = max(float(np.max(ln.get_ydata())) for ln in ax.get_lines() if len(ln.get_ydata()))
            assert top >= MIN_FILL * ax.get_ylim()[1], (ax.get_title(), top, ax.get_ylim())
    alpha = next(ax for ax in axes if ax.get_title().startswith("alpha (all queries"))
    assert any(ln.get_label() == "uniform attention" and ln.get_linestyle() == "--" for ln in alpha.get_lines())


def _content(n_layers: int, n_heads: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    variants = ["bos", "frequent", "punctuation", "newline", "random", "text", "bos_second"]
    rows = [
        dict(variant=v, layer=la, head=h, alpha_first=float(rng.beta(0.5, 3)))
        for v in variants
        for la in range(n_layers)
        for h in range(n_heads)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("shape", [(2, 4), (12, 12)])
def test_content_heatmap_labels_stay_readable(shape, captured, tmp_path):
    """144 heads (GPT-2 small) used to make a 1500 x 360 pt strip whose labels shrink to a few
    pixels on a page; now every label is at least MIN_LABEL_PT at a width a page shows as is,
    tick labels do not overlap, and every head shown appears once."""
    content = _content(*shape)
    sink_figs.content_heatmap(content, tmp_path, 0.3)
    (fig,) = captured
    width, _ = fig.get_size_inches()
    assert width <= MAX_WIDTH_IN, width
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_xticklabels() and ax.get_xticklabels()[0].get_text()]
    shown = []
    for ax in panels:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) <= sink_figs.CONTENT_COLUMNS_PER_ROW
        for t in [*labels, *ax.get_yticklabels()]:
            assert t.get_fontsize() >= MIN_LABEL_PT, (t.get_text(), t.get_fontsize())
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), "x tick labels overlap"
        shown += [t.get_text() for t in labels]
    n_heads = shape[0] * shape[1]
    assert len(shown) == len(set(shown)) == min(n_heads, 48)
