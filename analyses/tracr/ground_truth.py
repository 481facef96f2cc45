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

import numpy as np
import torch

from headlens.analyses.tracr.compile import Compiled

__all__ = ["ground_truth", "true_edges", "sender_writes", "mark_input_dependence", "varying_edges"]

#: A sender's write into a direction "varies" when it differs by more than this between two inputs.
VARY_TOL = 1e-3


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


def sender_writes(folder: str, inputs: list[list[str]]) -> dict[str, np.ndarray]:
    """What each sender writes into the residual on each input (same length): ``{node: [input, pos, d_model]}``.

    Read from the checkpoint with plain PyTorch hooks on the GPT-2 modules (the head outputs from the
    input of ``c_proj`` split by head, the MLPs' outputs, the embeddings' sum)."""
    from transformers import AutoTokenizer, GPT2LMHeadModel

    model: Any = GPT2LMHeadModel.from_pretrained(folder).eval()  # HF submodules typed loosely
    tok = AutoTokenizer.from_pretrained(folder)
    cfg = model.config
    hd = cfg.n_embd // cfg.n_head
    ids = torch.tensor([[tok.bos_token_id, *tok.convert_tokens_to_ids(x)] for x in inputs])
    got: dict[str, Any] = {}
    handles = []
    blocks: list[Any] = list(model.transformer.h)
    for layer, block in enumerate(blocks):
        w_o = block.attn.c_proj.weight.detach()  # [H*hd, d]

        def pre(_mod: Any, args: Any, layer: int = layer, w_o: Any = w_o) -> None:
            z = args[0].detach()
            for h in range(cfg.n_head):
                got[f"{layer}.{h}"] = z[..., h * hd : (h + 1) * hd] @ w_o[h * hd : (h + 1) * hd]

        def post(_mod: Any, _args: Any, out: Any, layer: int = layer) -> None:
            got[f"mlp{layer}"] = out.detach()

        handles += [block.attn.c_proj.register_forward_pre_hook(pre), block.mlp.register_forward_hook(post)]
    try:
        with torch.no_grad():
            hidden = model(ids, output_hidden_states=True).hidden_states
    finally:
        for h in handles:
            h.remove()
    got["embed"] = hidden[0]
    return {k: v.numpy() for k, v in got.items()}


def mark_input_dependence(truth: dict[str, Any], writes: dict[str, np.ndarray], residual: list[str], *, tol: float = VARY_TOL) -> None:
    """Add ``varies`` to each edge: whether the sender's write into a shared direction changes between inputs
    at some position (an edge whose signal is the same on every input -- BOS, ``one``, the position
    directions -- carries nothing any clean/corrupt patch can see).  ``edges_varying`` counts them."""
    index = {lab: i for i, lab in enumerate(residual)}
    for e in truth["edges"]:
        w = writes[e["sender"]][:, :, [index[d] for d in e["via"]]]
        e["varies"] = bool((w.max(axis=0) - w.min(axis=0)).max() > tol)
    truth["edges_varying"] = sum(e["varies"] for e in truth["edges"])


def varying_edges(truth: dict[str, Any]) -> set[tuple[str, str, str]]:
    """The true edges whose signal changes between inputs of the program's full length."""
    return {(e["sender"], e["receiver"], e["input"]) for e in truth["edges"] if e.get("varies")}
