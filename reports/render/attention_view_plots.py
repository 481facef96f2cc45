"""Attention as matplotlib Figures: one head's pattern with token labels, a grid of several heads'
patterns, and a layer x head heatmap of any per-head score.

Every function returns a :class:`matplotlib.figure.Figure` on its own Agg canvas (no pyplot, no
backend or style change); a notebook shows it, ``fig.savefig(...)`` writes it.  The layer x head
heatmap is the one the CLI and the report save (:func:`headlens.reports.render.figures.common.heatmap_figure`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from headlens.probes.errors import InputError
from headlens.reports.render.figures.common import NotebookFigure, heatmap_figure
from headlens.reports.render.page.attention_component import is_causal, token_label
from headlens.reports.render.page.heatmaps import head_grid

log = logging.getLogger(__name__)

__all__ = ["plot_pattern", "plot_patterns", "plot_heads", "MAX_LABELLED_TOKENS", "MAX_PANELS"]

#: Above this many tokens a pattern's axes name every k-th token only (the labels would overlap).
MAX_LABELLED_TOKENS = 48
#: The most heads one grid of patterns draws; pick layer= and head= beyond it.
MAX_PANELS = 64
_CMAP = "viridis"


def _figure(width: float, height: float) -> Figure:
    fig = NotebookFigure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _label(token: str) -> str:
    return token_label(token)


def _as_array(pattern: Any, name: str = "pattern") -> np.ndarray:
    a = pattern.detach().float().cpu().numpy() if isinstance(pattern, torch.Tensor) else np.asarray(pattern, dtype=np.float64)
    if not np.isfinite(a).all():
        raise InputError(f"{name} holds NaN or infinite weights", **{name: a.shape})
    return a


def _draw(ax: Any, a: np.ndarray, causal: bool) -> Any:
    """``a [q, k]`` on ``ax``, later keys of a causal pattern left blank (not attended)."""
    shown = np.ma.masked_where(np.triu(np.ones_like(a, dtype=bool), k=1), a) if causal else a
    return ax.imshow(shown, cmap=_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal")


def plot_pattern(pattern: Any, tokens: Sequence[str], *, title: str | None = None, causal: bool | None = None) -> Figure:
    """One head's attention pattern ``[query, key]`` as a heatmap, both axes labelled with ``tokens``.

    ``causal=None`` reads it from the weights (nothing above the diagonal: later keys are left
    blank, not drawn as 0).  Weights are drawn on a fixed 0..1 scale, so figures compare.
    """
    a = _as_array(pattern)
    n = len(tokens)
    if a.ndim != 2 or a.shape != (n, n):
        raise InputError(f"pattern has shape {a.shape}; expected [query, key] = ({n}, {n}) for {n} tokens", pattern=a.shape)
    causal = is_causal(a) if causal is None else causal
    side = min(14.0, max(4.0, 0.28 * n + 2.0))
    fig = _figure(side + 1.2, side)
    ax = fig.subplots()
    image = _draw(ax, a, causal)
    step = max(1, math.ceil(n / MAX_LABELLED_TOKENS))
    ticks = list(range(0, n, step))
    labels = [f"{_label(tokens[i])} ({i})" if step > 1 else _label(tokens[i]) for i in ticks]
    ax.set_xticks(ticks, labels, rotation=90, fontsize=8)
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, label="attention weight", fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_patterns(patterns: Any, tokens: Sequence[str], *, layers: Sequence[int], heads: Sequence[int], title: str | None = None) -> Figure:
    """Several heads' patterns ``[layer, head, q, k]`` as a grid: a row per layer, a column per head."""
    a = _as_array(patterns, "patterns")
    n = len(tokens)
    if a.shape != (len(layers), len(heads), n, n):
        raise InputError(
            f"patterns has shape {a.shape}; expected [layers, heads, q, k] = {(len(layers), len(heads), n, n)}", patterns=a.shape
        )
    if len(layers) * len(heads) > MAX_PANELS:
        raise InputError(
            f"{len(layers) * len(heads)} heads are more than one figure shows ({MAX_PANELS}): pick layer= (and head=)",
            layer=None,
            head=None,
        )
    causal = is_causal(a)
    rows, cols = len(layers), len(heads)
    fig = _figure(1.9 * cols + 1.0, 1.9 * rows + 0.8)
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            ax = axes[i][j]
            image = _draw(ax, a[i, j], causal)
            ax.set_title(f"{layer}.{head}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle(title or f"attention patterns on {n} tokens (rows: query, columns: key)", fontsize=10)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight", shrink=0.8)
    return fig


