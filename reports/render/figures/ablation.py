"""Figures of ablation and pruning studies, written as PNG and SVG (or the ``formats`` asked for).

Figures are drawn on their own Agg canvas (:mod:`headlens.reports.render.figures.common`).  SVGs are
deterministic (fixed hash salt, no date).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.measure.evalset import METRIC_LABELS
from headlens.reports.render.figures.common import _pyplot, save_figure, titled

__all__ = ["ablation_heatmap", "ablation_heatmap_figure", "pruning_curve", "pruning_curve_figure"]


def _label(metric: str) -> str:
    return METRIC_LABELS.get(str(metric), str(metric))


def _plt() -> Any:
    return _pyplot()


def ablation_heatmap(
    table: pd.DataFrame,
    stem: str | Path,
    *,
    n_layers: int,
    n_heads: int,
    baseline: float,
    title: str | None = None,
    note: str | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """:func:`ablation_heatmap_figure` saved as ``stem.png`` and ``stem.svg``; returns their paths."""
    fig = ablation_heatmap_figure(table, n_layers=n_layers, n_heads=n_heads, baseline=baseline, title=title, note=note)
    return save_figure(fig, stem, formats)


def ablation_heatmap_figure(
    table: pd.DataFrame, *, n_layers: int, n_heads: int, baseline: float, title: str | None = None, note: str | None = None
) -> Any:
    """Layer x head heatmap of ``delta`` (diverging, centred on 0; heads not in the table blank).

    ``baseline``: the unablated value, in the title (not for the embedding change, which is a
    change from the unablated model already: 0 there by construction).  ``note``: a second
    title line (the smoke-test mark).
    """
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    plt = _plt()
    grid = pd.DataFrame(np.nan, index=pd.RangeIndex(n_layers, name="layer"), columns=pd.RangeIndex(n_heads, name="head"))
    cells = zip(table["layer"].tolist(), table["head"].tolist(), table["delta"].tolist(), strict=True)
    for layer, head, delta in cells:
        grid.loc[layer, head] = delta
    finite = grid.to_numpy()[np.isfinite(grid.to_numpy())]
    bound = float(np.abs(finite).max()) if finite.size else 1.0
    bound = bound or 1.0
    method = table["method"].iloc[0] if len(table) else "?"
    metric_name = str(table["metric"].iloc[0]) if len(table) else "?"
    metric = _label(metric_name)
    if metric_name == "embedding":
        default_title, cbar = f"{method} ablation of each head: {metric} from the unablated model", metric
    else:
        default_title, cbar = f"{method} ablation of each head: change in {metric} (unablated {baseline:.4f})", f"change in {metric}"
    fig, ax = plt.subplots(figsize=(max(5.0, 2.5 + 0.55 * n_heads), max(2.8, 1.6 + 0.42 * n_layers)))
    annot = n_layers * n_heads <= 16 * 16
    sns.heatmap(
        grid,
        ax=ax,
        cmap="RdBu_r",
        vmin=-bound,
        vmax=bound,
        annot=annot,
        fmt=".3f",
        annot_kws={"size": 6 if n_layers * n_heads > 64 else 8},
        cbar_kws={"label": cbar},
        mask=grid.isna(),
    )
    ax.set_title(titled(title or default_title, note))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    return fig


def pruning_curve(
    curve: pd.DataFrame,
    stem: str | Path,
    *,
    metric: str,
    baseline: float,
    max_increase: float,
    removable: float,
    title: str | None = None,
    note: str | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """:func:`pruning_curve_figure` saved as ``stem.png`` and ``stem.svg``; returns their paths."""
    fig = pruning_curve_figure(
        curve, metric=metric, baseline=baseline, max_increase=max_increase, removable=removable, title=title, note=note
    )
    return save_figure(fig, stem, formats)


def pruning_curve_figure(
    curve: pd.DataFrame,
    *,
    metric: str,
    baseline: float,
    max_increase: float,
    removable: float,
    title: str | None = None,
    note: str | None = None,
) -> Any:
    """Metric vs fraction of heads removed: importance order (Michel et al.) against random
    orders (mean, +/- 1 std band, min-max band), with the ``max_increase`` threshold and the
    removable fraction marked; ``note``: a second title line (the smoke-test mark)."""
    plt = _plt()

    x = curve["fraction_removed"] * 100
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    if curve["random_mean"].notna().any():
        ax.fill_between(
            x, curve["random_min"], curve["random_max"], color="tab:gray", alpha=0.15, linewidth=0, label="random order: min-max"
        )
        ax.fill_between(
            x,
            curve["random_mean"] - curve["random_std"],
            curve["random_mean"] + curve["random_std"],
            color="tab:gray",
            alpha=0.3,
            linewidth=0,
            label="random order: mean +/- 1 sd",
        )
        ax.plot(x, curve["random_mean"], color="tab:gray", marker=".", label="random order: mean")
    exact = metric == "embedding"
    ax.plot(
        x, curve["value"], color="tab:blue", marker="o", label="exact importance order" if exact else "importance order (Michel et al.)"
    )
    sign = -1 if metric == "logit-diff" else 1
    if exact:  # the unablated embedding change is 0: the threshold is absolute
        threshold = baseline + max_increase
        ax.axhline(threshold, color="tab:red", linestyle="--", linewidth=1, label=f"baseline + {max_increase:g}")
    else:
        threshold = baseline + sign * max_increase * abs(baseline)
        ax.axhline(threshold, color="tab:red", linestyle="--", linewidth=1, label=f"baseline {'+' if sign > 0 else '-'}{max_increase:.0%}")
    ax.axvline(removable * 100, color="tab:green", linestyle=":", linewidth=1.2, label=f"removable: {removable:.0%} of heads")
    nearest = int((curve["fraction_removed"] - removable).abs().argmin())  # the row idxmin names: first minimum, NaN skipped
    kv = curve["kv_bytes_saved_per_1k_tokens"].iloc[nearest]
    ax.set_xlabel("heads removed (%)")
    ax.set_ylabel(_label(metric))
    ax.set_title(
        titled(
            title
            or f"Head pruning: {_label(metric)} vs heads removed (KV cache saved at removable point: {kv / 1024:.0f} KiB per 1k tokens)",
            note,
        ),
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    return fig
