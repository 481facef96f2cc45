"""The circuit diagram: layers as rows, heads as nodes, the circuit's edges drawn with width by score.

Rows from the bottom: the embeddings, then per layer its heads (left to right) and its MLP (right
of the heads, half a row up: it reads after the layer's attention), the logits at the top.  Every
head of the model is a faint dot, so the layout reads at GPT-2-small size (12 x 12); only the
nodes the circuit touches are labelled and only the circuit's edges are drawn.  An edge's width
grows with ``|score|`` (``|score_raw|``, the metric change, when every score is NaN: the title
says so); its colour says which input of the receiver it feeds (q, k, v, mlp, logits); a
negative score is dashed.  Under GQA a k or v edge enters the key-value head its query heads
share (the graph names that receiver by the group's heads joined with ``+``, ``"1.0+1.1"``): it
is one node, drawn once, centred under its query heads (a bracket spans them) and labelled
``"1.0-1 kv"`` (layer 1, query heads 0 to 1: :func:`node_label`).

The composition figure is a sender x receiver heatmap of one mode's scores over the baseline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from headlens.reports.render.figures.common import _pyplot

__all__ = ["circuit_figure", "composition_figure", "node_label", "INPUT_COLOURS", "KV_DY", "MAX_DRAWN"]

#: Colour of an edge by the receiver input it feeds.
INPUT_COLOURS = {"q": "#1f77b4", "k": "#d62728", "v": "#2ca02c", "mlp": "#9467bd", "logits": "#ff7f0e"}
#: Where an edge meets a head: q from the left, k in the middle, v from the right (fraction of a column).
_INPUT_DX = {"q": -0.2, "k": 0.0, "v": 0.2}
#: At most this many edges are drawn (the strongest by |score|); the title says when more were left out.
MAX_DRAWN = 120


#: A GQA key-value node sits this far below its query heads' row (rows are 2 apart).
KV_DY = 0.45


def _group(name: str) -> tuple[int, list[int]]:
    """``(layer, heads)`` of a head ``"1.0"`` or a GQA key-value receiver ``"1.0+1.1"``."""
    parts = [tuple(int(x) for x in part.split(".")) for part in name.split("+")]
    return parts[0][0], [h for _, h in parts]


def node_label(name: str) -> str:
    """A node's label: its graph name, but a GQA key-value receiver ``"16.0+16.1+16.2"`` is ``"16.0-2 kv"``."""
    if "+" not in name:
        return name
    layer, heads = _group(name)
    return f"{layer}.{heads[0]}-{heads[-1]} kv"


def _node_xy(name: str, n_layers: int, n_heads: int) -> tuple[float, float]:
    """Where a node sits; a GQA key-value receiver between its query heads, :data:`KV_DY` below them."""
    if name == "embed":
        return ((n_heads - 1) / 2, 0.0)
    if name == "logits":
        return ((n_heads - 1) / 2, 2.0 * n_layers + 1)
    if name.startswith("mlp"):
        return (n_heads + 0.6, 2.0 * int(name[3:]) + 2)
    layer, heads = _group(name)
    if len(heads) == 1:
        return (float(heads[0]), 2.0 * layer + 1)
    return (float(np.mean(heads)), 2.0 * layer + 1 - KV_DY)


