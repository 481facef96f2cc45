"""What each layer's attention lets the sink statistics count: full causal, a sliding window, or bidirectional.

Definitions (``A = A[l,h]``, a prompt of ``n`` real tokens, queries ``i``, keys ``j <= i``):

* **Sink alpha** (Gu et al. 2024), :func:`headlens.analyses.measure.attention_stats.sink_alpha`:
  ``alpha(k) = mean over queries i >= k of A[i, k]``.  Kept for keys 0 and 1 (key 1 answers
  "does attention follow BOS when it is moved to position 1").
* **Uniform baseline**: the same statistic for a head that gives ``1/(i+1)`` to every key.
* Excess attention received and value-norm shares: :mod:`headlens.analyses.sinks.reductions`;
  sink targets: :mod:`headlens.analyses.sinks.targets`.

Sliding windows (each layer's, from :func:`headlens.probes.attention.attention_spec`): in a layer with a
window of ``w`` keys query ``i`` sees only keys ``i - w < j <= i`` (:func:`headlens.probes.attention.visible`).
There a uniform head gives ``1/min(i+1, w)`` to each key it sees, and every statistic counts only
the queries that can see the key it is about: alpha(k) and its baseline over ``k <= i < k + w``;
excess attention received by ``j`` is ``A[i,j] - 1/min(i+1, w)`` over ``j <= i < j + w``;
value-norm and attention shares over ``1 <= i < w``.  A window at least as long as the prompts
changes nothing: such layers count as full causal.

Bidirectional layers (encoders such as BERT, ``[CLS] text [SEP]``): every real query sees every
real key, so a uniform head gives ``1/n`` to each key of a prompt of ``n`` real tokens, and every
statistic averages over *all* real queries: alpha(k) over ``0 <= i < n`` (baseline ``1/n``),
excess attention received ``A[i,j] - 1/n`` over all ``n`` queries, value-norm and attention
shares over ``0 <= i < n`` (query 0 sees every key there).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from headlens.probes.attention import attention_spec
from headlens.probes.engine import layer_causal
from headlens.probes.loading import LoadedModel

__all__ = ["BIDIRECTIONAL", "Kind", "SinkLayers", "sink_layers"]

log = logging.getLogger(__name__)

#: The kind of a bidirectional layer.
BIDIRECTIONAL = "bidirectional"
#: A layer's kind: None (full causal), a window size, or :data:`BIDIRECTIONAL`.
Kind = int | str | None


@dataclass(frozen=True, kw_only=True)
class SinkLayers:
    """Per layer: the window in effect (None: full causal, or a window at least as long as the
    prompts, or bidirectional), causal or not, and its :data:`Kind`."""

    windows: tuple[int | None, ...]
    causal: tuple[bool, ...]

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(w if c else BIDIRECTIONAL for w, c in zip(self.windows, self.causal, strict=True))

    @property
    def distinct(self) -> list[Kind]:
        """Full causal (always: the un-suffixed counts) and every other kind in use, in layer order."""
        return list(dict.fromkeys([None, *self.kinds]))

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


def sink_layers(model: LoadedModel, width: int) -> SinkLayers:
    """The :class:`SinkLayers` of ``model`` for prompts of at most ``width`` tokens."""
    causal = layer_causal(model)
    windows = tuple(
        layer.window if layer.window is not None and layer.window < width and c else None
        for layer, c in zip(attention_spec(model).layers, causal, strict=True)
    )
    return SinkLayers(windows=windows, causal=causal)
