"""What an edge outside a circuit carries instead of its sender's live output: the ablation kind.

* ``corrupted`` (the default): the sender's output on the pair's corrupted input (patching, as
  EAP, EAP-IG, ACDC's and MIB's default);
* ``mean``: the sender's output averaged position by position over the choosing pairs' clean and
  corrupted input (the real tokens only: a position a shorter item does not reach is left out of
  its mean), one reference for every pair, the held-out ones included (auto-circuit's token-wise
  mean of clean and corrupt; :func:`~headlens.analyses.circuits.run.run_circuit` builds it from the
  choosing pairs only, so the held-out pairs do not help choose the circuit);
* ``zero``: nothing (ACDC's zero ablation): the reader loses the sender's output.

A constant signal (a bias, the BOS token, position) is the same in the clean and the corrupted run,
so patching never sees the edges that carry it; zero ablation does (tracr: ``docs/tracr.md``).
Under ``mean`` or ``zero`` the empty circuit is every edge ablated so, and faithfulness is
normalised against it (:mod:`~headlens.analyses.circuits.mib`'s formula).  :func:`ablated_exact_scores`
scores every edge exactly under the kind: the circuit of every edge but that one (noising) or of
that one alone (denoising), against the unablated (or the fully ablated) run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.circuits.config import ABLATIONS, check_ablation
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import edge_flags
from headlens.analyses.circuits.scores import PerPair, senders_of
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.loading import LoadedModel

__all__ = ["ABLATIONS", "MASK_CHUNK", "Ablation", "ablation_for", "ablated_exact_scores", "check_ablation"]

#: Edges scored per call of :func:`circuit_values` by :func:`ablated_exact_scores` (its masks are ``[chunk, edge]``).
MASK_CHUNK = 256


@dataclass(frozen=True)
class Ablation:
    """An ablation kind and, for ``mean``, its reference ``[1, sender, pos, d_model]``."""

    kind: str
    mean: Tensor | None = None

    def values(self, corrupt: Tensor) -> Tensor:
        """What the senders carry outside the circuit, shaped as ``corrupt`` (the corrupted run's store of a batch)."""
        if self.kind == "zero":
            return torch.zeros_like(corrupt)
        if self.kind == "mean":
            assert self.mean is not None
            return self.mean[:, :, : corrupt.shape[2]].to(corrupt.dtype).expand_as(corrupt).contiguous()
        return corrupt


def ablation_for(model: LoadedModel, graph: EdgeGraph, task: PairTask, kind: str, *, batch_size: int = 8) -> Ablation | None:
    """The :class:`Ablation` of ``kind`` on ``task`` (None for ``corrupted``: the corrupted run itself)."""
    check_ablation(kind)
    if kind == "corrupted":
        return None
    if kind == "zero":
        return Ablation("zero")
    total: Tensor | None = None
    count = torch.zeros(int(task.lengths.max()) if len(task) else 1, dtype=torch.float64)
    with edge_flags(model):
        for data in pair_eval_sets(model, task, batch_size=batch_size):
            for rows in data.rows(batch_size):
                tokens, lengths, width = data.batch(rows)
                out, _ = senders_of(model, graph, task, rows, tokens, data)  # [b, S, p, d]
                real = (torch.arange(width)[None, :] < lengths[:, None].cpu()).to(torch.float64)  # [b, p]
                part = torch.einsum("bspd,bp->spd", out.double().cpu(), real)
                if total is None:
                    total = torch.zeros(part.shape[0], len(count), part.shape[2], dtype=torch.float64)
                total[:, :width] += part
                count[:width] += real.sum(0)
    assert total is not None
    mean = total / count.clamp(min=1)[None, :, None]
    return Ablation("mean", mean[None].to(device=model.device, dtype=torch.float32))


def ablated_exact_scores(
    model: LoadedModel, task: PairTask, graph: EdgeGraph, ablation: Ablation, *, direction: str = "noising", batch_size: int = 8,
    progress: Callable[[str, int, int], None] | None = None,
) -> PerPair:  # fmt: skip
    """Each pair's metric change when one edge is ablated from the whole graph (``noising``) or is the only edge kept
    (``denoising``), every edge of ``graph``; ``clean``/``corrupt`` of the result: the unablated and the fully ablated run."""
    n = len(graph.edges)
    ends = np.zeros((2, n), dtype=bool)
    ends[1] = True
    empty, full = circuit_values(model, task, graph, ends, batch_size=batch_size, ablation=ablation)
    base = full if direction == "noising" else empty
    values = np.zeros((len(task), n))
    for c0 in range(0, n, MASK_CHUNK):  # [chunk, edge] masks at a time: n x n booleans would not fit a large graph
        k = min(MASK_CHUNK, n - c0)
        masks = np.full((k, n), direction == "noising")
        masks[np.arange(k), c0 + np.arange(k)] = direction != "noising"
        vals = circuit_values(model, task, graph, masks, batch_size=batch_size, ablation=ablation)
        values[:, c0 : c0 + k] = (vals - base[None, :]).T
        if progress is not None:
            progress("exact", c0 + k, n)
    metric = pair_eval_sets(model, task, batch_size=batch_size)[0].metric
    return PerPair(values=values, clean=full, corrupt=empty, metric=metric, method="exact", direction=direction,
                   edge_ids=np.arange(n), forwards=float(n + 2), info={"ablation": ablation.kind})  # fmt: skip
