"""Run the model with its own fast attention and hand each layer's rotated q, k, v to a callback.

Eager analyses read ``hook_pattern``, which materialises ``[batch, head, n, n]`` per layer.
Here the forward runs through Hugging Face's attention modules with an attention function
headlens registers in ``transformers.AttentionInterface`` (:data:`STREAMING_IMPLEMENTATION`,
with the SDPA mask builder): it receives q, k, v exactly as they enter the dot product
(rotated, KV heads not yet repeated), calls ``on_layer(layer, q, k, v)`` and returns the
output of ``torch.nn.functional.scaled_dot_product_attention`` (transformers' own SDPA path),
so the forward is the SDPA forward.  Layers with a logit softcap (Gemma2), which SDPA cannot
do, get their output from the same query blocks the statistics use (:func:`pattern_blocks`:
memory ``O(block x n)`` per head).  GPT-Neo computes attention in ``GPTNeoSelfAttention._attn``:
that method is replaced per instance (scale 1, the module's causal/local mask).

On layers where the bridge recomputes attention itself (native adapters), the bridge
component's ``forward`` is replaced on the instance by the wrapped Hugging Face module's for
the duration.  Everything (the config switch, the instance attributes, the active callbacks)
is restored in ``finally``.  A family none of these reaches is refused with
:class:`~headlens.probes.errors.UnsupportedModelError` (one line): never a silent eager run.

:func:`pattern_blocks` redoes each layer's equation in blocks of queries with the layer's
own scale, softcap, ALiBi bias, causal/window mask and the batch's padding (:mod:`headlens.probes.attention`,
the reconstruction ``verify`` checks), a numerically stable softmax per row, float32.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from headlens.probes import hf_attention
from headlens.probes.attention import LayerAttention, allowed_keys, attention_core, attention_spec, position_bias, repeat_kv
from headlens.probes.engine_forward import StopForward, stopping
from headlens.probes.errors import InputError, UnsupportedModelError

__all__ = [
    "STREAMING_IMPLEMENTATION",
    "ATTENTION_MODES",
    "DEFAULT_MEMORY_BUDGET",
    "LayerCallback",
    "pattern_blocks",
    "eager_pattern_bytes",
    "choose_attention",
    "check_streamable",
    "streamed_forward",
]

log = logging.getLogger(__name__)

#: The name of headlens' streaming attention function in ``transformers.AttentionInterface``.
STREAMING_IMPLEMENTATION = "headlens_streaming"
#: Values of ``--attention``.
ATTENTION_MODES = ("auto", "eager", "streaming")
#: ``auto`` streams when one layer's eager patterns (float32) would exceed this many bytes (2 GiB).
DEFAULT_MEMORY_BUDGET = 2 * 1024**3

#: ``on_layer(layer, q [b, head, n, d], k [b, kv_head, n, d], v [b, kv_head, n, d])``: ``layer`` is the
#: layer's :class:`LayerAttention` with the scale the module applies to these q and k (OPT scales
#: q in its projection and passes 1.0; GPT-Neo does not scale).
LayerCallback = Callable[[LayerAttention, Tensor, Tensor, Tensor], None]

_ACTIVE: dict[int, tuple[int, _Run]] = {}  # id(HF attention module) -> (layer, run) inside a block
_MISSING = object()
_NEO_CLASSES = frozenset({"GPTNeoSelfAttention"})


class _Run:
    def __init__(
        self, model: Any, on_layer: LayerCallback, key_mask: Tensor, block: int, stop_after: int | None, ablate: dict[int, list[int]]
    ):
        self.model, self.on_layer, self.key_mask, self.block = model, on_layer, key_mask, block
        self.stop_after, self.ablate = stop_after, ablate
        self.spec = attention_spec(model)
        self.calls: list[int] = []


def eager_pattern_bytes(batch: int, n_heads: int, n: int) -> int:
    """Bytes of one layer's float32 ``hook_pattern`` for ``batch`` prompts of ``n`` positions."""
    return int(batch) * int(n_heads) * int(n) * int(n) * 4


