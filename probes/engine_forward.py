"""The one way headlens ends a forward pass early: a hook raises :class:`StopForward`.

The bridge computes the unembedding even when no logits are asked for (and ``stop_at_layer``
can only stop *before* a block), so a pass that needs only what happens up to some hook point
(the last layer's attention pattern, a hidden state, a receiver's input) attaches
:func:`stop_hook` there, after its own hooks, and :func:`forward_until` catches the exception.
Every early stop in the package raises this one exception (``tests/test_engine_rules.py``
scans the source for another).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from headlens.probes.hooks import attached

__all__ = ["StopForward", "stop_hook", "stopping", "forward_until"]

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
