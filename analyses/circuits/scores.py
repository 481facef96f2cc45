"""Edge attribution patching (EAP) and EAP with integrated gradients (EAP-IG): estimates, never exact.

An edge ``s -> r`` (sender ``s``, reader input ``r``) is patched by moving ``s``'s contribution
to ``r``'s input alone from the base run's value to the other run's.  The first-order estimate
of the metric change is ``(out_s(other) - out_s(base)) . d metric / d input_r``:

* **EAP** (Syed et al. 2023): the gradient at the base run; one clean forward, one corrupted
  forward (the senders' outputs) and one backward through the base run.  ``direction="noising"``
  (default): base = clean, the edge's sender set to its corrupted output;
  ``"denoising"``: base = corrupt, the edge's sender set to its clean output (TransformerLens
  4.3's ``attribution_patch`` convention).
* **EAP-IG** (Hanna et al. 2024, the "inputs" variant): the gradient averaged over ``steps``
  points of the straight path from the corrupted to the clean input embeddings (the stream
  entering block 0), at the midpoints ``(k + 1/2) / steps``; its sum over the path is the
  integrated-gradients attribution, so the estimate does not depend on the direction but for
  its sign.  Cost: ``steps`` forward+backward passes plus the two forwards.

Gradients are read by backward hooks on the reader hook points
(:mod:`headlens.analyses.circuits.hooks`) and summed over the steps, one sum per reader; after
the last step each sum is contracted once with the senders' output differences (per pair,
``[sender, pos*d_model] @ [pos*d_model, slot]`` for each reader group): the contraction, which
reads the whole store of differences for every reader, runs once instead of once per step (on
SmolLM2 it was 29% of EAP-IG's time at 5 steps), the same sum to float32 rounding.  Memory: one
forward+backward of the batch with the bridge's split q/k/v inputs (``[batch, pos, head,
d_model]`` per layer, the same order as the senders' store), the readers' gradient sums (the
same size as those inputs), plus one store of the senders' output differences ``[batch, sender,
pos, d_model]`` (the clean and corrupted outputs for a moment while it is formed).  ``batch_size``
is the chunk: both grow with it, neither with the number of edges.  The backward reaches the
input embeddings only, never the weights.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.circuits.config import DIRECTIONS, check_direction
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import EMBED_HOOK, check_edge_model, edge_flags, sender_capture
from headlens.analyses.circuits.writes import head_sum_norms, sender_deltas
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel
from headlens.probes.reader_rows import reader_hook

log = logging.getLogger(__name__)

__all__ = ["PerPair", "attribution_scores", "DIRECTIONS", "check_direction", "senders_of", "sender_windows"]


@dataclass
class PerPair:
    """Each pair's metric change under each edge's patch (``patched - base``, metric units)."""

    values: np.ndarray  # [pair, edge] (columns: edge_ids)
    clean: np.ndarray  # [pair] metric on the clean inputs
    corrupt: np.ndarray  # [pair] metric on the corrupted inputs
    metric: str
    method: str  # "eap" | "eap-ig" | "exact"
    direction: str
    edge_ids: np.ndarray
    steps: int = 1
    forwards: float = 0.0  # forward equivalents over the task spent
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def estimate(self) -> bool:
        return self.method != "exact"


def senders_of(
    model: LoadedModel,
    graph: EdgeGraph,
    task: PairTask,
    rows: Sequence[int],
    tokens: Tensor,
    data: Any,
    *,
    window: tuple[int, int] | None = None,
) -> tuple[Tensor, Tensor]:
    """``(out, values)``: the senders' outputs ``[batch, sender, pos, d_model]`` and the metric of one forward
    (``window=(lo, hi)``: those senders only)."""
    store: dict[str, Tensor] = {}
    lengths = data.lengths[list(rows)]
    with torch.inference_mode(), attached(model.bridge, sender_capture(model, graph, store, window=window)):
        vals = model_values(model, tokens, lengths, data, rows)
    return store["out"].clone(), vals.detach().double().cpu()


def sender_windows(graph: EdgeGraph, max_senders: int | None) -> list[tuple[int, int]]:
    """Consecutive sender ranges ``(lo, hi)`` of at most ``max_senders`` senders each (None: one range of all),
    cut only between whole units (the embeddings, one layer's heads, one MLP), so a layer's heads stay together."""
    n_s = len(graph.senders())
    if max_senders is None:
        return [(0, n_s)]
    check_count("max_senders", max_senders)
    n_h = int(graph.info["n_heads"])
    cuts = [0, 1]
    for layer in range(int(graph.info["n_layers"])):
        first = 1 + layer * (n_h + 1)
        cuts += [first + n_h, first + n_h + 1]
    out: list[tuple[int, int]] = []
    lo = 0
    for a, b in itertools.pairwise(cuts):
        if b - lo > max_senders and a > lo:
            out.append((lo, a))
            lo = a
    out.append((lo, n_s))
    return out


def _contract(block: tuple[int, int, int], delta: Tensor, acc: Tensor, weight: float, lo: int = 0) -> HookFn:
    """Backward hook: the edges of one reader group whose senders are rows ``lo ..`` of ``delta`` (a window)."""
    first, k, n_rows = block
    n_send = min(n_rows - lo, delta.shape[1])

    def fn(grad: Tensor, hook: Any = None) -> None:
        g = grad.detach().float()
        if g.dim() == 3:
            g = g[:, :, None, :]
        b, p, slots, d = g.shape
        if delta.shape[2] != p:
            raise RuntimeError(f"reader gradient covers {p} positions, the senders' outputs {delta.shape[2]}")
        if slots != k:
            raise RuntimeError(f"reader gradient has {slots} slots, the graph {k}")
        gm = g.permute(0, 1, 3, 2).reshape(b, p * d, slots)
        out = torch.empty(b, slots, n_send, dtype=torch.float32, device=g.device)
        for i in range(b):  # one pair at a time: delta[i, :n_send] is a contiguous view, never copied
            out[i] = (delta[i, :n_send].reshape(n_send, p * d) @ gm[i]).T
        block_acc = acc[:, first : first + k * n_rows].view(b, k, n_rows)
        block_acc[:, :, lo : lo + n_send] += out.double().cpu() * weight

    return fn


def _summed(key: tuple[int, str], sums: dict[tuple[int, str], Tensor]) -> HookFn:
    """Backward hook: the reader's gradient added to ``sums[key]`` (summed over the integration steps, contracted once)."""

    def fn(grad: Tensor, hook: Any = None) -> None:
        g = grad.detach().float()
        if key in sums:
            sums[key].add_(g)
        else:
            sums[key] = g.clone()

    return fn


def _alphas(steps: int, direction: str) -> list[float]:
    if steps == 1:
        return [1.0 if direction == "noising" else 0.0]
    return [(k + 0.5) / steps for k in range(steps)]


def attribution_scores(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    *,
    steps: int = 1,
    direction: str = "noising",
    batch_size: int = 8,
    max_senders: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> PerPair:
    """EAP (``steps=1``) or EAP-IG (``steps > 1``) estimates of every edge of ``graph`` (see the module doc).

    ``max_senders``: the edges are scored in chunks of edge subsets, the senders of at most that many
    (:func:`sender_windows`) at a time, so the senders' store is ``[batch, max_senders, pos, d_model]``
    instead of ``[batch, sender, pos, d_model]``; each chunk repeats the two forwards and the backward
    passes (cost x the number of chunks, the same values)."""
    check_direction(direction)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError(f"steps must be a whole number >= 1, got {steps!r}", steps=steps)
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    n, n_edges = len(task), len(graph.edges)
    values = np.zeros((n, n_edges))
    clean_vals, corrupt_vals = np.zeros(n), np.zeros(n)
    alphas = _alphas(steps, direction)
    batches = clean_set.rows(batch_size)
    norms = head_sum_norms(model)
    windows = sender_windows(graph, max_senders)
    with edge_flags(model):
        check_edge_model(model, graph)
        for i, rows in enumerate(batches):
            tok_c, lengths, _width = clean_set.batch(rows)
            tok_k, _, _ = corrupt_set.batch(rows)
            acc = torch.zeros(len(rows), n_edges, dtype=torch.float64)
            base_tokens, base_set = (tok_k, corrupt_set) if (steps == 1 and direction == "denoising") else (tok_c, clean_set)
            emb_c = emb_k = torch.empty(0)  # set by the first window
            for wi, (lo, hi) in enumerate(windows):
                out_c, v_c = senders_of(model, graph, task, rows, tok_c, clean_set, window=(lo, hi))
                out_k, v_k = senders_of(model, graph, task, rows, tok_k, corrupt_set, window=(lo, hi))
                if wi == 0:  # the first window holds the embeddings (sender 0)
                    clean_vals[rows], corrupt_vals[rows] = v_c.numpy(), v_k.numpy()
                    emb_c, emb_k = out_c[:, 0].clone(), out_k[:, 0].clone()  # copies: views would keep both stores alive
                base_out, other_out = (out_c, out_k) if direction == "noising" else (out_k, out_c)
                delta = sender_deltas(graph, norms, base_out, other_out, first=lo)  # in place: one store of senders' outputs
                del base_out, other_out
                del out_c, out_k
                sums: dict[tuple[int, str], Tensor] = {}  # each reader's gradient summed over the steps
                bwd = [(reader_hook(lr, w, model.n_layers), _summed((lr, w), sums)) for (lr, w), blk in graph.blocks.items() if blk[2] > lo]
                for alpha in alphas:
                    leaf = (emb_k + alpha * (emb_c - emb_k)).detach().requires_grad_(True)

                    def inject(x: Tensor, hook: Any = None, _leaf: Tensor = leaf) -> Tensor:
                        return _leaf.to(dtype=x.dtype)

                    with torch.enable_grad(), attached(model.bridge, [(EMBED_HOOK, inject)]), attached(model.bridge, bwd, direction="bwd"):
                        vals = model_values(model, base_tokens, lengths, base_set, rows)
                        torch.autograd.grad(vals.sum(), [leaf])
                for key, g_sum in sums.items():  # one contraction per reader: the mean gradient over the steps
                    _contract(graph.blocks[key], delta, acc, 1.0 / len(alphas), lo)(g_sum)
                del delta, sums
            values[rows] = acc.numpy()
            if progress is not None:
                progress("eap-ig" if steps > 1 else "eap", i + 1, len(batches))
    if clean_set.metric == "embedding" and steps == 1 and float(np.abs(values).max()) == 0.0:
        raise InputError(
            "edge attribution: the metric's gradient is zero at the base run (the embedding metric is at its minimum on the clean "
            "inputs), so no first-order estimate exists; use steps > 1 (EAP-IG) or exact patching"
        )
    return PerPair(
        values=values,
        clean=clean_vals,
        corrupt=corrupt_vals,
        metric=clean_set.metric,
        method="eap-ig" if steps > 1 else "eap",
        direction=direction,
        edge_ids=np.arange(n_edges),
        steps=steps,
        forwards=len(windows) * (2.0 + 3.0 * len(alphas)),  # a backward to the inputs counted as two forwards
        info={"alphas": alphas, "interpolated_at": EMBED_HOOK, "sender_windows": windows},
    )
