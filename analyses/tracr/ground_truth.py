"""Each head's and MLP's job and the true edges of a compiled tracr model, in the node naming of the edge graph.

A sender writes residual directions, a receiver input reads some: the edge ``sender -> receiver (input)`` is
true when the two sets share a direction and the sender comes before the receiver (a head of layer ``l``
before layer ``l``'s MLP and everything after; an MLP before the next layers).  tracr gives every SOp its own
directions, so the sets are read off the craft blocks exactly (a weight row or column counts when it is
nonzero).  Node names are those of :mod:`headlens.analyses.circuits.graph`: ``embed``, ``L.H``, ``mlpL``,
``logits``; inputs ``q``, ``k``, ``v``, ``mlp``, ``logits``.
"""

from __future__ import annotations

from typing import Any

from headlens.analyses.tracr.compile import Compiled

__all__ = ["ground_truth", "true_edges"]


def _order(kind: str, layer: int) -> float:
    """Position in the forward pass: embed -1, heads of layer l at l, MLP of layer l at l + 0.5, logits last."""
    return {"embed": -1.0, "head": float(layer), "mlp": layer + 0.5}.get(kind, float("inf"))


def ground_truth(compiled: Compiled) -> dict[str, Any]:
    """The record written as ``ground_truth.json``: components with jobs, reads/writes, and the true edges."""
    c = compiled
    embed_writes = sorted(
        {c.residual[i] for i in range(len(c.residual)) if abs(c.token_embed[:, i]).max() > 0 or abs(c.pos_embed[:, i]).max() > 0}
    )
    senders: list[tuple[str, str, int, set[str]]] = [("embed", "embed", -1, set(embed_writes))]
    receivers: list[tuple[str, str, str, int, set[str]]] = []
    components: list[dict[str, Any]] = [
        {"node": "embed", "kind": "embed", "job": "token and position one-hot directions", "writes": embed_writes}
    ]
    for b in c.blocks:
        name = f"{b.layer}.{b.head}" if b.kind == "head" else f"mlp{b.layer}"
        senders.append((name, b.kind, b.layer, set(b.writes)))
        for inp, dirs in b.reads.items():
            receivers.append((name, b.kind, inp, b.layer, set(dirs)))
        components.append({"node": name, "kind": b.kind, "layer": b.layer, "head": b.head, "job": b.job, "rasp": list(b.labels),
                           "reads": {k: list(v) for k, v in b.reads.items()}, "writes": list(b.writes)})  # fmt: skip
    out_dirs = {c.residual[i] for i in c.output_dims}
    receivers.append(("logits", "logits", "logits", c.n_layers, out_dirs))
    edges = []
    for r_name, r_kind, inp, r_layer, reads in receivers:
        r_at = _order(r_kind, r_layer)
        for s_name, s_kind, s_layer, writes in senders:
            if _order(s_kind, s_layer) < r_at and writes & reads:
                edges.append({"sender": s_name, "receiver": r_name, "input": inp, "via": sorted(writes & reads)})
    used = {b_name for b_name in (f"{b.layer}.{b.head}" if b.kind == "head" else f"mlp{b.layer}" for b in c.blocks)}
    return {
        "program": c.spec.describe(),
        "n_layers": c.n_layers,
        "n_heads": c.n_heads,
        "components": components,
        "unused_heads": [f"{layer}.{h}" for layer in range(c.n_layers) for h in range(c.n_heads) if f"{layer}.{h}" not in used],
        "unused_mlps": [f"mlp{layer}" for layer in range(c.n_layers) if f"mlp{layer}" not in used],
        "edges": edges,
        "rule": "sender -> receiver(input) is true when the sender writes a residual direction the receiver input reads "
        "(nonzero weights of tracr's craft blocks) and the sender runs earlier",
    }


def true_edges(truth: dict[str, Any]) -> set[tuple[str, str, str]]:
    """``(sender, receiver, input)`` of every true edge of a ``ground_truth.json`` record."""
    return {(e["sender"], e["receiver"], e["input"]) for e in truth["edges"]}
