"""Run only the blocks from layer ``L`` on, from a stored residual stream, to the logits.

The cut itself is :func:`headlens.probes.engine_forward.from_layer` (blocks before ``L`` never
run); the final norm, unembedding and anything else the model does after its blocks run as
usual.

:func:`check_from_layer` compares one such run against a full forward; callers fall back to
full forwards when it does not reproduce the logits (an architecture whose forward indexes
its layers by position, say).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.probes.engine_forward import from_layer, resid_hook_name, resid_injection
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

__all__ = ["from_layer", "run_from_layer", "check_from_layer", "resid_hook_name"]

log = logging.getLogger(__name__)


def run_from_layer(
    model: LoadedModel,
    tokens: Int[Tensor, "batch pos"],
    resid: Float[Tensor, "batch pos d_model"],
    layer: int,
    hooks: Sequence[tuple[str, HookFn]] = (),
    **kwargs: Any,
) -> Float[Tensor, "batch pos vocab"]:
    """Logits of the model continued from ``resid`` (the stream entering block ``layer``).

    ``tokens`` only set the shape (their embeddings are replaced); ``hooks`` are attached
    for the run (hooks on layers before ``layer`` never fire); ``kwargs`` go to the bridge.
    """
    with from_layer(model, layer), attached(model.bridge, [resid_injection(layer, resid), *hooks]):
        return model.bridge(tokens.to(model.device), return_type="logits", **kwargs)


def check_from_layer(
    model: LoadedModel, tokens: Int[Tensor, "batch pos"], layers: int | Sequence[int], *, atol: float = 1e-5, **kwargs: Any
) -> bool:
    """True when continuing from each block in ``layers`` reproduces a full forward's logits
    (``kwargs``, e.g. ``attention_mask``, go to every forward).  Every block a caller will start
    from must be checked: a model that picks each layer's mask by its position in the loop
    (sliding and full layers alternating) goes wrong at some cuts and not at others.  ``tokens``
    should be the longest input the caller runs (a window longer than the sliding one shows it)."""
    layers = [layers] if isinstance(layers, int) else sorted(set(layers))
    store: dict[int, Tensor] = {}

    def keep(layer: int) -> HookFn:
        def fn(act: Tensor, hook: Any = None) -> None:
            store[layer] = act.detach().clone()

        return fn

    try:
        with torch.inference_mode():
            with attached(model.bridge, [(resid_hook_name(layer), keep(layer)) for layer in layers]):
                full = model.bridge(tokens.to(model.device), return_type="logits", **kwargs)
            scale = max(1.0, float(full.abs().max()))
            for layer in layers:
                part = run_from_layer(model, tokens, store[layer], layer, **kwargs)
                if not (part.shape == full.shape and float((part - full).abs().max()) <= atol * scale):
                    log.info("a forward continued from block %d does not reproduce the full forward: the whole model runs instead", layer)
                    return False
    except (NotImplementedError, RuntimeError, ValueError, KeyError) as exc:
        log.info("cannot continue a forward from a later block (%s: %s): the whole model runs instead", type(exc).__name__, exc)
        return False
    return True
