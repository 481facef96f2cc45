"""The one early stop: a hook raises :class:`StopForward`.

The bridge computes the unembedding even when no logits are asked for (and ``stop_at_layer``
can only stop *before* a block), so a pass that needs only what happens up to some hook point
(the last layer's attention pattern, a hidden state, a receiver's input) attaches
:func:`stop_hook` there, after its own hooks, and :func:`stopping` catches the exception
(:func:`headlens.probes.patch.patched_forward` does both for ``stop_after``).  Every early stop
in the package raises this one exception (``tests/probes/test_engine_rules.py`` scans the source
for another).  The late start is :class:`headlens.probes.patch.Start`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor

__all__ = ["StopForward", "stop_hook", "stopping"]

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
