"""The one reduction pass over attention patterns: every statistic of patterns is a reducer here.

A **reducer** is anything with a ``name``, ``partial(rows, ctx, q_offset) -> Sums`` and
``finish(sums, ctx) -> output`` (the census detectors are reducers as they stand):
``rows`` ``[batch, head, block, k]`` are the pattern rows of queries ``q_offset .. q_offset +
block - 1`` against every key; the partial sums of the blocks are added (:func:`add_sums`,
float64) and ``finish`` turns them into the layer's output.  ``ctx`` is whatever the caller's
``context(view)`` builds from the layer's :class:`LayerView` (its attention facts, causal or
not, the batch's key mask and, with ``values=True``, its ``v``).

:func:`reduce_pass` owns everything around the reducers, once for the whole package:

* **the forward** of one batch with its attention mask (:func:`batch_attention_mask`), ended
  right after the last layer's attention (:mod:`headlens.probes.engine_forward`, the one early
  stop) unless logits are asked for;
* **eager or streaming**: ``eager`` reads ``hook_pattern`` (the whole pattern is one block);
  ``streaming`` recomputes the rows ``query_block`` queries at a time from the layer's rotated
  q and k inside the model's SDPA forward (:func:`headlens.probes.streaming.pattern_blocks`, with
  the one visibility rule :func:`headlens.probes.attention.visible` and the one
  :func:`headlens.probes.attention.repeat_kv`); ``auto`` picks by memory
  (:func:`headlens.probes.streaming.choose_attention`);
* **ablation** of heads (zeroed on ``hook_z``, or on the attention function's per-head output
  when streaming: the same tensor) and any other hooks the caller attaches for the pass.

Results are handed to ``on_layer(layer, outputs, ctx)`` as each layer finishes, on the model's
device: the caller decides when to move them to the host (the census once per stimulus set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from headlens.probes.attention import LayerAttention, attention_spec
from headlens.probes.patch import Start, patched_forward
from headlens.probes.prompts import TokenBatch
from headlens.probes.streaming import choose_attention, pattern_blocks, streamed_forward

__all__ = [
    "Sums",
    "Reducer",
    "LayerView",
    "PassInfo",
    "reduce_pass",
    "add_sums",
    "zero_heads_hooks",
    "batch_attention_mask",
    "layer_causal",
]

log = logging.getLogger(__name__)

#: Additive partial sums of a reducer over one block of queries (added up over blocks).
Sums = dict[str, Tensor]


class Reducer(Protocol):
    """A named reduction of one layer's pattern rows (the census detectors are reducers)."""

    @property
    def name(self) -> str: ...

    @property
    def partial(self) -> Callable[[Tensor, Any, int], Sums]: ...

    @property
    def finish(self) -> Callable[[Sums, Any], Any]: ...


@dataclass(frozen=True, kw_only=True)
class LayerView:
    """What the engine knows about one layer of one batch when its rows are reduced.

    ``layer``: its :class:`LayerAttention` (with the scale the attention function applies, when
    streaming); ``causal``: False on a bidirectional layer (or any layer of an encoder);
    ``key_mask`` ``[batch, k]``: True on real keys; ``v`` ``[batch, pos, kv_head, d_head]``
    (``hook_v``'s layout, KV heads not repeated) when the pass was asked for ``values``.
    """

    layer: LayerAttention
    causal: bool
    key_mask: Bool[Tensor, "batch k"]
    v: Float[Tensor, "batch pos kv_head d_head"] | None = None


@dataclass
class PassInfo:
    """What one pass did: the mode it ran in, the widest block of query rows, the bridge's output
    (logits when asked for, else None)."""

    attention: str
    widest_block: int = 0
    output: Any = None


def add_sums(total: Sums | None, part: Sums) -> Sums:
    """``total + part`` key by key (float64 accumulation); ``part`` when ``total`` is None."""
    if total is None:
        return {k: v.double() for k, v in part.items()}
    return {k: total[k] + v.double() for k, v in part.items()}


def batch_attention_mask(batch: TokenBatch) -> Tensor:
    """0/1 ``[prompt, pos]``: 1 on real tokens (``TokenBatch.attention_mask`` where it exists)."""
    mask = getattr(batch, "attention_mask", None)
    if isinstance(mask, Tensor):
        return mask
    return batch.mask.long()


def layer_causal(model: Any) -> tuple[bool, ...]:
    """Per layer: True for causal attention, False for bidirectional (every query sees every
    real key): a layer the attention spec marks non-causal, or any layer of an encoder."""
    encoder = bool(getattr(model, "is_encoder", False))
    return tuple(bool(getattr(layer, "causal", True)) and not encoder for layer in attention_spec(model).layers)


def zero_heads_hooks(heads: Mapping[int, Sequence[int]]) -> list[tuple[str, Callable[..., Any]]]:
    """``hook_z`` hooks that zero the outputs of ``heads`` (``{layer: [head, ...]}``)."""
    hooks = []
    for layer, hs in heads.items():
        idx = torch.tensor(list(hs))

        def zero(z: Tensor, hook: Any = None, idx: Tensor = idx) -> Tensor:
            z = z.clone()
            z[:, :, idx.to(z.device)] = 0
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", zero))
    return hooks


