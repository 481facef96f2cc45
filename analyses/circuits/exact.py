"""Exact edge patching: one edge's sender contribution to one reader input replaced, everything else as the base run.

For an edge ``s -> r`` the base run (``direction="noising"``: clean; ``"denoising"``: corrupt)
is repeated with only ``r``'s input changed, by ``out_s(other) - out_s(base)``; every other
reader, and every other slot of ``r``'s hook point, reads the base run's stream.  This is path
patching (:mod:`headlens.analyses.patching.path`) generalised to every node type: head ->
head q/k/v (under GQA the key-value group's slot), any writer -> MLP input, any writer ->
logits.  The metric change ``patched - base`` of each pair is what the estimates estimate.

Batching: a patch at a reader of layer ``l`` leaves blocks ``0..l-1`` as in the base run, so
the forward starts at block ``l`` from the base run's stored stream (logits edges at the last
block, from its output hook), with one copy of the batch per edge, at most ``max_rows`` rows
(copies x pairs) per forward: an edge at layer ``l`` costs ``(L - l) / L`` of a forward.
Models on which a late start does not reproduce the full forward run every block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.ablation.metrics import model_values
from headlens.analyses.ablation.suffix import resid_hook_name, run_from_layer
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags, reader_hook, sender_capture
from headlens.analyses.circuits.scores import PerPair, check_direction
from headlens.analyses.circuits.writes import head_sum_norms, sender_deltas
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.analyses.patching.runs import can_start_late
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["exact_scores"]


def _add_hook(patches: list[tuple[int, int, int]], delta: Tensor, k: int) -> HookFn:
    """Reader hook: copy ``c`` of the batch gets ``delta[:, s]`` added to slot ``slot`` (-1: no slot dim)."""

    def fn(x: Tensor, hook: Any = None) -> Tensor:
        x = x.clone()
        xv = x.view(k, x.shape[0] // k, *x.shape[1:])
        for c, slot, s in patches:
            d = delta[:, s, : x.shape[1]].to(device=x.device, dtype=x.dtype)
            if slot < 0:
                xv[c] += d
            else:
                xv[c, :, :, slot] += d
        return x

    return fn


def _capture(model: LoadedModel, graph: EdgeGraph, tokens: Tensor, data: Any, rows: Sequence[int], resid_layers: Sequence[int]) -> tuple:
    store: dict[str, Tensor] = {}
    resid: dict[int, Tensor] = {}

    def keep(layer: int) -> HookFn:
        def fn(x: Tensor, hook: Any = None) -> None:
            resid[layer] = x.detach().clone()

        return fn

    hooks = sender_capture(model, graph, store) + [(resid_hook_name(layer), keep(layer)) for layer in resid_layers]
    with torch.inference_mode(), attached(model.bridge, hooks):
        vals = model_values(model, tokens, data.lengths[list(rows)], data, rows)
    return store["out"].clone(), vals.detach().double().cpu(), resid


def exact_scores(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    edge_ids: Sequence[int] | np.ndarray | None = None,
    *,
    direction: str = "noising",
    batch_size: int = 8,
    max_rows: int = 256,
    progress: Callable[[str, int, int], None] | None = None,
) -> PerPair:
    """Each pair's metric change under each edge's exact patch (see the module doc); ``edge_ids`` default: every edge."""
    check_direction(direction)
    n_edges = len(graph.edges)
    ids = np.arange(n_edges) if edge_ids is None else np.asarray(edge_ids, dtype=np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= n_edges):
        raise InputError(f"edge ids must lie in 0..{n_edges - 1}", edge_ids=list(ids[:3]))
    if max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}", max_rows=max_rows)
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    base_set, other_set = (clean_set, corrupt_set) if direction == "noising" else (corrupt_set, clean_set)
    n_l = model.n_layers
    e = graph.edges
    r_layer = e["receiver_layer"].to_numpy()[ids]
    start = np.minimum(r_layer, n_l - 1)
    late = can_start_late(model, base_set)
    if not late:
        log.info("exact edge patching: a late start does not reproduce this model's forward; every block runs")
        start = np.zeros_like(start)
    which = e["input"].to_numpy()[ids]
    slot = e["receiver_slot"].to_numpy()[ids]
    sender_idx = _sender_index(graph)[ids]
    n = len(task)
    values = np.full((n, len(ids)), np.nan)
    clean_vals, corrupt_vals = np.zeros(n), np.zeros(n)
    rows_run = 0.0
    batches = base_set.rows(batch_size)
    norms = head_sum_norms(model)
    with edge_flags(model):
        check_edge_model(model, graph)
        for bi, rows in enumerate(batches):
            tok_b, lengths, _width = base_set.batch(rows)
            tok_o, _, _ = other_set.batch(rows)
            needed = sorted({int(s) for s in start if s > 0})
            out_b, v_b, resid = _capture(model, graph, tok_b, base_set, rows, needed)
            out_o, v_o, _ = _capture(model, graph, tok_o, other_set, rows, [])
            (clean_vals if direction == "noising" else corrupt_vals)[rows] = v_b.numpy()
            (corrupt_vals if direction == "noising" else clean_vals)[rows] = v_o.numpy()
            delta = sender_deltas(graph, norms, out_b, out_o)
            del out_b, out_o
            per_forward = max(1, max_rows // len(rows))
            with torch.inference_mode():
                for layer in sorted(set(start.tolist())):
                    cols = np.flatnonzero(start == layer)
                    for c0 in range(0, len(cols), per_forward):
                        chunk = cols[c0 : c0 + per_forward]
                        k = len(chunk)
                        by_hook: dict[str, list[tuple[int, int, int]]] = {}
                        for c, j in enumerate(chunk):
                            by_hook.setdefault(reader_hook(int(r_layer[j]), str(which[j]), n_l), []).append(
                                (c, int(slot[j]), int(sender_idx[j]))
                            )
                        hooks = [(name, _add_hook(p, delta, k)) for name, p in by_hook.items()]
                        if layer > 0:
                            r0 = resid[layer].repeat(k, 1, 1)

                            def run(t: Tensor, _r: Tensor = r0, _h: list = hooks, _l: int = int(layer), **kw: Any) -> Any:
                                return run_from_layer(model, t, _r, _l, _h, **kw)

                            vals = model_values(model, tok_b, lengths, base_set, rows, copies=k, run=run)
                        else:
                            with attached(model.bridge, hooks):
                                vals = model_values(model, tok_b, lengths, base_set, rows, copies=k)
                        vals = vals.detach().double().cpu().view(k, len(rows))
                        values[np.ix_(np.asarray(rows), chunk)] = (vals - v_b[None, :]).T.numpy()
                        rows_run += k * len(rows) * (n_l - layer) / n_l
            if progress is not None:
                progress("exact", bi + 1, len(batches))
    return PerPair(
        values=values,
        clean=clean_vals,
        corrupt=corrupt_vals,
        metric=base_set.metric,
        method="exact",
        direction=direction,
        edge_ids=ids,
        forwards=2.0 + rows_run / max(1, n),
        info={"started_late": late},
    )


def _sender_index(graph: EdgeGraph) -> np.ndarray:
    """Each edge's sender as an index into the sender order."""
    order = {node.name: i for i, node in enumerate(graph.senders())}
    return np.array([order[s] for s in graph.edges["sender"]], dtype=np.int64)
