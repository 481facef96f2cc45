"""What the steps of one ``headlens demo run`` hand each other inside the process: the loaded model
(loaded by the first step that needs it, reused by every later step that asks for the same model with
the same loading flags) and the census of ``classify`` (which ``report`` reuses when its census stage's
settings equal it).  Scoped to the ``demo run`` invocation's click context (``ctx.meta``): no global
cache; a command run on its own finds nothing shared and loads as always."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from headlens.reports.cli.common import load as load_model_of_flags

if TYPE_CHECKING:
    from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["Shared", "sharing", "shared", "load", "reuse"]

_META_KEY = "headlens.shared"


@dataclass
class Shared:
    """The models loaded so far (by their loading flags) and the last census ``classify`` computed."""

    models: dict[tuple[Any, ...], LoadedModel] = field(default_factory=dict)
    census: tuple[Any, Any] | None = None  # (LoadedModel, CensusResult) of the last classify
    loads: int = 0


@contextmanager
def sharing(ctx: click.Context) -> Iterator[Shared]:
    """For the block, commands invoked under ``ctx`` share loaded models and the census."""
    box = Shared()
    ctx.meta[_META_KEY] = box
    try:
        yield box
    finally:
        ctx.meta.pop(_META_KEY, None)


def shared() -> Shared | None:
    """The running ``demo run``'s :class:`Shared`, None for a command run on its own."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_META_KEY)


def _key(model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool) -> tuple[Any, ...]:
    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    return (model, device, dtype, revision, bool(allow_new_weights), params.get("device_map"), params.get("max_memory"))


def load(
    model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False, *, seed: int | None = None
) -> LoadedModel:
    """:func:`headlens.reports.cli.common.load`, reusing the model an earlier step of the same
    ``demo run`` loaded with the same flags (torch is seeded with ``seed`` as a fresh load would)."""
    box = shared()
    key = _key(model, device, dtype, revision, allow_new_weights)
    if box is not None and key in box.models:
        if seed is not None:
            import torch

            torch.manual_seed(seed)
        log.info("reusing the loaded model %s", model)
        return box.models[key]
    loaded = load_model_of_flags(model, device, dtype, revision, allow_new_weights, seed=seed)
    if box is not None:
        box.models[key] = loaded
        box.loads += 1
    return loaded


def reuse(model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False) -> LoadedModel | None:
    """The model an earlier step of the same ``demo run`` loaded with these flags, else None (load it yourself)."""
    box = shared()
    return None if box is None else box.models.get(_key(model, device, dtype, revision, allow_new_weights))
