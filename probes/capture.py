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

from probes.config import CAPTURABLE, CaptureConfig
from probes.errors import InputError
from probes.hooks import attached
from probes.loading import LoadedModel, check_layers_heads
from probes.prompts import TokenBatch, iter_batches, tokenize_prompts

__all__ = ["Capture", "capture", "hook_name", "tokenize_for", "run_forward"]

_PER_POSITION = {"q", "k", "v", "z"}  # [batch, pos, head, d_head]
_PER_PAIR = {"pattern", "attn_scores"}  # [batch, head, q, k]


def hook_name(layer: int, what: str) -> str:
    """TransformerLens hook name for ``what`` (``q``, ``pattern``...) in ``layer``."""
    if what not in CAPTURABLE:
        raise InputError(f"cannot capture {what!r}: choose from {', '.join(CAPTURABLE)}", what=what)
    return f"blocks.{layer}.attn.{CAPTURABLE[what]}"


@dataclass
class Capture:
    """Captured tensors keyed by hook name, in TransformerLens dimension order.

    q, k, v, z: ``[prompt, pos, head, d_head]``; pattern, attn_scores:
    ``[prompt, head, query_pos, key_pos]``.  ``head`` indexes ``heads[layer]`` (all
    heads by default).  Prompts are right-padded with zeros to the longest; real
    lengths are ``batch.lengths``.
    """

    tensors: dict[str, Tensor]
    batch: TokenBatch
    heads: dict[int, list[int]]
    what: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)

    def get(self, layer: int, what: str) -> Tensor:
        return self.tensors[hook_name(layer, what)]

    @property
    def lengths(self) -> Tensor:
        return self.batch.lengths


def tokenize_for(model: LoadedModel, prompts: Sequence[str], *, prepend_bos: bool, truncate: bool = False) -> TokenBatch:
    return tokenize_prompts(model.tokenizer, prompts, prepend_bos=prepend_bos, n_ctx=model.n_ctx, truncate=truncate)


class _StopForward(Exception):
    """Raised by a hook to end a forward pass once everything needed has been seen."""


def _stop(act: Tensor, hook: Any = None) -> None:
    raise _StopForward


def run_forward(
    model: LoadedModel,
    tokens: Tensor,
    *,
    stop_at_layer: int | None = None,
    return_type: str | None = None,
    stop_after: str | None = None,
) -> Any:
    """One forward pass of the bridge on ``tokens``.

    With ``return_type=None`` the pass ends right after hook point ``stop_after`` (default:
    the residual stream after block ``stop_at_layer - 1``, itself defaulting to the last
    block): the bridge computes the unembedding even when no logits are asked for and even
    with ``stop_at_layer == n_layers``, so a hook attached after the caller's hooks ends the
    pass once everything needed has been seen.  The unembedding is the largest single cost
    for a 50k vocabulary.
    """
    tokens = tokens.to(model.device)
    if return_type is None:
        last = model.n_layers if stop_at_layer is None else min(stop_at_layer, model.n_layers)
        point = stop_after or f"blocks.{last - 1}.hook_resid_post"
        try:
            with attached(model.bridge, [(point, _stop)]):
                model.bridge(tokens, return_type=None)
        except _StopForward:
            pass
        return None
    kwargs: dict[str, Any] = {"return_type": return_type}
    if stop_at_layer is not None and stop_at_layer < model.n_layers:
        kwargs["stop_at_layer"] = stop_at_layer
    return model.bridge(tokens, **kwargs)


class _Writer:
    """Hook that copies selected heads of one activation into rows of an output tensor."""

    def __init__(self, out: Tensor, what: str, heads: list[int], all_heads: bool) -> None:
        self.out = out
        self.what = what
        self.heads = heads
        self.all_heads = all_heads
        self.rows: list[int] = []
        self.mask: Tensor | None = None  # [batch, pos] on the model's device

    def __call__(self, act: Tensor, hook: Any = None) -> None:
        act = act.detach()
        mask = self.mask
        assert mask is not None  # set before every forward by capture()
        width = act.shape[1] if self.what in _PER_POSITION else act.shape[2]
        if self.what in _PER_POSITION:
            sel = act if self.all_heads else act[:, :, self.heads]
            sel = sel * mask[:, :, None, None].to(sel.dtype)
            self.out[self.rows, :width] = sel.to(self.out.device)
        else:
            sel = act if self.all_heads else act[:, self.heads]
            pair = mask[:, :, None] & mask[:, None, :]  # [batch, q, k]
            sel = torch.where(pair[:, None], sel, torch.zeros((), dtype=sel.dtype, device=sel.device))
            self.out[self.rows, :, :width, :width] = sel.to(self.out.device)


def capture(
    model: LoadedModel,
    prompts: Sequence[str] | TokenBatch,
    config: CaptureConfig | None = None,
    *,
    out_device: str | torch.device = "cpu",
    progress: Any = None,
) -> Capture:
    """Run ``prompts`` through the model in batches and keep only what ``config`` asks for.

    ``progress``, when given, is called as ``progress(done, total)`` after each batch.
    """
    config = config or CaptureConfig()
    unknown = [w for w in config.what if w not in CAPTURABLE]
    if unknown or not config.what:
        raise InputError(f"cannot capture {', '.join(unknown) or 'nothing'}: choose from {', '.join(CAPTURABLE)}", what=config.what)
    heads = check_layers_heads(model, config.layers, config.heads)
    if isinstance(prompts, TokenBatch):
        batch = prompts
    else:
        batch = tokenize_for(model, prompts, prepend_bos=config.prepend_bos, truncate=config.truncate)
    n, width = batch.tokens.shape
    dtype = model.dtype
    tensors: dict[str, Tensor] = {}
    writers: list[tuple[str, _Writer]] = []
    for layer, hs in heads.items():
        for what in config.what:
            if what in _PER_POSITION:
                shape: tuple[int, ...] = (n, width, len(hs), model.d_head)
            else:
                shape = (n, len(hs), width, width)
            name = hook_name(layer, what)
            tensors[name] = torch.zeros(shape, dtype=dtype, device=out_device)
            writers.append((name, _Writer(tensors[name], what, hs, len(hs) == model.n_heads)))
    last_layer = max(heads) + 1
    chunks = iter_batches(batch, config.batch_size)
    with torch.inference_mode(), attached(model.bridge, writers):
        for done, (rows, sub) in enumerate(chunks, start=1):
            mask = sub.mask.to(model.device)
            for _, w in writers:
                w.rows, w.mask = rows, mask
            run_forward(model, sub.tokens, stop_at_layer=last_layer)
            if progress is not None:
                progress(done, len(chunks))
    return Capture(tensors=tensors, batch=batch, heads=heads, what=tuple(config.what))
