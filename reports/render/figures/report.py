"""The report's figure files for papers: PNG, SVG and PDF of each, through
:func:`headlens.reports.render.figures.common.save_heatmap` / :func:`headlens.reports.render.figures.common.save_figure` (``formats``).

Plotting imports are lazy (inside the functions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headlens.reports.render.figures import ablation as figures_ablation
from headlens.reports.render.figures.common import save_heatmap, titled

__all__ = ["FIGURE_FORMATS", "sink_alpha_heatmap", "ablation_heatmap", "pruning_curve"]

FIGURE_FORMATS = ("png", "svg", "pdf")


def _grid(df: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    grid = np.full((n_layers, n_heads), np.nan)
    grid[df["layer"].to_numpy(int), df["head"].to_numpy(int)] = df[column].to_numpy(float)
    return grid


def sink_alpha_heatmap(
    census: pd.DataFrame, stem: Path, *, eps: float, bos: bool, n_sequences: int | None = None, note: str | None = None
) -> list[Path]:
    """Sink alpha (Gu et al.) per head for one BOS setting, on the sinks stage's own sequences;
    heads with mean alpha > eps there outlined (the sink *role* is the census's, whose alpha is
    measured on other text: the title says which this is).  ``note``: a second title line."""
    n_layers, n_heads = int(census["layer"].max()) + 1, int(census["head"].max()) + 1
    grid = _grid(census, "alpha_mean", n_layers, n_heads)
    uniform = float(census["uniform_alpha"].iloc[0])
    on = f"{n_sequences} sequences" if n_sequences is not None else "its sequences"
    title = (
        f"sinks stage: alpha on {on}, {'with' if bos else 'no'} BOS\n"
        f"(outlined: > {eps:g} here; uniform {uniform:.3f}; the sink role is the census's)"
    )
    return save_heatmap(
        grid, titled(title, note), stem, marked=grid > eps, cbar_label="mean attention to position 0", formats=FIGURE_FORMATS
    )


def ablation_heatmap(
    table: pd.DataFrame, stem: Path, *, n_layers: int, n_heads: int, baseline: float, note: str | None = None
) -> list[Path]:
    """Change in the metric when each head is ablated alone (diverging, centred on 0)."""

    return figures_ablation.ablation_heatmap(
        table, stem, n_layers=n_layers, n_heads=n_heads, baseline=baseline, note=note, formats=FIGURE_FORMATS
    )


def pruning_curve(
    curve: pd.DataFrame, stem: Path, *, metric: str, baseline: float, max_increase: float, removable: float, note: str | None = None
) -> list[Path]:
    """Metric vs heads removed: importance order against random orders (mean, +/- 1 sd, min-max)."""

    return figures_ablation.pruning_curve(
        curve, stem, metric=metric, baseline=baseline, max_increase=max_increase, removable=removable, note=note, formats=FIGURE_FORMATS
    )
