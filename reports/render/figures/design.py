"""Figures of the design questions: loss against KV-cache size (GQA what-if), projection knockout losses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.reports.render.figures.common import _pyplot, save_figure, titled

__all__ = ["loss_vs_cache", "loss_vs_cache_figure", "knockout_heatmap", "knockout_heatmap_figure"]

_STYLE = {"adjacent": ("o-", "tab:blue"), "similar": ("s--", "tab:orange")}


def loss_vs_cache(
    summary: pd.DataFrame,
    stem: str | Path,
    *,
    title: str = "",
    metric: str = "loss",
    note: str | None = None,
    formats: Sequence[str] = ("png", "svg"),
) -> list[Path]:
    """:func:`loss_vs_cache_figure` saved as ``stem.png`` and ``stem.svg``; returns their paths."""
    return save_figure(loss_vs_cache_figure(summary, title=title, metric=metric, note=note), stem, formats)


def loss_vs_cache_figure(summary: pd.DataFrame, *, title: str = "", metric: str = "loss", note: str | None = None) -> Any:
    """Loss of each pooled variant against its KV-cache bytes per token, one line per grouping, the
    original marked; each variant's 95% interval of the loss change as an error bar.  ``note``: a
    second title line (the smoke-test mark)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    orig = summary[summary["grouping"] == "original"]
    labelled: set[tuple[float, float]] = set()
    for grouping, g in summary[summary["grouping"] != "original"].groupby("grouping", sort=False):
        pts = pd.concat([orig, g]).sort_values("kv_bytes_per_token")
        style, color = _STYLE.get(str(grouping), ("^-", None))
        ax.plot(pts["kv_bytes_per_token"], pts[metric], style, color=color, label=f"{grouping} grouping")
        if metric == "loss" and {"change_ci_low", "change_ci_high"} <= set(g.columns):  # the interval, so no dip reads as more than it is
            below = (g["loss_change"] - g["change_ci_low"]).clip(lower=0)
            above = (g["change_ci_high"] - g["loss_change"]).clip(lower=0)
            ax.errorbar(
                g["kv_bytes_per_token"], g[metric], yerr=[below, above], fmt="none", ecolor=color, elinewidth=1, capsize=3, alpha=0.7
            )
        for r in g.itertuples(index=False):
            if (r.kv_bytes_per_token, round(getattr(r, metric), 9)) in labelled:
                continue  # both groupings agree here (same groups): one label
            labelled.add((r.kv_bytes_per_token, round(getattr(r, metric), 9)))
            ax.annotate(f"g={r.g}", (r.kv_bytes_per_token, getattr(r, metric)), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if len(orig):
        ax.plot(orig["kv_bytes_per_token"], orig[metric], "k*", markersize=11, label="original")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("KV cache per token (bytes)")
    ax.set_ylabel(metric)
    ax.set_title(titled(title or f"GQA what-if: {metric} vs KV cache", note), fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def knockout_heatmap(losses: pd.DataFrame, stem: str | Path, *, title: str = "", formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """:func:`knockout_heatmap_figure` saved as ``stem.png`` and ``stem.svg``; returns their paths."""
    return save_figure(knockout_heatmap_figure(losses, title=title), stem, formats)


def knockout_heatmap_figure(losses: pd.DataFrame, *, title: str = "") -> Any:
    """Loss change of each whole-layer knockout: layers as rows, kinds as columns, annotated."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    whole = losses[(losses["head"] == -1) & (losses["kind"] != "none")]
    table = whole.pivot(index="layer", columns="kind", values="loss_change")
    table = table[[k for k in ("q=k", "v=k", "q=k=v") if k in table.columns]]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * table.shape[1], 0.9 + 0.45 * table.shape[0]))
    sns.heatmap(table, annot=True, fmt=".3f", cmap="rocket_r", ax=ax, cbar_kws={"label": "loss change (nats)"})
    ax.set_xlabel("knockout (whole layer)")
    ax.set_ylabel("layer")
    ax.set_title(title or "projection knockout: loss change", fontsize=10)
    return fig
