"""The running sums of one streaming pass (:class:`StreamStats`) and the statistics read from them.

Definitions (``A = A[l,h]``, a prompt of ``n`` real tokens, queries ``i``, keys ``j <= i``):

* **Sink alpha** (Gu et al. 2024), :func:`headlens.analyses.attention_stats.sink_alpha`:
  ``alpha(k) = mean over queries i >= k of A[i, k]``.  Kept for keys 0 and 1 (key 1 answers
  "does attention follow BOS when it is moved to position 1").
* **Uniform baseline**: the same statistic for a head that gives ``1/(i+1)`` to every key.
* Excess attention received and value-norm shares: :mod:`headlens.analyses.sinks.reductions`;
  sink targets: :mod:`headlens.analyses.sinks.targets`.

Sliding windows (each layer's, from :func:`headlens.probes.attention.attention_spec`): in a layer with a
window of ``w`` keys query ``i`` sees only keys ``i - w < j <= i``.  There a uniform head gives
``1/min(i+1, w)`` to each key it sees, and every statistic counts only the queries that can
see the key it is about: alpha(k) and its baseline over ``k <= i < k + w``; excess attention
received by ``j`` is ``A[i,j] - 1/min(i+1, w)`` over ``j <= i < j + w`` (per-layer query counts
``pos_queries_layer``/``tok_queries_layer``); value-norm and attention shares over ``1 <= i < w``
(``vn_queries_layer``).  Full-causal layers are computed exactly as before; the un-suffixed
counts and ``uniform_mean()`` without a layer are those of full-causal attention.

Bidirectional layers (encoders such as BERT, ``[CLS] text [SEP]``): every real query sees every
real key, so a uniform head gives ``1/n`` to each key of a prompt of ``n`` real tokens, and every
statistic averages over *all* real queries: alpha(k) over ``0 <= i < n`` (baseline ``1/n``),
excess attention received ``A[i,j] - 1/n`` over all ``n`` queries, value-norm and attention
shares over ``0 <= i < n`` (query 0 sees every key there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import logging

import torch
from torch import Tensor

from headlens.analyses.sinks.targets import TARGET_GROUPS

__all__ = ["StreamStats"]

log = logging.getLogger(__name__)


@dataclass
class StreamStats:
    """Running sums from :func:`headlens.analyses.sinks.stream.stream_sink_stats`, on the CPU, float64 where they are sums.

    ``alpha_*``: ``[key, layer, head]`` for the keys in ``keys``; ``uniform_*``: ``[key]``.
    ``pos_excess`` ``[layer, head, position]`` with ``pos_queries`` ``[position]``;
    ``tok_excess`` ``[layer, head, token]`` over ``token_ids`` with ``tok_queries`` and
    ``tok_count`` ``[token]``; ``vn_*`` ``[layer, head]`` with ``vn_queries`` (a number).

    Query counts and uniform baselines depend on a layer's sliding window (``windows``, one per
    layer, None for full causal attention or a window at least as long as the longest prompt)
    and on whether it is causal (``causal``, one per layer; False: bidirectional):
    ``uniform_layer_sum``/``uniform_layer_above`` ``[key, layer]``, ``pos_queries_layer``
    ``[layer, position]``, ``tok_queries_layer`` ``[layer, token]``, ``vn_queries_layer``
    ``[layer]``.  The un-suffixed ``uniform_sum``, ``pos_queries``, ``tok_queries``,
    ``vn_queries`` are those of full-causal attention (all layers' when the model has neither
    windows nor bidirectional layers).

    Sink targets (``targets=True``): ``target_sum`` ``[group, layer, head]`` (sum over the
    measured sequences of the per-sequence mean share), ``target_uniform_sum`` and
    ``target_n`` ``[group, layer]`` (sequences measured), ``target_keys`` ``[group]`` (keys of
    each group over all sequences), groups in :data:`TARGET_GROUPS` order.
    """

    keys: tuple[int, ...]
    eps: float
    n_samples: int = 0
    n_tokens: int = 0
    alpha_sum: Tensor | None = None
    alpha_sq_sum: Tensor | None = None
    alpha_above: Tensor | None = None
    alpha_n: Tensor | None = None
    uniform_sum: Tensor | None = None
    uniform_above: Tensor | None = None
    pos_excess: Tensor | None = None
    pos_queries: Tensor | None = None
    token_ids: Tensor | None = None
    tok_excess: Tensor | None = None
    tok_queries: Tensor | None = None
    tok_count: Tensor | None = None
    vn_share_sum: Tensor | None = None
    vn_attn_sum: Tensor | None = None
    vn_queries: float = 0.0
    vn_sink_norm_sum: Tensor | None = None
    vn_other_norm_sum: Tensor | None = None
    vn_other_count: float = 0.0
    windows: tuple[int | None, ...] = ()
    causal: tuple[bool, ...] = ()
    uniform_layer_sum: Tensor | None = None
    uniform_layer_above: Tensor | None = None
    pos_queries_layer: Tensor | None = None
    tok_queries_layer: Tensor | None = None
    vn_queries_layer: Tensor | None = None
    target_sum: Tensor | None = None
    target_uniform_sum: Tensor | None = None
    target_n: Tensor | None = None
    target_keys: Tensor | None = None
    punctuation: Tensor | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def _n(self, key: int) -> float:
        return max(float(self.alpha_n[self.keys.index(key)]), 1.0)

    def alpha_mean(self, key: int = 0) -> Tensor:
        """``[layer, head]``: alpha averaged over prompts (those longer than ``key``)."""
        return self.alpha_sum[self.keys.index(key)] / self._n(key)

    def alpha_std(self, key: int = 0) -> Tensor:
        k = self.keys.index(key)
        mean = self.alpha_sum[k] / self._n(key)
        return (self.alpha_sq_sum[k] / self._n(key) - mean**2).clamp_min(0).sqrt()

    def alpha_rate(self, key: int = 0) -> Tensor:
        """``[layer, head]``: fraction of prompts with alpha > eps."""
        return self.alpha_above[self.keys.index(key)] / self._n(key)

    @property
    def windowed(self) -> bool:
        """True when some layer attends within a sliding window."""
        return any(w is not None for w in self.windows)

    @property
    def bidirectional(self) -> bool:
        """True when some layer is bidirectional (an encoder's)."""
        return not all(self.causal)

    def _uniform(self, total: Tensor, per_layer: Tensor, key: int, layer: int | None) -> float:
        """A uniform head's statistic for ``key`` in ``layer``; without a layer, the mean over
        layers (the full-causal total when every layer is full causal)."""
        k = self.keys.index(key)
        if layer is not None:
            value = per_layer[k, layer]
        elif not self.windowed and not self.bidirectional:
            value = total[k]
        else:
            value = per_layer[k].mean()
        return float(value) / self._n(key)

    def uniform_mean(self, key: int = 0, layer: int | None = None) -> float:
        """Alpha of a uniform head in ``layer`` (its window's or bidirectional baseline); without
        a layer, the mean over layers (the full-causal value when every layer is full causal)."""
        return self._uniform(self.uniform_sum, self.uniform_layer_sum, key, layer)

    def uniform_rate(self, key: int = 0, layer: int | None = None) -> float:
        """Fraction of prompts where a uniform head in ``layer`` has alpha > eps (as :meth:`uniform_mean`)."""
        return self._uniform(self.uniform_above, self.uniform_layer_above, key, layer)

    def target_mean(self, group: str) -> Tensor:
        """``[layer, head]``: the attention share of a key group (:mod:`headlens.analyses.sinks.targets`); NaN where no
        sequence has a query that sees a key of the group (e.g. ``suffix`` on a decoder)."""
        g = TARGET_GROUPS.index(group)
        n = self.target_n[g][:, None]
        return torch.where(n > 0, self.target_sum[g] / n.clamp_min(1), torch.full_like(self.target_sum[g], float("nan")))

    def target_uniform(self, group: str) -> Tensor:
        """``[layer]``: the same share for a uniform head; NaN where unmeasured."""
        g = TARGET_GROUPS.index(group)
        n = self.target_n[g]
        return torch.where(n > 0, self.target_uniform_sum[g] / n.clamp_min(1), torch.full_like(n, float("nan")))

    def window_notes(self) -> list[str]:
        """One line per sliding-window layer: what its statistics average over."""
        notes = []
        for layer, w in enumerate(self.windows):
            if w is None:
                continue
            notes.append(
                f"layer {layer}: sliding window of {w} keys; sink alpha of key k is averaged over the queries that can see it"
                f" (k <= i < k + {w}: i < {w} for key 0), baseline uniform over the keys the window allows (1/min(i+1, {w}));"
                f" excess attention over the queries that see each key; value-norm shares over 1 <= i < {w}"
            )
        return notes

    def attention_notes(self) -> list[str]:
        """One line for the bidirectional layers (none on a causal model)."""
        bi = [layer for layer, c in enumerate(self.causal) if not c]
        if not bi:
            return []
        which = "every layer" if len(bi) == len(self.causal) else "layers " + ", ".join(map(str, bi))
        return [
            f"{which}: bidirectional attention (every query sees every real key); sink alpha of key k is averaged over all"
            " real queries, baseline uniform over all keys (1/n for n real tokens); excess attention A[i,j] - 1/n over all"
            " queries; value-norm shares over all queries"
        ]
