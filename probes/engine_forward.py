"""Forwards that run part of the model: the one early stop and the one late start.

**Early stop**: a hook raises :class:`StopForward`.

The bridge computes the unembedding even when no logits are asked for (and ``stop_at_layer``
can only stop *before* a block), so a pass that needs only what happens up to some hook point
(the last layer's attention pattern, a hidden state, a receiver's input) attaches
:func:`stop_hook` there, after its own hooks, and :func:`forward_until` catches the exception.
Every early stop in the package raises this one exception (``tests/probes/test_engine_rules.py``
scans the source for another).

**Late start**: TransformerBridge's ``start_at_layer`` still executes blocks ``0..L-1`` (it
discards their output), so it saves nothing.  Inside :func:`from_layer` the model's block list is
cut to ``blocks[L:]``; a hook on ``blocks.L.hook_resid_pre`` (:func:`resid_hook_name`) then swaps
a stored residual stream in for the embeddings, so blocks before ``L`` never run.  The list is
restored on exit, also after an exception; so is the Hugging Face config's ``layer_types`` (cut
alike), which models with sliding and full layers index by the loop's position.  Callers check that a continued forward
reproduces a full one (:func:`headlens.analyses.ablation.suffix.check_from_layer`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from headlens.probes.hooks import attached

__all__ = ["StopForward", "stop_hook", "stopping", "forward_until", "from_layer", "resid_hook_name", "resid_injection"]

log = logging.getLogger(__name__)


class StopForward(Exception):
    """Raised from a hook once everything a pass needs has been seen; caught by :func:`stopping`."""


def stop_hook(act: Tensor, hook: Any = None) -> None:
    """A hook that ends the forward pass."""
    raise StopForward


@contextmanager
def stopping() -> Iterator[None]:
    """Catch :class:`StopForward` raised inside the ``with`` block (the pass ended early on purpose)."""
    try:
        yield
    except StopForward:
        log.debug("forward pass stopped early")


def forward_until(
    model: Any,
    tokens: Tensor,
    *,
    stop_after: str,
    hooks: Sequence[tuple[str, Callable[..., Any]]] = (),
    attention_mask: Tensor | None = None,
    **kwargs: Any,
) -> None:
    """One forward of ``tokens`` with ``hooks`` attached that ends right after hook point ``stop_after``
    (the stop hook is attached after ``hooks``, so they run first).  ``attention_mask`` (0/1
    ``[batch, pos]``) keeps padding out of every query's attention; other ``kwargs`` go to the bridge."""
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask.to(device=model.device, dtype=torch.long)
    with stopping(), attached(model.bridge, [*hooks, (stop_after, stop_hook)]):
        model.bridge(tokens.to(model.device), return_type=None, **kwargs)


def resid_hook_name(layer: int) -> str:
    """The hook point of the residual stream entering block ``layer``."""
    return f"blocks.{layer}.hook_resid_pre"


def resid_injection(layer: int, resid: Tensor) -> tuple[str, Callable[..., Tensor]]:
    """The hook that swaps ``resid`` ``[batch, pos, d_model]`` in for the stream entering block
    ``layer`` (on the activation's device and dtype): with :func:`from_layer`, the late start."""

    def inject(act: Tensor, hook: Any = None) -> Tensor:
        return resid.to(device=act.device, dtype=act.dtype)

    return resid_hook_name(layer), inject


def _block_list(model: Any) -> torch.nn.ModuleList:
    blocks = getattr(model.bridge, "blocks", None)
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) != model.n_layers:
        raise NotImplementedError("this model has no standard 'blocks' list")
    return blocks


@contextmanager
def from_layer(model: Any, layer: int) -> Iterator[None]:
    """Inside the block, the model's forward runs blocks ``layer..n_layers-1`` only."""
    if layer == 0:
        yield
        return
    blocks = _block_list(model)
    saved = blocks._modules
    kept = list(saved.values())[layer:]
    blocks._modules = OrderedDict((str(i), m) for i, m in enumerate(kept))
    try:
        with _layer_types_from(model, layer, len(saved)):
            yield
    finally:
        blocks._modules = saved


@contextmanager
def _layer_types_from(model: Any, layer: int, n_layers: int) -> Iterator[None]:
    """A model that picks each layer's mask by its place in the loop (``config.layer_types[i]``:
    sliding and full layers) sees the cut list's types inside the block."""
    config: Any = getattr(getattr(model.bridge, "original_model", None), "config", None)
    types = getattr(config, "layer_types", None)
    if not (isinstance(types, list) and len(types) == n_layers):
        yield
        return
    config.layer_types = types[layer:]
    try:
        yield
    finally:
        config.layer_types = types
