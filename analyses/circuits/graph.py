"""The edge graph of a model: which writer of the residual stream feeds which reader.

Nodes are the writers and readers of the residual stream:

* ``embed``: the stream entering block 0 (token embeddings plus position embeddings where the
  model adds them; the value of ``blocks.0.hook_resid_pre``);
* each attention head ``"L.h"``: its ``hook_z`` slot through its rows of ``W_O`` (the output
  bias belongs to no head and cancels in every clean-minus-corrupt difference);
* each MLP ``"mlpL"``: ``blocks.L.hook_mlp_out``;
* ``logits``: the stream leaving the last block (before the final norm).

Edges run from every earlier writer to each reader input: each head's ``q``, ``k`` and ``v``
input (the residual copy that head's projection reads, before the layer norm:
``hook_q_input``/``hook_k_input``/``hook_v_input`` with the bridge's split-input flag on), each
MLP's input (``hook_mlp_in``) and the logits.  Under grouped-query attention ``k`` and ``v``
have one input per key-value head, shared by its group of query heads: the edge goes to that
group's slot (``receiver_slot``; the receiver is named by the group's heads joined with ``+``).
On models that normalise each layer's head sum before adding it (Gemma 2) a head's edge is
defined in :mod:`~headlens.analyses.circuits.writes` (the norm recomputed in the reader's copy).
On models whose attention and MLP read the same layer input (``parallel_attn_mlp``: GPT-NeoX,
GPT-J) a layer's heads do not feed its own MLP.

With ``L`` layers, ``H`` query heads and ``G`` key-value heads, the writers before layer ``l``
number ``S_l = 1 + l (H + 1)`` and the graph has
``sum_l (H + 2G) S_l + sum_l (S_l + H) + S_L`` edges (parallel blocks: ``S_l`` into each MLP);
GPT-2 small (12 x 12) has 32,491.

Row order of :attr:`EdgeGraph.edges` is the order the scorers fill: for each layer, ``q`` (every
slot, every sender), ``k``, ``v``, then the MLP; the logits last.  Senders are numbered
``embed, 0.0 .. 0.(H-1), mlp0, 1.0, ...``, so the senders of a reader at layer ``l`` are the
first ``S_l`` of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = [
    "Node",
    "EdgeGraph",
    "build_graph",
    "expected_edge_count",
    "INPUTS",
    "EDGE_COLUMNS",
    "is_parallel",
    "has_head_sum_norm",
]

#: Reader inputs, in scoring order within a layer.
INPUTS: tuple[str, ...] = ("q", "k", "v", "mlp", "logits")
EDGE_COLUMNS = ["sender", "receiver", "input", "sender_kind", "sender_layer", "sender_head", "receiver_layer", "receiver_slot"]


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "embed" | "head" | "mlp" | "logits"
    layer: int | None = None
    head: int | None = None


def is_parallel(model: LoadedModel) -> bool:
    """True when each block's MLP reads the block's input, as its attention does."""
    return bool(getattr(model.bridge.cfg, "parallel_attn_mlp", False))


def has_head_sum_norm(model: LoadedModel) -> bool:
    """True when a block normalises its heads' sum before adding it (Gemma 2; :mod:`~headlens.analyses.circuits.writes`)."""
    return any("ln1_post" in (getattr(b, "submodules", None) or {}) for b in model.bridge.blocks)


def expected_edge_count(n_layers: int, n_heads: int, n_kv_heads: int | None = None, parallel: bool = False) -> int:
    """The edge count of the module doc's formula."""
    g = n_heads if n_kv_heads is None else n_kv_heads
    total = 0
    for layer in range(n_layers):
        s = 1 + layer * (n_heads + 1)
        total += (n_heads + 2 * g) * s + s + (0 if parallel else n_heads)
    return total + 1 + n_layers * (n_heads + 1)


