"""The stopped forward pass every sink statistic runs on, and the masks it needs.

* :func:`run_to_last_pattern`: one forward pass with hooks attached that ends right after the
  last layer's attention pattern (no last-layer MLP, no unembedding).  Every forward passes
  the batch's attention mask (padding is never attended to).
* :func:`batch_attention_mask`: the 0/1 ``[prompt, pos]`` mask of a :class:`TokenBatch`.
* :func:`layer_causal`: per layer, causal or bidirectional (an encoder's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import inspect
import logging

import torch
from torch import Tensor

from headlens.probes.attention import attention_spec
from headlens.probes.capture import run_forward
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch

__all__ = ["run_to_last_pattern", "layer_causal", "batch_attention_mask"]

log = logging.getLogger(__name__)


def layer_causal(model: LoadedModel) -> tuple[bool, ...]:
    """Per layer: True for causal attention, False for bidirectional (every query sees every
    real key): a layer the attention spec marks non-causal, or any layer of an encoder."""
    encoder = bool(getattr(model, "is_encoder", False))
    return tuple(bool(getattr(layer, "causal", True)) and not encoder for layer in attention_spec(model).layers)


def batch_attention_mask(batch: TokenBatch) -> Tensor:
    """0/1 ``[prompt, pos]``: 1 on real tokens (``TokenBatch.attention_mask`` where it exists)."""
    mask = getattr(batch, "attention_mask", None)
    if isinstance(mask, Tensor):
        return mask
    return batch.mask.long()


class _Stop(Exception):
    pass


def _stop(act: Tensor, hook: Any = None) -> None:
    raise _Stop


def _forward_takes_mask() -> bool:
    try:
        return "attention_mask" in inspect.signature(run_forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def run_to_last_pattern(model: LoadedModel, tokens: Tensor, hooks: list[tuple[str, Callable[..., Any]]], attention_mask: Tensor | None = None) -> None:
    """One forward pass with ``hooks`` attached that stops right after the last layer's attention pattern.

    The bridge's ``stop_at_layer`` can only stop *before* a block, and ``stop_at_layer=n_layers``
    still runs the whole model and its unembedding (the logits are computed whatever the
    ``return_type``); a statistic of attention patterns needs neither the last layer's
    ``z``/output projection/MLP nor the unembedding, so :func:`headlens.probes.capture.run_forward`
    ends the pass after the last ``hook_pattern`` (its stop hook is attached after ``hooks``,
    so it runs after them).  ``attention_mask`` (0/1 ``[batch, pos]``) keeps padding out of
    every query's attention (an encoder would attend to it otherwise).
    """
    stop = f"blocks.{model.n_layers - 1}.attn.hook_pattern"
    with attached(model.bridge, hooks):
        if attention_mask is None:
            run_forward(model, tokens, stop_after=stop)
        elif _forward_takes_mask():
            run_forward(model, tokens, stop_after=stop, attention_mask=attention_mask)
        else:  # a run_forward without masks: the same stopped pass, with the mask, here
            try:
                with attached(model.bridge, [(stop, _stop)]):
                    model.bridge(tokens.to(model.device), return_type=None, attention_mask=attention_mask.to(model.device, torch.long))
            except _Stop:
                pass