def choose_attention(mode: str, *, batch: int, n_heads: int, n: int, budget: int = DEFAULT_MEMORY_BUDGET) -> str:
    """``eager`` or ``streaming`` for ``mode`` (``auto``: streaming when one layer's eager patterns
    exceed ``budget`` bytes); logs the choice and why."""
    if mode not in ATTENTION_MODES:
        raise InputError(f"attention={mode!r}: choose from {', '.join(ATTENTION_MODES)}")
    if mode != "auto":
        return mode
    need = eager_pattern_bytes(batch, n_heads, n)
    chosen = "streaming" if need > budget else "eager"
    log.info(
        "attention auto -> %s: one layer's eager patterns need %d bytes (batch %d x %d heads x %d x %d x 4), budget %d",
        chosen,
        need,
        batch,
        n_heads,
        n,
        n,
        budget,
    )
    return chosen


def pattern_blocks(
    layer: LayerAttention,
    q: Float[Tensor, "batch head q d_head"],
    k: Float[Tensor, "batch kv_head k d_head"],
    key_mask: Bool[Tensor, "batch k"] | None,
    block: int,
) -> Iterator[tuple[int, Float[Tensor, "batch head block k"]]]:
    """``(q_offset, pattern rows)`` for consecutive blocks of at most ``block`` queries (float32).

    Queries with no allowed key (padding of a bidirectional layer) get all-zero rows.  The rows
    of a block may live in a buffer the next block overwrites: reduce them (or copy them)
    before asking for the next block.
    """
    if block < 1:
        raise InputError(f"query_block must be at least 1, got {block}")
    n_q, n_k = q.shape[2], k.shape[2]
    k_full = repeat_kv(k.float().transpose(1, 2), q.shape[1] // k.shape[1]).transpose(1, 2)  # [b, head, k, d]
    k_t = k_full.transpose(-1, -2)
    b, h = q.shape[0], q.shape[1]
    # two buffers per call, reused block after block (equal sizes: no allocator churn): the
    # scores, turned into probabilities in place, and the full-width rows handed out
    work = torch.empty(b * h * min(block, n_q) * n_k, dtype=torch.float32, device=q.device)
    full: Tensor | None = None
    for q0 in range(0, n_q, block):
        qb = q[:, :, q0 : q0 + block].float()
        nb = qb.shape[2]
        # causal layers: keys after the block's last query are masked for every query of the
        # block, so they are neither scored nor normalised (their columns come back as zeros)
        n_used = min(n_k, q0 + nb) if layer.causal else n_k
        scores = work[: b * h * nb * n_used].view(b, h, nb, n_used)
        # the scale goes on the [block, d_head] queries, not on the [block, n] scores
        torch.matmul(qb * layer.scale, k_t[..., :n_used], out=scores)
        if layer.softcap is not None:
            scores.div_(layer.softcap).tanh_().mul_(layer.softcap)
        if layer.alibi is not None:
            scores.add_(position_bias(layer, nb, n_used, q_offset=q0, device=q.device)[None])
        ok = allowed_keys(layer, nb, n_k, q_offset=q0, device=q.device, key_mask=key_mask)
        ok = (ok if ok.dim() == 3 else ok[None])[..., :n_used]
        scores.masked_fill_(~ok[:, None], float("-inf"))
        # a numerically stable softmax in place: subtract the row maximum, exponentiate, normalise
        scores.sub_(scores.amax(dim=-1, keepdim=True)).exp_()
        scores.div_(scores.sum(dim=-1, keepdim=True))
        rows = ok.any(-1)  # [b, block]: queries with at least one allowed key (the others are NaN here)
        if not bool(rows.all()):
            scores.masked_fill_(~rows[:, None, :, None], 0.0)
        if n_used == n_k:
            yield q0, scores
            continue
        if full is None:
            full = scores.new_empty((b, h, block, n_k))
        rows_out = full[:, :, :nb]
        rows_out[..., :n_used].copy_(scores)
        rows_out[..., n_used:].zero_()
        yield q0, rows_out


# ----------------------------------------------------------------------------- backends


def _module(model: Any, layer: int) -> Any:
    return attention_core(model.bridge.blocks[layer].attn.original_component)


def _uses_interface(module: Any) -> bool:
    try:
        source = inspect.getsource(type(module).forward)
    except (OSError, TypeError) as exc:
        log.debug("no source for %s.forward (%s)", type(module).__qualname__, exc)
        return False
    return "ALL_ATTENTION_FUNCTIONS" in source and "_attn_implementation" in source and hasattr(module, "config")


def _backend(model: Any, layer: int) -> str:
    module = _module(model, layer)
    if type(module).__name__ in _NEO_CLASSES and callable(getattr(module, "_attn", None)):
        return "method"
    if _uses_interface(module):
        return "interface"
    spec = attention_spec(model)
    raise UnsupportedModelError(
        f"streaming attention on {spec.family}: layer {layer} ({type(module).__name__}) computes attention where headlens cannot reach it;"
        " use attention='eager'",
        family=spec.family,
    )


def check_streamable(model: Any) -> dict[int, str]:
    """Layer -> ``interface`` or ``method``; a one-line UnsupportedModelError for a family that cannot stream."""
    spec = attention_spec(model)
    spec.require_reconstruction("streaming attention")
    return {layer: _backend(model, layer) for layer in range(model.n_layers)}


def _key_mask_for(run: _Run, n_k: int, device: torch.device) -> Tensor:
    km = run.key_mask.to(device)
    return km[:, :n_k] if km.shape[1] >= n_k else torch.nn.functional.pad(km, (0, n_k - km.shape[1]), value=False)


def _after(run: _Run, layer: int, out: Tensor) -> Tensor:
    """Zero ablated heads of ``out`` ``[b, pos, head, d]`` (hook_z's layout); stop after the last layer."""
    run.calls.append(layer)
    heads = run.ablate.get(layer)
    if heads:
        out = out.clone()
        out[:, :, heads] = 0
    if run.stop_after is not None and layer >= run.stop_after:
        raise StopForward  # nothing after the last layer's attention is needed
    return out


def _blocked_output(run: _Run, la: LayerAttention, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Attention output ``[b, pos, head, d]`` from :func:`pattern_blocks` (softcap layers)."""
    v_full = repeat_kv(v.float().transpose(1, 2), la.group).transpose(1, 2)  # [b, head, k, d]
    parts = [torch.matmul(p, v_full) for _, p in pattern_blocks(la, q, k, _key_mask_for(run, k.shape[2], q.device), run.block)]
    return torch.cat(parts, dim=2).transpose(1, 2).to(v.dtype).contiguous()


def _streaming_attention(
    module: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    entry = _ACTIVE.get(id(module))
    if entry is None:  # pragma: no cover - a module outside the block under the switched config
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, softcap=softcap, **kwargs
        )
    layer, run = entry
    la = run.spec.layers[layer]
    if scaling is not None and float(scaling) != la.scale:  # e.g. OPT scales q in its projection and passes 1.0
        la = replace(la, scale=float(scaling))
    if kwargs.get("s_aux") is not None:
        raise UnsupportedModelError(
            f"streaming attention on {run.spec.family}: attention sinks (s_aux) are not reproduced", family=run.spec.family
        )
    run.on_layer(la, query, key, value)
    if la.softcap is not None:
        out = _blocked_output(run, la, query, key, value)
    else:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        kwargs.pop("sliding_window", None)
        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=scaling, **kwargs)
    return _after(run, layer, out), None


def _neo_attn(module: Any) -> Callable[..., tuple[Tensor, None]]:
    """``GPTNeoSelfAttention._attn``: the statistics callback, then SDPA with the module's mask (scale 1)."""

    def _attn(query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, None]:
        layer, run = _ACTIVE[id(module)]
        run.on_layer(replace(run.spec.layers[layer], scale=1.0), query, key, value)
        q_len, k_len = query.size(-2), key.size(-2)
        causal = module.bias[:, :, k_len - q_len : k_len, :k_len].to(query.device)
        mask = torch.zeros(causal.shape, dtype=torch.float32, device=query.device).masked_fill(~causal, torch.finfo(torch.float32).min)
        if attention_mask is not None:
            extra = (
                attention_mask
                if attention_mask.dtype != torch.bool
                else torch.zeros(attention_mask.shape, device=query.device).masked_fill(~attention_mask, torch.finfo(torch.float32).min)
            )
            mask = mask + extra[..., :k_len].float()
        out = torch.nn.functional.scaled_dot_product_attention(query.float(), key.float(), value.float(), attn_mask=mask, scale=1.0).to(
            value.dtype
        )
        out = _after(run, layer, out.transpose(1, 2)).transpose(1, 2)
        return out, None

    _attn.headlens_streaming = True  # type: ignore[attr-defined]
    return _attn


@contextmanager
def _set_attr(obj: Any, name: str, value: Any) -> Iterator[None]:
    saved = obj.__dict__.get(name, _MISSING)
    object.__setattr__(obj, name, value)
    try:
        yield
    finally:
        if saved is _MISSING:
            obj.__dict__.pop(name, None)
        else:
            object.__setattr__(obj, name, saved)


@contextmanager
def _active(run: _Run) -> Iterator[None]:
    keys = []
    try:
        for layer in range(run.model.n_layers):
            key = id(_module(run.model, layer))
            if key in _ACTIVE:
                raise InputError("streaming attention is already running on this model")
            _ACTIVE[key] = (layer, run)
            keys.append(key)
        yield
    finally:
        for key in keys:
            _ACTIVE.pop(key, None)


def streamed_forward(
    model: Any,
    tokens: Tensor,
    attention_mask: Tensor,
    on_layer: LayerCallback,
    *,
    block: int = 256,
    ablate: dict[int, list[int]] | None = None,
    stop_early: bool = True,
) -> None:
    """One forward of ``tokens`` with the model's SDPA attention; ``on_layer`` sees each layer's
    rotated q, k, v (``[b, head, n, d]``, KV heads not repeated).  ``ablate`` zeroes heads'
    outputs (as ``hook_z`` edits do); the pass stops after the last layer's attention unless
    ``stop_early`` is False.  Raises an error if a layer's attention was not reached."""
    backends = check_streamable(model)
    hf_attention.register(STREAMING_IMPLEMENTATION, _streaming_attention, "sdpa_mask")
    bridge = model.bridge
    run = _Run(model, on_layer, attention_mask.to(model.device).bool(), block, model.n_layers - 1 if stop_early else None, ablate or {})
    spec = attention_spec(model)
    configs: dict[int, Any] = {id(bridge.original_model.config): bridge.original_model.config}
    with ExitStack() as stack:
        for layer, backend in backends.items():
            module = _module(model, layer)
            comp = bridge.blocks[layer].attn
            if spec.layers[layer].native:  # the bridge recomputes attention: run the HF module instead
                stack.enter_context(_set_attr(comp, "forward", comp.original_component.forward))
            if backend == "method":
                stack.enter_context(_set_attr(module, "_attn", _neo_attn(module)))
            elif getattr(module, "config", None) is not None:
                configs[id(module.config)] = module.config
        stack.enter_context(hf_attention.switched(list(configs.values()), STREAMING_IMPLEMENTATION))
        stack.enter_context(_active(run))
        with stopping(), torch.inference_mode():
            bridge(tokens.to(model.device), return_type=None, attention_mask=attention_mask.to(model.device, torch.long))
    missing = sorted(set(range(model.n_layers)) - set(run.calls))
    if missing:
        raise UnsupportedModelError(
            f"streaming attention on {spec.family}: layers {missing} never reached headlens' attention function; use attention='eager'",
            family=spec.family,
        )
