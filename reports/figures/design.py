"""Figures of the design questions: loss against KV-cache size (GQA what-if), projection knockout losses."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from headlens.reports.figures.common import _pyplot, save_figure

__all__ = ["loss_vs_cache", "knockout_heatmap"]

_STYLE = {"adjacent": ("o-", "tab:blue"), "similar": ("s--", "tab:orange")}


def loss_vs_cache(summary: pd.DataFrame, stem: str | Path, *, title: str = "", metric: str = "loss", formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Loss of each pooled variant against its KV-cache bytes per token, one line per grouping, the original marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    orig = summary[summary["grouping"] == "original"]
    labelled: set[tuple[float, float]] = set()
    for grouping, g in summary[summary["grouping"] != "original"].groupby("grouping", sort=False):
        pts = pd.concat([orig, g]).sort_values("kv_bytes_per_token")
        style, color = _STYLE.get(str(grouping), ("^-", None))
        ax.plot(pts["kv_bytes_per_token"], pts[metric], style, color=color, label=f"{grouping} grouping")
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
    ax.set_title(title or f"GQA what-if: {metric} vs KV cache", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, stem, formats)


def knockout_heatmap(losses: pd.DataFrame, stem: str | Path, *, title: str = "", formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Loss change of each whole-layer knockout: layers as rows, kinds as columns, annotated."""
    import seaborn as sns

    whole = losses[(losses["head"] == -1) & (losses["kind"] != "none")]
    table = whole.pivot(index="layer", columns="kind", values="loss_change")
    table = table[[k for k in ("q=k", "v=k", "q=k=v") if k in table.columns]]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * table.shape[1], 0.9 + 0.45 * table.shape[0]))
    sns.heatmap(table, annot=True, fmt=".3f", cmap="rocket_r", ax=ax, cbar_kws={"label": "loss change (nats)"})
    ax.set_xlabel("knockout (whole layer)")
    ax.set_ylabel("layer")
    ax.set_title(title or "projection knockout: loss change", fontsize=10)
    return save_figure(fig, stem, formats)
