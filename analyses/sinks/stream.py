"""One pass that reduces attention patterns to sink statistics: the sink reducers on the engine.

:func:`stream_sink_stats` runs a batch of prompts through every layer (no unembedding;
:func:`headlens.probes.engine.reduce_pass`, eager) with the reducers of
:mod:`headlens.analyses.sinks.reducers`; each keeps running sums of fixed size on the model's
device, so memory does not grow with the number of prompts.  All statistics are in float32
whatever the model's dtype, and padded positions never count (every forward passes the batch's
attention mask).  Which queries count on window and bidirectional layers:
:mod:`headlens.analyses.sinks.layers`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from headlens.analyses.sinks.layers import SinkLayers, sink_layers
from headlens.analyses.sinks.reducers import AlphaStat, ExcessStat, SinkCtx, TargetStat, ValueNormStat
from headlens.analyses.sinks.reductions import output_grams, value_norms
from headlens.analyses.sinks.targets import punctuation_ids
from headlens.probes.engine import LayerView, Reducer, batch_attention_mask, reduce_pass
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, iter_batches

__all__ = ["SinkStats", "stream_sink_stats"]

log = logging.getLogger(__name__)


@dataclass
class SinkStats:
    """The sink reducers of one pass with their totals (None: not asked for), the layers'
    kinds, and the number of prompts and real tokens."""

    layers: SinkLayers
    alpha: AlphaStat
    excess: ExcessStat | None = None
    value_norm: ValueNormStat | None = None
    targets: TargetStat | None = None
    n_samples: int = 0
    n_tokens: int = 0


def stream_sink_stats(
    model: LoadedModel,
    batch: TokenBatch,
    *,
    eps: float,
    keys: tuple[int, ...] = (0,),
    secondary: bool = False,
    value_norm: bool = False,
    targets: bool = False,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> SinkStats:
    """Run ``batch`` through every layer (no unembedding) and reduce the patterns on the fly.

    Always: Gu et al. alpha for each key in ``keys`` and its uniform baseline.  ``secondary``:
    excess attention received per key position and per token id.  ``value_norm``: sink
    value-norm and attention shares.  ``targets``: attention shares of the first position, the
    suffix (``[SEP]``) and punctuation (the batch's ``n_prefix``/``n_suffix`` say which
    positions are framing).
    """
    dev = model.device
    n_l, n_h = model.n_layers, model.n_heads
    width = int(batch.tokens.shape[1])
    layers = sink_layers(model, width)
    stats = SinkStats(
        layers=layers, alpha=AlphaStat(layers, n_h, keys=keys, eps=eps, device=dev), n_samples=len(batch), n_tokens=int(batch.lengths.sum())
    )
    if secondary:
        stats.excess = ExcessStat(layers, n_h, width=width, token_ids=torch.unique(batch.tokens[batch.mask]), device=dev)
    grams: list[Tensor] = []
    if value_norm:
        stats.value_norm = ValueNormStat(n_l, n_h, device=dev)
        grams = output_grams(model)
    if targets:
        frame = (int(getattr(batch, "n_prefix", None) or (1 if batch.prepend_bos else 0)), int(getattr(batch, "n_suffix", 0) or 0))
        stats.targets = TargetStat(n_l, n_h, punct=punctuation_ids(model.tokenizer, batch.tokens[batch.mask]), frame=frame, device=dev)
    reducers: list[Any] = [r for r in (stats.alpha, stats.excess, stats.value_norm, stats.targets) if r is not None]
    state: dict[str, Any] = {}

    def context(view: LayerView) -> SinkCtx:
        layer = view.layer.layer
        vnorm = value_norms(view.v, grams[layer]) if view.v is not None else None
        return SinkCtx(
            layer=layer,
            lengths=state["lengths"],
            window=layers.windows[layer],
            causal=layers.causal[layer],
            vnorm=vnorm,
            compact=state.get("compact"),
            groups=state.get("groups"),
        )

    def add(layer: int, outputs: dict[str, Any], ctx: SinkCtx) -> None:
        for r in reducers:
            r.add(layer, outputs[r.name], ctx)

    chunks = iter_batches(batch, batch_size)
    passing: list[Reducer] = reducers
    with torch.inference_mode():
        for done, (_, sub) in enumerate(chunks, start=1):
            lengths, tokens = sub.lengths.to(dev), sub.tokens.to(dev)
            state["lengths"] = lengths
            stats.alpha.start_batch(sub.lengths)
            if stats.excess is not None:
                state["compact"] = stats.excess.start_batch(tokens, sub.mask.to(dev), lengths)
            if stats.value_norm is not None:
                stats.value_norm.start_batch(sub.lengths)
            if stats.targets is not None:
                state["groups"] = stats.targets.start_batch(tokens, lengths)
            reduce_pass(model, sub.tokens, batch_attention_mask(sub), passing, context=context, on_layer=add, values=value_norm)
            if progress is not None:
                progress(done, len(chunks))
    return stats