def _reduce(reducers: Sequence[Reducer], blocks: Any, ctx: Any, info: PassInfo) -> dict[str, Any]:
    sums: dict[str, Sums | None] = {r.name: None for r in reducers}
    for q0, rows in blocks:
        info.widest_block = max(info.widest_block, int(rows.shape[2]))
        for r in reducers:
            sums[r.name] = add_sums(sums[r.name], r.partial(rows, ctx, q0))
    return {r.name: r.finish(sums[r.name] or {}, ctx) for r in reducers}


def reduce_pass(
    model: Any,
    tokens: Tensor,
    attention_mask: Tensor | None,
    reducers: Sequence[Reducer],
    *,
    context: Callable[[LayerView], Any],
    on_layer: Callable[[int, dict[str, Any], Any], None],
    attention: str = "eager",
    query_block: int = 256,
    ablate: Mapping[int, Sequence[int]] | None = None,
    values: bool = False,
    hooks: Sequence[tuple[str, Callable[..., Any]]] = (),
    return_type: str | None = None,
    start: tuple[int, Tensor] | None = None,
) -> PassInfo:
    """Reduce every layer's attention pattern of one batch with ``reducers``.

    ``tokens`` ``[batch, pos]`` and their 0/1 ``attention_mask`` (None: no padding, and none is
    passed to the model); per layer, ``ctx =
    context(view)`` and, once its rows are reduced, ``on_layer(layer, {reducer name: finish
    output}, ctx)``.  ``attention``: ``eager``, ``streaming`` or ``auto``.  ``ablate``
    (``{layer: [head, ...]}``) zeroes heads' outputs; ``hooks`` are attached for the pass (eager
    only: interventions on ``hook_q``/``hook_k``/``hook_v``); ``values`` hands each layer's
    ``v`` to ``context``.  The pass stops after the last layer's attention unless
    ``return_type`` (eager only, e.g. ``"logits"``) asks for the bridge's output
    (:attr:`PassInfo.output`).  ``start`` ``(L, resid)`` (eager only) continues the forward from
    ``resid`` ``[batch, pos, d_model]``, the residual stream entering block ``L``, kept from an
    earlier pass on the same tokens (:class:`headlens.probes.patch.Start`): blocks
    before ``L`` do not run and their layers are not reduced.
    """
    mode = choose_attention(attention, batch=int(tokens.shape[0]), n_heads=int(model.n_heads), n=int(tokens.shape[1]))
    spec = attention_spec(model)
    causal = layer_causal(model)
    key_mask = (
        torch.ones(tokens.shape, dtype=torch.bool, device=model.device)
        if attention_mask is None
        else attention_mask.to(model.device).bool()
    )
    info = PassInfo(attention=mode)
    if mode == "streaming":
        if hooks or return_type is not None or start is not None:
            raise ValueError("streaming attention runs no extra hooks, returns nothing and starts at block 0: use attention='eager'")
        _streamed_pass(model, tokens, key_mask, reducers, context, on_layer, info, query_block=query_block, ablate=ablate, values=values)
        return info
    held: dict[int, Tensor] = {}

    def keep_v(layer: int) -> Callable[..., None]:
        def fn(v: Tensor, hook: Any = None) -> None:
            held[layer] = v

        return fn

    def read_pattern(la: LayerAttention) -> Callable[..., None]:
        def fn(pattern: Tensor, hook: Any = None) -> None:
            view = LayerView(layer=la, causal=causal[la.layer], key_mask=key_mask, v=held.pop(la.layer, None))
            ctx = context(view)
            on_layer(la.layer, _reduce(reducers, [(0, pattern)], ctx, info), ctx)

        return fn

    first = 0 if start is None else start[0]
    pass_hooks = [*hooks, *zero_heads_hooks(ablate or {})]
    for la in spec.layers[first:]:
        if values:
            pass_hooks.append((f"blocks.{la.layer}.attn.hook_v", keep_v(la.layer)))
        pass_hooks.append((f"blocks.{la.layer}.attn.hook_pattern", read_pattern(la)))
    begin = None if start is None else Start(layer=start[0], resid=start[1])
    stop_after = f"blocks.{model.n_layers - 1}.attn.hook_pattern" if return_type is None else None
    with torch.inference_mode():
        output = patched_forward(
            model, tokens, pass_hooks, start=begin, stop_after=stop_after, return_type=return_type, attention_mask=attention_mask
        )
    if return_type is not None:
        info.output = output
    return info


def _streamed_pass(
    model: Any,
    tokens: Tensor,
    key_mask: Tensor,
    reducers: Sequence[Reducer],
    context: Callable[[LayerView], Any],
    on_layer: Callable[[int, dict[str, Any], Any], None],
    info: PassInfo,
    *,
    query_block: int,
    ablate: Mapping[int, Sequence[int]] | None,
    values: bool,
) -> None:
    """:func:`reduce_pass` under streaming attention: each layer's pattern rows from its q and k, block by block."""
    causal = layer_causal(model)

    def on_attention(la: LayerAttention, q: Tensor, k: Tensor, v: Tensor) -> None:
        view = LayerView(layer=la, causal=causal[la.layer], key_mask=key_mask, v=v.transpose(1, 2) if values else None)
        ctx = context(view)
        on_layer(la.layer, _reduce(reducers, pattern_blocks(la, q, k, key_mask, query_block), ctx, info), ctx)

    with torch.inference_mode():
        streamed_forward(
            model, tokens, key_mask.long(), on_attention, block=query_block, ablate={k: list(v) for k, v in (ablate or {}).items()}
        )