def circuit_figure(edges: pd.DataFrame, *, n_layers: int, n_heads: int, title: str = "") -> Any:
    """The circuit (rows of ``edges`` with ``in_circuit``; every row when there is no such column)."""
    circuit = edges[edges["in_circuit"].astype(bool)] if "in_circuit" in edges else edges
    col = "score_raw" if "score_raw" in circuit and len(circuit) and circuit["score"].isna().all() else "score"
    circuit = circuit.reindex(circuit[col].abs().sort_values(ascending=False).index)
    left_out = max(0, len(circuit) - MAX_DRAWN)
    circuit = circuit.head(MAX_DRAWN)
    plt = _pyplot()
    width = min(16.0, max(5.0, 0.7 * n_heads + 3))
    height = min(14.0, max(3.5, 0.6 * (2 * n_layers + 2) + 1))
    fig, ax = plt.subplots(figsize=(width, height))
    for layer in range(n_layers):  # context: every head and MLP, faint
        ax.scatter(range(n_heads), [2 * layer + 1] * n_heads, s=18, color="#cccccc", zorder=1)
        ax.scatter([n_heads + 0.6], [2 * layer + 2], s=18, marker="s", color="#cccccc", zorder=1)
    peak = float(circuit[col].abs().max()) if len(circuit) else 1.0
    peak = peak if np.isfinite(peak) and peak > 0 else 1.0
    touched: set[str] = set()
    for row in circuit.to_dict("records"):
        sender, receiver, which, score = str(row["sender"]), str(row["receiver"]), str(row["input"]), float(row[col])
        touched.update([sender, receiver])
        (x0, y0), (x1, y1) = _node_xy(sender, n_layers, n_heads), _node_xy(receiver, n_layers, n_heads)
        dx = _INPUT_DX.get(which, 0.0)
        ax.annotate(
            "",
            xy=(x1 + dx, y1 - (0.12 if which in _INPUT_DX else 0.0)),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "color": INPUT_COLOURS.get(which, "#555555"),
                "lw": 0.6 + 5.0 * abs(score) / peak,
                "alpha": 0.8,
                "linestyle": "--" if score < 0 else "-",
                "shrinkA": 6,
                "shrinkB": 6 if which not in _INPUT_DX else 2,
                "connectionstyle": f"arc3,rad={0.15 if x1 >= x0 else -0.15}",
            },
            zorder=2,
        )
    for name in sorted(touched):
        x, y = _node_xy(name, n_layers, n_heads)
        marker = "s" if name.startswith("mlp") else ("D" if name in ("embed", "logits") else ("h" if "+" in name else "o"))
        ax.scatter([x], [y], s=110, marker=marker, color="#222222", zorder=3)
        if "+" in name:  # a key-value head: a bracket under the query heads that share it
            _, heads = _group(name)
            ax.plot([heads[0], heads[-1]], [y + KV_DY / 2] * 2, color="#888888", lw=1.0, zorder=1)
        ax.annotate(node_label(name), (x, y), xytext=(6, -11) if "+" in name else (5, 5), textcoords="offset points", fontsize=8)
    ax.set_yticks([0] + [2 * la + 1 for la in range(n_layers)] + [2 * n_layers + 1])
    ax.set_yticklabels(["embed"] + [f"layer {la}" for la in range(n_layers)] + ["logits"])
    ax.set_xticks([*range(n_heads), n_heads + 0.6])
    ax.set_xticklabels([str(h) for h in range(n_heads)] + ["mlp"])
    ax.set_xlabel("head")
    ax.set_xlim(-1, n_heads + 1.6)
    ax.set_ylim(-0.8, 2 * n_layers + 1.8)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    handles = [Line2D([0], [0], color=c, lw=2, label=f"-> {k}") for k, c in INPUT_COLOURS.items() if k in set(circuit["input"].astype(str))]
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    more = f" ({left_out} weaker edges not drawn)" if left_out else ""
    if col == "score_raw":
        more += "\nwidth by |metric change|: every score is NaN (no clean-corrupt gap)"
    ax.set_title((title or f"circuit: {len(circuit) + left_out} edges, width by |score|, dashed < 0") + more, fontsize=10)
    return fig


def composition_figure(scores: pd.DataFrame, mode: str) -> Any:
    """Senders x receivers: one mode's composition score over its baseline mean (1 = random)."""
    import seaborn as sns  # deferred: seaborn (with scipy.stats) is about 1 s of `import headlens`

    rows = scores[scores["input"] == mode]
    wide = rows.pivot(index="sender", columns="receiver", values="ratio")

    def key(s: str) -> tuple[int, ...]:
        return tuple(int(x) for x in s.split("."))

    wide = wide.loc[sorted(wide.index, key=key), sorted(wide.columns, key=key)]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(min(18.0, max(4.5, 0.25 * wide.shape[1] + 2.5)), min(16.0, max(3.5, 0.25 * wide.shape[0] + 1.5))))
    top = float(np.nanmax(wide.to_numpy())) if wide.size else 1.0
    sns.heatmap(
        wide,
        ax=ax,
        cmap="RdBu_r",
        center=1.0,
        vmin=0.0,
        vmax=max(2.0, top),
        annot=wide.size <= 64,
        fmt=".1f",
        annot_kws={"size": 7},
        cbar_kws={"label": "score / random baseline"},
    )
    ax.set_title(f"{mode.upper()}-composition (weights): score over its random baseline")
    ax.set_xlabel("receiver (later head)")
    ax.set_ylabel("sender (earlier head)")
    return fig