def _check_table(table: Any, column: str) -> pd.DataFrame:
    if not isinstance(table, pd.DataFrame):
        raise InputError(
            f"table must be a pandas DataFrame with columns layer, head and {column!r}, got {type(table).__name__}",
            table=type(table).__name__,
        )
    missing = [c for c in ("layer", "head", column) if c not in table.columns]
    if missing:
        raise InputError(
            f"table has no column {', '.join(map(repr, missing))} (it has {', '.join(map(str, table.columns))})",
            table=list(table.columns),
            column=column,
        )
    if not len(table):
        raise InputError("table has no rows", table=0)
    idx = np.stack([pd.Series(pd.to_numeric(table[c], errors="coerce")).to_numpy(dtype=float) for c in ("layer", "head")], axis=1)
    if not np.isfinite(idx).all() or (idx < 0).any() or (idx % 1 != 0).any():
        raise InputError("table's layer and head columns must hold non-negative whole numbers", table=list(table.columns))
    dup = pd.DataFrame(idx).duplicated().to_numpy()
    if dup.any():
        layer, head = (int(x) for x in idx[dup][0])
        raise InputError(
            f"table has several rows for head {layer}.{head} (e.g. one per detector): keep one row per head, "
            f"e.g. table[table['detector'] == 'induction']",
            table=len(table),
        )
    values = pd.Series(pd.to_numeric(table[column], errors="coerce")).to_numpy(dtype=float)
    if not np.isfinite(values).any():
        raise InputError(f"column {column!r} holds no number", column=column)
    return pd.DataFrame({"layer": idx[:, 0].astype(int), "head": idx[:, 1].astype(int), column: values})


def plot_heads(
    table: pd.DataFrame,
    column: str,
    *,
    title: str | None = None,
    n_layers: int | None = None,
    n_heads: int | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str | None = None,
) -> Figure:
    """A layer x head heatmap of ``table[column]``: any per-head table with ``layer``, ``head`` and
    ``column`` (a census's scores for one detector, ablation deltas, pruning importance...).

    One row per head (filter a long table first).  The grid is ``n_layers x n_heads`` (default: the
    largest indices + 1); heads without a row or a number are left blank.  Values of both signs get
    a diverging map centred on 0, others viridis over their range, unless ``vmin``/``vmax``/``cmap``.
    """
    t = _check_table(table, column)
    L = int(t["layer"].max()) + 1 if n_layers is None else int(n_layers)
    H = int(t["head"].max()) + 1 if n_heads is None else int(n_heads)
    if L < 1 or H < 1 or int(t["layer"].max()) >= L or int(t["head"].max()) >= H:
        raise InputError(
            f"n_layers={n_layers}, n_heads={n_heads} leave out heads of table (largest: {int(t['layer'].max())}.{int(t['head'].max())})",
            n_layers=n_layers,
            n_heads=n_heads,
        )
    grid = head_grid(t, column, L, H)
    lo, hi = float(np.nanmin(grid)), float(np.nanmax(grid))
    center = None
    if lo < 0 < hi and cmap is None:
        bound = max(-lo, hi)
        cmap, center, lo, hi = "RdBu_r", 0.0, -bound, bound
    return heatmap_figure(
        grid,
        title or f"{column} by head",
        vmin=lo if vmin is None else vmin,
        vmax=hi if vmax is None else vmax,
        cmap=cmap or "viridis",
        center=center,
        cbar_label=column,
    )
