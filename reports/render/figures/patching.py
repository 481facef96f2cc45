"""Heatmaps of patching results: layer x head effects, and the sender x receiver table of path patching."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headlens.reports.render.figures.common import _pyplot, heatmap_figure, save_figure

__all__ = ["patching_heatmaps", "patching_heatmap_figures", "path_heatmap", "path_heatmap_figure"]


def _grid(table: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    grid = np.full((n_layers, n_heads), np.nan)
    grid[table["layer"].to_numpy(int), table["head"].to_numpy(int)] = table[column].to_numpy(float)
    return grid


def patching_heatmaps(
    table: pd.DataFrame,
    out_dir: str | Path,
    *,
    n_layers: int,
    n_heads: int,
    columns: Sequence[str],
    note: str = "",
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """:func:`patching_heatmap_figures` saved as ``out_dir/heatmap_<column>.<fmt>``; returns their paths."""
    paths: list[Path] = []
    for column, fig in patching_heatmap_figures(table, n_layers=n_layers, n_heads=n_heads, columns=columns, note=note).items():
        paths += save_figure(fig, Path(out_dir) / f"heatmap_{column}", formats)
    return paths


def patching_heatmap_figures(table: pd.DataFrame, *, n_layers: int, n_heads: int, columns: Sequence[str], note: str = "") -> dict[str, Any]:
    """One heatmap Figure per effect column (``denoising``, ``noising``, ``attribution``), 0 corrupted .. 1 clean.

    Per-position tables are drawn as the strongest position of each head (by absolute value)."""
    figures: dict[str, Any] = {}
    if "pos" in table:
        table = table.loc[table.groupby(["layer", "head"])[columns[0]].apply(lambda s: s.abs().idxmax() if s.notna().any() else s.index[0])]
    for column in columns:
        if column not in table or table[column].isna().all():
            continue
        grid = _grid(table, column, n_layers, n_heads)
        title = f"{column} (0 corrupted .. 1 clean){' ' + note if note else ''}"
        if column == "attribution":
            title = f"attribution patching: first-order ESTIMATE of denoising{' ' + note if note else ''}"
        figures[column] = heatmap_figure(grid, title, vmin=-1.0, vmax=1.0, cmap="RdBu_r", center=0.0, cbar_label="normalised effect")
    return figures


def path_heatmap(table: pd.DataFrame, out_dir: str | Path, *, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """:func:`path_heatmap_figure` saved as ``out_dir/heatmap_path.<fmt>``; returns their paths."""
    return save_figure(path_heatmap_figure(table), Path(out_dir) / "heatmap_path", formats)


def path_heatmap_figure(table: pd.DataFrame) -> Any:
    """Senders (rows) x receivers (columns) of path patching."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    wide = table.pivot(index="sender", columns="receiver", values="effect")
    order = sorted(wide.index, key=lambda s: tuple(int(x) for x in s.split(".")))
    wide = wide.loc[order]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * wide.shape[1] + 2), max(3.0, 0.3 * wide.shape[0] + 1.5)))
    sns.heatmap(
        wide,
        ax=ax,
        vmin=-1.0,
        vmax=1.0,
        center=0.0,
        cmap="RdBu_r",
        annot=wide.size <= 200,
        fmt=".2f",
        annot_kws={"size": 7},
        cbar_kws={"label": "normalised effect"},
    )
    which = str(table["receiver_input"].iloc[0]) if len(table) else "?"
    ax.set_title(f"path patching: sender -> receiver's {which} input (0 corrupted .. 1 clean)")
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    return fig
