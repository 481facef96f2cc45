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


def hook_point(bridge: Any, name: str) -> Any:
    """The hook point called ``name`` (TransformerLens naming), or a clear error."""
    points = bridge.hook_dict
    if name not in points:
        close = difflib.get_close_matches(name, list(points), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise InputError(f"the model has no hook point {name!r}{hint}", hook=name)
    return points[name]


@contextmanager
def attached(bridge: Any, hooks: Sequence[tuple[str, HookFn]], *, direction: str = "fwd") -> Iterator[None]:
    """Attach ``hooks`` for the duration of the ``with`` block, then remove exactly them."""
    added: list[tuple[Any, Any]] = []
    try:
        for name, fn in hooks:
            point = hook_point(bridge, name)
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
