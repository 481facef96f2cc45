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

from headlens.probes.engine_forward import from_layer, resid_hook_name
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

    def inject(act: Tensor, hook: Any = None) -> Tensor:
        return resid.to(act.dtype)

    with from_layer(model, layer), attached(model.bridge, [(resid_hook_name(layer), inject), *hooks]):
        return model.bridge(tokens.to(model.device), return_type="logits", **kwargs)


def check_from_layer(model: LoadedModel, tokens: Int[Tensor, "batch pos"], layer: int, *, atol: float = 1e-5, **kwargs: Any) -> bool:
    """True when continuing from block ``layer`` reproduces a full forward's logits
    (``kwargs``, e.g. ``attention_mask``, go to both forwards)."""
    store: dict[str, Tensor] = {}

    def keep(act: Tensor, hook: Any = None) -> None:
        store["resid"] = act.detach().clone()

    try:
        with torch.inference_mode():
            with attached(model.bridge, [(resid_hook_name(layer), keep)]):
                full = model.bridge(tokens.to(model.device), return_type="logits", **kwargs)
            part = run_from_layer(model, tokens, store["resid"], layer, **kwargs)
    except (NotImplementedError, RuntimeError, ValueError, KeyError) as exc:
        log.debug("cannot continue a forward from block %d (%s: %s): every ablation runs the whole model", layer, type(exc).__name__, exc)
        return False
    scale = max(1.0, float(full.abs().max()))
    same = bool(part.shape == full.shape and float((part - full).abs().max()) <= atol * scale)
    if not same:
        log.debug("a forward continued from block %d does not reproduce the full forward: every ablation runs the whole model", layer)
    return same
