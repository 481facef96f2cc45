"""Hooks that exist only inside a context manager.

``attached(model, [(hook_name, fn), ...])`` adds forward hooks to the bridge's hook
points and, on exit (normal or by exception), removes exactly the hooks it added:
hooks added by anyone else, permanent or not, stay.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from headlens.probes.errors import InputError

__all__ = ["HookFn", "attached", "hook_point"]

HookFn = Callable[..., Any]


def hook_point(bridge: Any, name: str, points: dict[str, Any] | None = None) -> Any:
    """The hook point called ``name`` (TransformerLens naming), or a clear error.  ``points``: the bridge's
    ``hook_dict`` when the caller already holds it (the bridge rebuilds that dict on every read)."""
    known: dict[str, Any] = bridge.hook_dict if points is None else points
    if name not in known:
        close = difflib.get_close_matches(name, list(known), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise InputError(f"the model has no hook point {name!r}{hint}", hook=name)
    return known[name]


@contextmanager
def attached(bridge: Any, hooks: Sequence[tuple[str, HookFn]], *, direction: str = "fwd") -> Iterator[None]:
    """Attach ``hooks`` for the duration of the ``with`` block, then remove exactly them."""
    added: list[tuple[Any, Any]] = []
    try:
        points = bridge.hook_dict if hooks else None  # read once: each read rebuilds the dict with its aliases
        for name, fn in hooks:
            point = hook_point(bridge, name, points)
            handle = point.add_hook(fn, dir=direction)
            added.append((point, handle))
        yield
    finally:
        for point, handle in reversed(added):
            handle.hook.remove()
            registry = point.fwd_hooks if direction == "fwd" else point.bwd_hooks
            for i, h in enumerate(registry):
                if h is handle:
                    del registry[i]
                    break
