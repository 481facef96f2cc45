"""Which KV heads share one pooled head: adjacent (0-1, 2-3, ...) or by similarity of their keys and values on text.

Mean-pooling a group replaces each member's keys and values by the group mean, so the
error it makes is the within-group scatter ``sum_h ||a_h - mean(a)||^2`` of the heads'
activations ``a_h`` (keys and values on the evaluation text, each scaled by its layer's
RMS so keys and values weigh alike).  That scatter equals ``(1/|G|) sum_{i<j in G} ||a_i - a_j||^2``,
so :func:`similar_groups` needs only the pairwise distances: it searches every partition into
equal groups when there are at most ``EXHAUSTIVE_LIMIT`` of them (GPT-2's 12 heads in pairs: 10,395),
otherwise it starts from adjacent groups and swaps members while the scatter falls.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headlens.probes.hooks import attached

__all__ = ["adjacent_groups", "similar_groups", "kv_distances", "scatter", "EXHAUSTIVE_LIMIT"]

log = logging.getLogger(__name__)

EXHAUSTIVE_LIMIT = 200_000


def adjacent_groups(n: int, g: int) -> tuple[tuple[int, ...], ...]:
    """``(0..g-1), (g..2g-1), ...``: the grouping a Hugging Face GQA model's ``repeat_kv`` implies."""
    return tuple(tuple(range(i, i + g)) for i in range(0, n, g))


def scatter(dist: np.ndarray, groups: Sequence[Sequence[int]]) -> float:
    """Within-group scatter from pairwise squared distances: ``sum_G (1/|G|) sum_{i<j in G} d_ij``."""
    return float(sum(dist[np.ix_(g, g)].sum() / 2 / len(g) for g in groups))


def _n_partitions(n: int, g: int) -> int:
    k = n // g
    return math.factorial(n) // (math.factorial(g) ** k * math.factorial(k))


def _partitions(items: tuple[int, ...], g: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    for others in combinations(rest, g - 1):
        grp = (first, *others)
        left = tuple(i for i in rest if i not in others)
        for tail in _partitions(left, g):
            yield (grp, *tail)


def similar_groups(dist: np.ndarray, g: int) -> tuple[tuple[int, ...], ...]:
    """The partition of ``len(dist)`` heads into groups of ``g`` with the least within-group scatter."""
    n = dist.shape[0]
    if g == 1 or g == n:
        return adjacent_groups(n, g)
    if _n_partitions(n, g) <= EXHAUSTIVE_LIMIT:
        best = min(_partitions(tuple(range(n)), g), key=lambda p: scatter(dist, p))
        return tuple(sorted(tuple(sorted(x)) for x in best))
    log.info("%d heads in groups of %d: %d partitions, too many to search; swapping from adjacent groups", n, g, _n_partitions(n, g))
    groups = [list(x) for x in adjacent_groups(n, g)]
    improved = True
    while improved:
        improved = False
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                for i in range(g):
                    for j in range(g):
                        before = scatter(dist, [groups[a], groups[b]])
                        groups[a][i], groups[b][j] = groups[b][j], groups[a][i]
                        if scatter(dist, [groups[a], groups[b]]) < before - 1e-12:
                            improved = True
                        else:
                            groups[a][i], groups[b][j] = groups[b][j], groups[a][i]
    return tuple(sorted(tuple(sorted(x)) for x in groups))


def kv_distances(model: Any, data: Any, *, batch_size: int = 8) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per layer, pairwise squared distances ``[kv_head, kv_head]`` between the KV heads' keys and values on
    ``data`` (real positions; keys and values each divided by the layer's RMS), and their cosines."""
    L = model.n_layers
    state: dict[tuple[int, str], Tensor] = {}

    def keep(layer: int, which: str):
        def fn(x: Tensor, hook: Any = None) -> None:
            state[(layer, which)] = x.detach().double()

        return fn

    hooks = [(f"blocks.{layer}.attn.hook_{w}", keep(layer, w)) for layer in range(L) for w in ("k", "v")]
    sums: list[dict[str, Tensor]] = [dict() for _ in range(L)]
    with torch.inference_mode(), attached(model.bridge, hooks):
        for rows in data.rows(batch_size):
            toks, lengths, width = data.batch(rows)
            model.bridge(toks.to(model.device), return_type=None)
            real = (torch.arange(width)[None, :] < lengths[:, None]).to(model.device)
            for layer in range(L):
                for w in ("k", "v"):
                    x = state.pop((layer, w))[real]  # [n, kv_head, d_head]
                    flat = x.permute(1, 0, 2).reshape(x.shape[1], -1)
                    s = sums[layer]
                    s[f"g{w}"] = s.get(f"g{w}", 0) + flat @ flat.T
                    s[f"n{w}"] = s.get(f"n{w}", 0) + flat.pow(2).sum() / flat.shape[0]
    dists, cosines = [], []
    for layer in range(L):
        s = sums[layer]
        gk, gv = s["gk"] / s["nk"], s["gv"] / s["nv"]
        gsum = (gk + gv).cpu().numpy()
        diag = np.diag(gsum)
        dists.append(np.maximum(diag[:, None] + diag[None, :] - 2 * gsum, 0.0))
        cosines.append(gsum / np.sqrt(np.outer(diag, diag)).clip(min=1e-300))
    return dists, cosines
