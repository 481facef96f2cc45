"""Headlens' attention functions inside Hugging Face models: registration and the switch.

transformers picks each attention module's function by name (``config._attn_implementation``
looked up in ``AttentionInterface``, with a mask builder from ``AttentionMaskInterface``).
:func:`register` adds one of headlens' functions under its own name, once per process;
:func:`switched` sets the configs of a model to that name for a ``with`` block and restores
exactly what was there, normal exit or exception.  Used by score edits
(:mod:`headlens.probes.interventions`) and streaming statistics (:mod:`headlens.probes.streaming`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["register", "switched"]

log = logging.getLogger(__name__)

#: Names already registered in this process (registration is global to transformers).
_REGISTERED: set[str] = set()
_MISSING = object()


def register(name: str, function: Callable[..., Any], mask: str) -> None:
    """Register ``function`` under ``name`` with transformers' mask builder ``mask`` (``"eager_mask"``, ``"sdpa_mask"``), once."""
    if name in _REGISTERED:
        return
    from transformers import AttentionInterface, masking_utils

    AttentionInterface.register(name, function)
    masking_utils.AttentionMaskInterface.register(name, getattr(masking_utils, mask))
    _REGISTERED.add(name)
    log.debug("registered attention function %s (mask %s)", name, mask)


@contextmanager
def switched(configs: list[Any], name: str) -> Iterator[None]:
    """``_attn_implementation`` of each config set to ``name``, each restored on exit.

    The stored field is set directly, so sub-configs are neither touched nor "restored" to
    something they were not.
    """
    saved: list[tuple[Any, Any]] = []
    try:
        for cfg in configs:
            saved.append((cfg, cfg.__dict__.get("_attn_implementation_internal", _MISSING)))
            cfg._attn_implementation_internal = name
        yield
    finally:
        for cfg, value in reversed(saved):
            if value is _MISSING:
                cfg.__dict__.pop("_attn_implementation_internal", None)
            else:
                cfg._attn_implementation_internal = value