@dataclass
class EdgeGraph:
    nodes: list[Node]
    edges: pd.DataFrame  # EDGE_COLUMNS; row index = edge id
    info: dict[str, Any] = field(default_factory=dict)
    #: (layer, input) -> (first edge id, n_slots, n_senders): the block of rows a reader group fills
    blocks: dict[tuple[int, str], tuple[int, int, int]] = field(default_factory=dict)

    def size(self) -> dict[str, Any]:
        counts = self.edges["input"].value_counts()
        by_input = {k: int(counts.get(k, 0)) for k in INPUTS}
        norm = bool(self.info.get("head_sum_norm"))
        return {"n_nodes": len(self.nodes), "n_edges": len(self.edges), "by_input": by_input, "head_sum_norm": norm}

    def keys(self) -> list[tuple[str, str, str]]:
        """``(sender, receiver, input)`` of every edge, in row order."""
        return list(zip(self.edges["sender"], self.edges["receiver"], self.edges["input"], strict=True))

    def senders(self) -> list[Node]:
        """The writers, in sender order (see the module doc)."""
        return [n for n in self.nodes if n.kind != "logits"]

    def index(self, edges: list[tuple[str, str, str]]) -> np.ndarray:
        """Edge ids of ``(sender, receiver, input)`` keys; KeyError naming the first unknown one."""
        where = {k: i for i, k in enumerate(self.keys())}
        keys = [(str(e[0]), str(e[1]), str(e[2])) for e in edges]
        missing = [k for k in keys if k not in where]
        if missing:
            raise KeyError(f"edge {missing[0]} is not in the graph")
        return np.array([where[k] for k in keys], dtype=np.int64)


def _receiver_names(layer: int, n_heads: int, n_kv: int, which: str) -> list[str]:
    if which == "q" or n_kv == n_heads:
        return [f"{layer}.{h}" for h in range(n_heads)]
    group = n_heads // n_kv
    return ["+".join(f"{layer}.{h}" for h in range(g * group, (g + 1) * group)) for g in range(n_kv)]


def build_graph(model: LoadedModel) -> EdgeGraph:
    """The edge graph of ``model`` (see the module doc)."""
    n_l, n_h, n_kv, parallel = model.n_layers, model.n_heads, model.n_kv_heads, is_parallel(model)
    senders: list[Node] = [Node("embed", "embed")]
    for layer in range(n_l):
        senders += [Node(f"{layer}.{h}", "head", layer, h) for h in range(n_h)]
        senders.append(Node(f"mlp{layer}", "mlp", layer))
    nodes = [*senders, Node("logits", "logits", n_l)]
    s_kind = np.array([n.kind for n in senders])
    s_layer = np.array([-1 if n.layer is None else n.layer for n in senders])
    s_head = np.array([-1 if n.head is None else n.head for n in senders])
    s_name = np.array([n.name for n in senders])
    parts: list[dict[str, Any]] = []
    blocks: dict[tuple[int, str], tuple[int, int, int]] = {}
    first = 0

    def add(layer: int, which: str, receivers: list[str], slots: list[int], n_send: int) -> None:
        nonlocal first
        k = len(receivers)
        parts.append(
            {
                "sender": np.tile(s_name[:n_send], k),
                "receiver": np.repeat(np.array(receivers, dtype=object), n_send),
                "input": np.full(k * n_send, which, dtype=object),
                "sender_kind": np.tile(s_kind[:n_send], k),
                "sender_layer": np.tile(s_layer[:n_send], k),
                "sender_head": np.tile(s_head[:n_send], k),
                "receiver_layer": np.full(k * n_send, layer),
                "receiver_slot": np.repeat(np.array(slots), n_send),
            }
        )
        blocks[(layer, which)] = (first, k, n_send)
        first += k * n_send

    for layer in range(n_l):
        s = 1 + layer * (n_h + 1)
        for which in ("q", "k", "v"):
            names = _receiver_names(layer, n_h, n_kv, which)
            add(layer, which, names, list(range(len(names))), s)
        add(layer, "mlp", [f"mlp{layer}"], [-1], s if parallel else s + n_h)
    add(n_l, "logits", ["logits"], [-1], len(senders))
    edges = pd.DataFrame({c: np.concatenate([p[c] for p in parts]) for c in EDGE_COLUMNS})
    for c in ("sender", "receiver", "input", "sender_kind"):
        edges[c] = edges[c].astype(str)
    info = {"n_layers": n_l, "n_heads": n_h, "n_kv_heads": n_kv, "parallel_attn_mlp": parallel, "head_sum_norm": has_head_sum_norm(model)}
    graph = EdgeGraph(nodes=nodes, edges=edges, info=info, blocks=blocks)
    expected = expected_edge_count(n_l, n_h, n_kv, parallel)
    if len(edges) != expected:  # the enumeration and the formula are two statements of one graph
        raise RuntimeError(f"edge graph has {len(edges)} edges, the formula {expected}")
    log.info("edge graph: %d nodes, %d edges", len(nodes), len(edges))
    return graph
