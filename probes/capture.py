"""Hook-based capture of per-head Q, K, V, attention scores, patterns and z.

Only the hook points asked for are hooked; each hook copies the heads asked for into a
preallocated tensor, with padded positions zeroed, so no activation cache is ever built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from headlens.probes.attention import attention_spec, rotate
from headlens.probes.config import CAPTURABLE, CaptureConfig
from headlens.probes.errors import InputError, UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.patch import patched_forward
from headlens.probes.progress import Progress
from headlens.probes.prompts import TokenBatch, iter_batches, tokenize_prompts

__all__ = ["Capture", "capture", "hook_name", "padded_width", "tokenize_for", "run_forward"]

_PER_POSITION = {"q", "k", "v", "z", "rot_q", "rot_k"}  # [batch, pos, head, d_head]
_PER_PAIR = {"pattern", "attn_scores"}  # [batch, head, q, k]
_KV = {"k", "v", "rot_k"}  # KV heads under grouped-query attention


def hook_name(layer: int, what: str) -> str:
    """TransformerLens hook name for ``what`` (``q``, ``pattern``...) in ``layer``.

    ``rot_q``/``rot_k`` are named ``hook_rot_q``/``hook_rot_k`` even in families where
    headlens computes them (see :class:`~headlens.probes.config.CaptureConfig`).
    """
    if what not in CAPTURABLE:
        raise InputError(f"cannot capture {what!r}: choose from {', '.join(CAPTURABLE)}", what=what)
    return f"blocks.{layer}.attn.{CAPTURABLE[what]}"


def padded_width(what: str, tensor: Tensor) -> int:
    """The padded width of the batch a captured ``what`` was taken on: its position axis
    (``[prompt, pos, head, d_head]``) or, for pattern and attn_scores, its key axis."""
    return int(tensor.shape[1] if what in _PER_POSITION else tensor.shape[-1])


@dataclass
class Capture:
    """Captured tensors keyed by hook name, in TransformerLens dimension order.

    q, rot_q, z: ``[prompt, pos, head, d_head]`` with ``head`` indexing ``heads[layer]``;
    k, v, rot_k: ``[prompt, pos, kv_head, d_head]`` with ``kv_head`` indexing
    ``kv_heads[layer]`` (equal to ``heads`` without grouped-query attention, or with
    ``kv_per_query_head``); pattern, attn_scores: ``[prompt, head, query_pos, key_pos]``.
    Prompts are right-padded with zeros to the longest; real lengths are ``batch.lengths``.
    Padded positions are zero, except that a pattern row of a real query keeps its padded
    keys (zero, since every forward passes the padding mask).  ``batch`` also says which
    real positions are the framing's special tokens (``n_prefix``/``n_suffix``).
    ``info`` holds what the manifest needs: KV-head counts and maps, where rot_q/rot_k came from.
    """

    tensors: dict[str, Tensor]
    batch: TokenBatch
    heads: dict[int, list[int]]
    what: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)
    kv_heads: dict[int, list[int]] = field(default_factory=dict)

    def get(self, layer: int, what: str) -> Tensor:
        return self.tensors[hook_name(layer, what)]

    @property
    def lengths(self) -> Tensor:
        return self.batch.lengths


def tokenize_for(
    model: LoadedModel, prompts: Sequence[str], *, prepend_bos: bool, truncate: bool = False, n_ctx: int | None = None
) -> TokenBatch:
    """``prompts`` as the model expects them: each wrapped in :meth:`LoadedModel.frame`, right-padded.

    Decoders: ``[BOS] text`` (``text`` alone with ``prepend_bos=False``); encoders (BERT):
    ``[CLS] text [SEP]`` (``text`` alone with ``prepend_bos=False``, the CLI's ``--no-bos``).
    ``n_ctx`` (default: the model's context) caps the length, framing included; ``truncate``
    cuts the text, never the framing.
    """
    return tokenize_prompts(
        model.tokenizer,
        prompts,
        prepend_bos=prepend_bos,
        n_ctx=model.n_ctx if n_ctx is None else n_ctx,
        truncate=truncate,
        frame=model.frame(prepend_bos),
    )


def run_forward(
    model: LoadedModel,
    tokens: Tensor | TokenBatch,
    *,
    attention_mask: Tensor | None = None,
    stop_at_layer: int | None = None,
    return_type: str | None = None,
    stop_after: str | None = None,
    **kwargs: Any,
) -> Any:
    """One forward pass of the bridge on ``tokens``, with padding masked out.

    ``tokens`` is a ``[batch, pos]`` tensor or a :class:`~headlens.probes.prompts.TokenBatch`
    (whose :attr:`~headlens.probes.prompts.TokenBatch.attention_mask` is then used unless one is
    given).  ``attention_mask`` (0/1 ``[batch, pos]``, 1 on real tokens) reaches Hugging
    Face's attention in every family: no real token attends to a padded key (a
    bidirectional encoder would otherwise), and on right-padded causal models the real
    positions are unchanged.  Other ``kwargs`` go to the bridge.

    With ``return_type=None`` the pass ends right after hook point ``stop_after`` (default:
    the residual stream after block ``stop_at_layer - 1``, itself defaulting to the last
    block): the bridge computes the unembedding even when no logits are asked for and even
    with ``stop_at_layer == n_layers``, so a hook attached after the caller's hooks ends the
    pass once everything needed has been seen.  The unembedding is the largest single cost
    for a 50k vocabulary.
    """
    if isinstance(tokens, TokenBatch):
        if attention_mask is None:
            attention_mask = tokens.attention_mask
        tokens = tokens.tokens
    tokens = tokens.to(model.device)
    if attention_mask is not None:
        if tuple(attention_mask.shape) != tuple(tokens.shape):
            raise ValueError(f"attention_mask {tuple(attention_mask.shape)} does not match tokens {tuple(tokens.shape)}")
        kwargs["attention_mask"] = attention_mask.to(device=model.device, dtype=torch.long)
    if return_type is None:
        last = model.n_layers if stop_at_layer is None else min(stop_at_layer, model.n_layers)
        patched_forward(model, tokens, stop_after=stop_after or f"blocks.{last - 1}.hook_resid_post", **kwargs)
        return None
    kwargs["return_type"] = return_type
    if stop_at_layer is not None and stop_at_layer < model.n_layers:
        kwargs["stop_at_layer"] = stop_at_layer
    return model.bridge(tokens, **kwargs)


class _Writer:
    """Hook that copies selected heads of one activation into rows of an output tensor.

    ``transform`` (optional) maps the hooked activation first (the rotation of q or k in
    families whose bridge has no ``hook_rot_*``); ``deferred`` writers wait for the
    layer's ``hook_cos``/``hook_sin`` (GPT-NeoX), which fire after ``hook_q``/``hook_k``.
    """

    def __init__(self, out: Tensor, what: str, index: list[int], all_heads: bool, transform: Any = None, deferred: bool = False) -> None:
        self.out = out
        self.what = what
        self.index = index
        self.all_heads = all_heads
        self.transform = transform
        self.deferred = deferred
        self.pending: Tensor | None = None
        self.rows: list[int] = []
        self.mask: Tensor | None = None  # [batch, pos]; moved to each activation's device
        self.writes = 0  # a writer that never writes would leave zeros: capture() checks this

    def __call__(self, act: Tensor, hook: Any = None) -> None:
        act = act.detach()
        if self.deferred:
            self.pending = act
            return
        self.write(act)

    def flush(self) -> None:
        if self.pending is not None:
            act, self.pending = self.pending, None
            self.write(act)

    def write(self, act: Tensor) -> None:
        mask = self.mask
        if mask is None:
            raise RuntimeError("capture writer used outside capture()")
        mask = mask.to(act.device)  # layers may sit on different devices (device_map)
        if self.transform is not None:
            act = self.transform(act)
        self.writes += 1
        width = act.shape[1] if self.what in _PER_POSITION else act.shape[2]
        if self.what in _PER_POSITION:
            sel = act if self.all_heads else act[:, :, self.index]
            sel = sel * mask[:, :, None, None].to(sel.dtype)
            self.out[self.rows, :width] = sel.to(device=self.out.device, dtype=self.out.dtype)
        else:
            sel = act if self.all_heads else act[:, self.index]
            # Padded queries are zeroed.  A pattern keeps every key of a real query, padded
            # keys included (0 when the mask reached the attention; verify checks that);
            # scores at padded keys are the mask's fill value and are zeroed too.
            keep = mask[:, :, None] & (
                mask[:, None, :] if self.what == "attn_scores" else torch.ones_like(mask[:, None, :])
            )  # [batch, q, k]
            sel = torch.where(keep[:, None], sel, torch.zeros((), dtype=sel.dtype, device=sel.device))
            self.out[self.rows, :, :width, :width] = sel.to(device=self.out.device, dtype=self.out.dtype)


class _Recorder:
    """Hook that keeps the latest activation (GPT-NeoX's per-layer cos/sin)."""

    def __init__(self) -> None:
        self.value: Tensor | None = None

    def __call__(self, act: Tensor, hook: Any = None) -> None:
        self.value = act.detach()


def _plan(
    model: LoadedModel, layer: int, what: str, hs: list[int], kv_index: list[int]
) -> tuple[str, list[int], bool, Any, dict[int, _Recorder], str]:
    """Where ``what`` of ``layer`` is read from: (hook, head index, all heads?, transform, recorders, source note).

    ``hs`` are the chosen query heads, ``kv_index`` the KV-head columns kept for k, v, rot_k.
    """
    spec = attention_spec(model)
    la = spec.layers[layer]
    index = kv_index if what in _KV else hs
    all_heads = index == list(range(la.n_kv_heads if what in _KV else la.n_heads))
    if what == "attn_scores" and not la.native:
        raise UnsupportedModelError(
            f"cannot capture attn_scores on {spec.family}: its attention runs inside Hugging Face and the bridge's"
            " hook_attn_scores fires afterwards with the softmax output, not the scores; capture rot_q,rot_k (see verify) instead",
            family=spec.family,
        )
    if what not in ("rot_q", "rot_k"):
        return hook_name(layer, what), index, all_heads, None, {}, CAPTURABLE[what]
    base = "q" if what == "rot_q" else "k"
    if la.rotary == "hooks":
        return hook_name(layer, what), index, all_heads, None, {}, CAPTURABLE[what]
    if la.rotary == "none":
        return hook_name(layer, base), index, all_heads, None, {}, f"hook_{base} ({spec.family} has no rotary embedding)"
    if la.rotary == "gptj":
        return (
            hook_name(layer, base),
            index,
            all_heads,
            lambda x: rotate(la, x),
            {},
            f"hook_{base} rotated by headlens (GPT-J rotate-every-two on the first {la.rotary_dim} of {la.d_head} dims)",
        )
    if la.rotary == "neox":
        rec = {0: _Recorder(), 1: _Recorder()}
        return (
            hook_name(layer, base),
            index,
            all_heads,
            lambda x: rotate(la, x, cos=rec[0].value, sin=rec[1].value),
            rec,
            f"hook_{base} rotated by headlens (rotate-half on the first {la.rotary_dim} of {la.d_head} dims, cos/sin from "
            "hook_cos/hook_sin)",
        )
    raise UnsupportedModelError(f"cannot capture {what} on {spec.family}: unknown rotary embedding", family=spec.family)


def _check_written(writers: list[_Writer], hooks: list[tuple[str, Any]], family: str) -> None:
    """Refuse a capture whose hook never fired in the forward (it would be left as zeros), then reset the counts."""
    points = {id(fn): point for point, fn in hooks}
    silent = [points[id(w)] for w in writers if w.writes == 0]
    if silent:
        raise UnsupportedModelError(
            f"capture on {family}: the bridge never fired {silent[0]} (of {len(silent)} hooks): nothing to capture there", family=family
        )
    for w in writers:
        w.writes = 0


def capture(
    model: LoadedModel,
    prompts: Sequence[str] | TokenBatch,
    config: CaptureConfig | None = None,
    *,
    out_device: str | torch.device = "cpu",
    progress: Progress | None = None,
) -> Capture:
    """Run ``prompts`` through the model in batches and keep only what ``config`` asks for.

    ``progress``, when given, is called as ``progress("capture", done, total)`` after each batch.
    """
    config = config or CaptureConfig()
    unknown = [w for w in config.what if w not in CAPTURABLE]
    if unknown or not config.what:
        raise InputError(f"cannot capture {', '.join(unknown) or 'nothing'}: choose from {', '.join(CAPTURABLE)}", what=config.what)
    heads = check_layers_heads(model, config.layers, config.heads)
    spec = attention_spec(model)
    # k, v, rot_k columns: the KV heads the chosen query heads read, or one per query head.
    kv_cols = {
        layer: [spec.layers[layer].kv_head(h) for h in hs]
        if config.kv_per_query_head
        else sorted({spec.layers[layer].kv_head(h) for h in hs})
        for layer, hs in heads.items()
    }
    if isinstance(prompts, TokenBatch):
        batch = prompts
    else:
        batch = tokenize_for(model, prompts, prepend_bos=config.prepend_bos, truncate=config.truncate)
    n, width = batch.tokens.shape
    dtype = model.dtype
    tensors: dict[str, Tensor] = {}
    writers: list[_Writer] = []
    hooks: list[tuple[str, Any]] = []
    sources: dict[str, str] = {}
    for layer, hs in heads.items():
        for what in config.what:
            point, index, all_heads, transform, recorders, source = _plan(model, layer, what, hs, kv_cols[layer])
            sources.setdefault(what, source.replace(f"blocks.{layer}.", ""))
            if what in _PER_POSITION:
                shape: tuple[int, ...] = (n, width, len(index), spec.layers[layer].d_head)
            else:
                shape = (n, len(index), width, width)
            name = hook_name(layer, what)
            tensors[name] = torch.zeros(shape, dtype=dtype, device=out_device)
            writer = _Writer(tensors[name], what, index, all_heads, transform, deferred=bool(recorders))
            writers.append(writer)
            hooks.append((point, writer))
            for i, rec in recorders.items():
                hooks.append((f"blocks.{layer}.attn.{('hook_cos', 'hook_sin')[i]}", rec))
    last_layer = max(heads) + 1
    chunks = iter_batches(batch, config.batch_size)
    with torch.inference_mode(), attached(model.bridge, hooks):
        for done, (rows, sub) in enumerate(chunks, start=1):
            mask = sub.mask.to(model.device)
            for w in writers:
                w.rows, w.mask = rows, mask
            run_forward(model, sub.tokens, attention_mask=sub.attention_mask, stop_at_layer=last_layer)
            for w in writers:
                w.flush()
            _check_written(writers, hooks, spec.family)
            if progress is not None:
                progress("capture", done, len(chunks))
    info = {
        "family": spec.family,
        "n_heads": spec.layers[0].n_heads,
        "n_kv_heads": spec.n_kv_heads,
        "kv_map": {str(h): kv for h, kv in spec.kv_map().items()},
        "kv_per_query_head": config.kv_per_query_head,
        "sources": sources,
    }
    return Capture(tensors=tensors, batch=batch, heads=heads, what=tuple(config.what), info=info, kv_heads=kv_cols)
