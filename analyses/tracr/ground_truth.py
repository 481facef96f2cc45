"""Each head's and MLP's job and the true edges of a compiled tracr model, in the node naming of the edge graph.

A sender writes residual directions, a receiver input reads some: the edge ``sender -> receiver (input)`` is
true when the two sets share a direction and the sender comes before the receiver (a head of layer ``l``
before layer ``l``'s MLP and everything after; an MLP before the next layers).  tracr gives every SOp its own
directions, so the sets are read off the craft blocks exactly (a weight row or column counts when it is
nonzero).  Node names are those of :mod:`headlens.analyses.circuits.graph`: ``embed``, ``L.H``, ``mlpL``,
``logits``; inputs ``q``, ``k``, ``v``, ``mlp``, ``logits``.

Every compiled edge is kept and labelled (:func:`mark_input_dependence`) ``input-dependent`` or
``constant``.  An edge is constant when no input of the program's input space (every sequence of the full
length) changes what flows along it into what the receiver computes, for one of two reasons read off the
program: the sender's write on the shared directions is the same on every input (BOS, ``one``, position
directions, and values computed from them only, such as the length of a full-length input), or the
receiver's RASP expression ignores that input (a selector whose predicate is ``TRUE``/``FALSE`` selects the
same keys whatever its queries and keys hold, so its ``q``/``k`` edges carry nothing although tracr wires
them with nonzero weights).  No clean/corrupt patch from the input space can see a constant edge, so
discovery under corrupted-input (resample) patching is scored against the input-dependent edges.

The ground truth describes the checkpoint headlens runs, so it also holds the edges the conversion's readout adds and
needs for the output (``origin: "readout"``, :func:`headlens.analyses.tracr.convert.readout_edges`: a numerical
program's ``embed -> logits``, which carries the ``-v**2/2`` of each value word; every other edge is
``origin: "compiled"``).

ACDC's tracr AUCs (Conmy et al. 2023) are not against the compiled edges: its reference circuit for each of its two
tracr tasks is the output of an ACDC run under zero ablation at a tiny threshold (:data:`ACDC_REFERENCE`).
:func:`mark_acdc_reference` marks the compiled edges in it (``acdc_reference``), and the readout edges: ACDC's model
reads its output number through a bare projection (``W_U = eye(d_model, d_vocab_out)``), so its run never meets the
readout edge, which the same run on this model would keep (zeroed alone it changes the output).  So the score against
ACDC's own definition is printed beside the one against every true edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from headlens.analyses.tracr.compile import Compiled
from headlens.analyses.tracr.convert import readout_edges

__all__ = [
    "ACDC_REFERENCE",
    "GROUND_TRUTH_FORMAT",
    "ground_truth",
    "true_edges",
    "sender_writes",
    "mark_input_dependence",
    "mark_acdc_reference",
    "varying_edges",
]

#: A sender's write into a direction "varies" when it differs by more than this between two inputs.
VARY_TOL = 1e-3

#: Written into ``ground_truth.json`` (``format``); a cached folder holding another one is rebuilt
#: (:func:`~headlens.analyses.tracr.build.build_if_stale`).  2: edges carry ``acdc_reference`` where ACDC has a reference;
#: 3: edges carry ``origin`` (``compiled`` or ``readout``) and the readout's edges are true edges.
GROUND_TRUTH_FORMAT = 3

Edge = tuple[str, str, str]

#: Where :data:`ACDC_REFERENCE` was read (the reference lists and the ROC code beside them).
ACDC_SOURCE = (
    "ArthurConmy/Automatic-Circuit-Discovery bc99ace8, acdc/tracr_task/utils.py get_tracr_reverse_edges, "
    "get_tracr_proportion_edges: 'generated from ACDC run with threshold epsilon, metric l2 and zero ablation'"
)

#: ACDC's reference circuits for its tracr tasks (``reverse``; ``proportion`` = ``make_frac_prevs(tokens == "x")``,
#: the same layers as here), in this graph's names: its ``hook_embed`` and ``hook_pos_embed`` are both ``embed``
#: here, and its placeholder edges (inside a head or an MLP, left out of its ROC) are not edges.  reverse's leaves
#: out three compiled edges: the length head's q and k (a TRUE selector) and ``embed -> 3.0 q`` (the `one` direction
#: that lets a query with no matching key fall back to BOS; in reverse every query has a match).
ACDC_REFERENCE: dict[str, frozenset[Edge]] = {
    "reverse": frozenset({
        ("embed", "0.0", "v"), ("embed", "mlp0", "mlp"), ("0.0", "mlp0", "mlp"), ("embed", "mlp1", "mlp"),
        ("mlp0", "mlp1", "mlp"), ("mlp1", "mlp2", "mlp"), ("mlp2", "3.0", "q"), ("embed", "3.0", "k"),
        ("embed", "3.0", "v"), ("3.0", "logits", "logits"),
    }),
    "frac_prevs": frozenset({
        ("embed", "mlp0", "mlp"), ("embed", "1.0", "q"), ("embed", "1.0", "k"), ("mlp0", "1.0", "v"), ("1.0", "logits", "logits"),
    }),
}  # fmt: skip


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
    ignored: dict[tuple[str, str], str] = {}
    components: list[dict[str, Any]] = [
        {"node": "embed", "kind": "embed", "job": "token and position one-hot directions", "writes": embed_writes}
    ]
    for b in c.blocks:
        name = f"{b.layer}.{b.head}" if b.kind == "head" else f"mlp{b.layer}"
        senders.append((name, b.kind, b.layer, set(b.writes)))
        for inp, dirs in b.reads.items():
            receivers.append((name, b.kind, inp, b.layer, set(dirs)))
        ignored.update({(name, inp): why for inp, why in b.ignores.items()})
        components.append({"node": name, "kind": b.kind, "layer": b.layer, "head": b.head, "job": b.job, "rasp": list(b.labels),
                           "reads": {k: list(v) for k, v in b.reads.items()}, "writes": list(b.writes),
                           "ignores": dict(b.ignores)})  # fmt: skip
    out_dirs = {c.residual[i] for i in c.output_dims}
    receivers.append(("logits", "logits", "logits", c.n_layers, out_dirs))
    edges = []
    for r_name, r_kind, inp, r_layer, reads in receivers:
        r_at = _order(r_kind, r_layer)
        for s_name, s_kind, s_layer, writes in senders:
            if _order(s_kind, s_layer) < r_at and writes & reads:
                edge = {"sender": s_name, "receiver": r_name, "input": inp, "via": sorted(writes & reads), "origin": "compiled"}
                if (r_name, inp) in ignored:
                    edge["receiver_ignores"] = ignored[(r_name, inp)]
                edges.append(edge)
    readout = readout_edges(c)
    edges += readout
    used = {b_name for b_name in (f"{b.layer}.{b.head}" if b.kind == "head" else f"mlp{b.layer}" for b in c.blocks)}
    truth = {
        "format": GROUND_TRUTH_FORMAT,
        "program": c.spec.describe(),
        "n_layers": c.n_layers,
        "n_heads": c.n_heads,
        "components": components,
        "unused_heads": [f"{layer}.{h}" for layer in range(c.n_layers) for h in range(c.n_heads) if f"{layer}.{h}" not in used],
        "unused_mlps": [f"mlp{layer}" for layer in range(c.n_layers) if f"mlp{layer}" not in used],
        "edges": edges,
        "rule": "sender -> receiver(input) is true when the sender writes a residual direction the receiver input reads "
        "(nonzero weights of tracr's craft blocks) and the sender runs earlier (origin compiled), or when the conversion's "
        "readout needs it for the output (origin readout)",
        "readout": {"output": "categorical" if c.categorical else "numerical", "n_edges": len(readout),
                    "rule": "an edge the unembedding of this checkpoint adds is true when zeroing it alone changes the "
                    "model's output: the -v**2/2 of a numerical readout, read off `one` (embed -> logits); a categorical "
                    "readout's `one` carries only the -100 of the words that are not outputs and changes no output"},
    }  # fmt: skip
    mark_acdc_reference(truth, c.spec.name)
    return truth


def mark_acdc_reference(truth: dict[str, Any], program: str) -> None:
    """For a program ACDC scores (:data:`ACDC_REFERENCE`): mark each true edge ``acdc_reference`` (in ACDC's reference
    circuit, or a readout edge: module doc) and describe the set in ``truth["acdc_reference"]``; other programs
    unchanged.  Raises ValueError when a reference edge is not a compiled edge (the two graphs would not correspond)."""
    ref = ACDC_REFERENCE.get(program)
    if ref is None:
        return
    compiled = {(e["sender"], e["receiver"], e["input"]) for e in truth["edges"] if e.get("origin", "compiled") == "compiled"}
    if not ref <= compiled:
        raise ValueError(f"ACDC's reference edges {sorted(ref - compiled)} of {program} are not compiled edges of this model")
    readout = 0
    for e in truth["edges"]:
        e["acdc_reference"] = (e["sender"], e["receiver"], e["input"]) in ref or e.get("origin") == "readout"
        readout += e.get("origin") == "readout"
    truth["acdc_reference"] = {
        "n_edges": len(ref) + readout,
        "n_acdc": len(ref),
        "n_readout": readout,
        "source": ACDC_SOURCE,
        "rule": "ACDC's reference edges and this checkpoint's readout edges true, every other edge of the graph false (as "
        "in its ROC); ACDC's model reads its output number through a bare projection (W_U = eye(d_model, d_vocab_out)), "
        "so its run never meets a readout edge, which the same run on this model keeps (zeroed alone, it changes the "
        f"output); compiled edges left out of it: {len(compiled - ref)}",
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
    """Label each edge ``input-dependent`` or ``constant`` (``signal``; ``varies`` the same as a bool; ``why``
    for a constant edge; see the module doc).  ``sender_varies``: whether the sender's write into a shared
    direction differs by more than ``tol`` between two inputs of ``writes`` at some position.
    ``edges_varying`` counts the input-dependent edges."""
    index = {lab: i for i, lab in enumerate(residual)}
    for e in truth["edges"]:
        w = writes[e["sender"]][:, :, [index[d] for d in e["via"]]]
        e["sender_varies"] = bool((w.max(axis=0) - w.min(axis=0)).max() > tol)
        e["varies"] = e["sender_varies"] and "receiver_ignores" not in e
        e["signal"] = "input-dependent" if e["varies"] else "constant"
        if not e["sender_varies"]:
            e["why"] = f"{e['sender']} writes the same on {', '.join(e['via'][:3])}{' ...' if len(e['via']) > 3 else ''} on every input"
        elif not e["varies"]:
            e["why"] = e["receiver_ignores"]
        else:
            e.pop("why", None)
    truth["edges_varying"] = sum(e["varies"] for e in truth["edges"])
    truth["signal_rule"] = (
        "input-dependent: the sender's write on the shared directions differs between two full-length inputs "
        f"(by more than {tol}) and the receiver's RASP expression uses that input (a TRUE/FALSE selector ignores q and k)"
    )


def varying_edges(truth: dict[str, Any]) -> set[tuple[str, str, str]]:
    """The input-dependent true edges (``signal`` of :func:`mark_input_dependence`): those a clean/corrupt patch can see."""
    return {(e["sender"], e["receiver"], e["input"]) for e in truth["edges"] if e.get("varies")}
