"""Heatmaps of patching results: layer x head effects, and the sender x receiver table of path patching."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from headlens.reports.figures.common import save_heatmap

__all__ = ["patching_heatmaps", "path_heatmap"]


def _grid(table: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    grid = np.full((n_layers, n_heads), np.nan)
    grid[table["layer"].to_numpy(int), table["head"].to_numpy(int)] = table[column].to_numpy(float)
    return grid


def patching_heatmaps(table: pd.DataFrame, out_dir: str | Path, *, n_layers: int, n_heads: int, columns: Sequence[str], note: str = "", formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """One heatmap per effect column (``denoising``, ``noising``, ``attribution``), 0 corrupted .. 1 clean.

    Per-position tables are drawn as the strongest position of each head (by absolute value)."""
    paths: list[Path] = []
    if "pos" in table:
        table = table.loc[table.groupby(["layer", "head"])[columns[0]].apply(lambda s: s.abs().idxmax() if s.notna().any() else s.index[0])]
    for column in columns:
        if column not in table or table[column].isna().all():
            continue
        grid = _grid(table, column, n_layers, n_heads)
        title = f"{column} (0 corrupted .. 1 clean){' ' + note if note else ''}"
        if column == "attribution":
            title = f"attribution patching: first-order ESTIMATE of denoising{' ' + note if note else ''}"
        paths += save_heatmap(grid, title, Path(out_dir) / f"heatmap_{column}", vmin=-1.0, vmax=1.0, cmap="RdBu_r", center=0.0, cbar_label="normalised effect", formats=formats)
    return paths


def path_heatmap(table: pd.DataFrame, out_dir: str | Path, *, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Senders (rows) x receivers (columns) of path patching."""
    import seaborn as sns

    from headlens.reports.figures.common import _pyplot, save_figure

    wide = table.pivot(index="sender", columns="receiver", values="effect")
    order = sorted(wide.index, key=lambda s: tuple(int(x) for x in s.split(".")))
    wide = wide.loc[order]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * wide.shape[1] + 2), max(3.0, 0.3 * wide.shape[0] + 1.5)))
    sns.heatmap(wide, ax=ax, vmin=-1.0, vmax=1.0, center=0.0, cmap="RdBu_r", annot=wide.size <= 200, fmt=".2f", annot_kws={"size": 7}, cbar_kws={"label": "normalised effect"})
    which = str(table["receiver_input"].iloc[0]) if len(table) else "?"
    ax.set_title(f"path patching: sender -> receiver's {which} input (0 corrupted .. 1 clean)")
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    return save_figure(fig, Path(out_dir) / "heatmap_path", formats)
