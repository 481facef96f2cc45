"""The one parser of heads and head lists: ``"5.1"``, ``"5.1,5.5"``, ``["5.1"]``, ``(5, 1)``, ``[(5, 1)]``.

Every setting that names heads (``heads=``, ``receivers=``, ``ablate=``, ``senders``, mask
files, ``--heads``) goes through :func:`as_heads` (a list) or :func:`parse_head` (one head); a
value that is not a head is a one-line :class:`~headlens.probes.errors.InputError` naming the
parameter.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["HeadList", "parse_head", "parse_heads", "as_heads", "is_head_pair"]

#: What a setting that names heads takes: ``"5.1,5.5"``, ``(5, 1)``, ``["5.1"]``, ``[(5, 1)]`` ...
HeadList = str | tuple[int, int] | Sequence[str | tuple[int, int] | Sequence[int]]

_EXAMPLE = 'write heads as "LAYER.HEAD", e.g. "5.1", or as (layer, head) pairs'


def is_head_pair(item: Any) -> bool:
    """True for ``(5, 1)`` / ``[5, 1]``: two non-negative ints (not bools)."""
    return (
        isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)
    )


def parse_head(item: Any, *, where: str = "mask") -> tuple[int, int]:
    """``"5.1"`` or ``[5, 1]`` / ``(5, 1)`` -> ``(5, 1)``; anything else is an :class:`InputError`
    prefixed by ``where`` (empty: no prefix)."""
    if isinstance(item, str):
        layer, dot, head = item.strip().partition(".")
        if dot and layer.isdigit() and head.isdigit():
            return int(layer), int(head)
    elif is_head_pair(item):
        return int(item[0]), int(item[1])
    prefix = f"{where}: " if where else ""
    raise InputError(f"{prefix}{item!r} is not a head; {_EXAMPLE}", item=str(item))


def parse_heads(text: str, *, where: str = "") -> tuple[tuple[int, int], ...]:
    """``"5.1,5.5"`` -> ``((5, 1), (5, 5))`` (order kept); an empty item or a bad head is an :class:`InputError`."""
    items = [v.strip() for v in str(text).split(",")]
    if not all(items):
        prefix = f"{where}: " if where else ""
        raise InputError(f'{prefix}empty item in {text!r}; write heads as "LAYER.HEAD,...", e.g. "5.1,5.5"', item=str(text))
    return tuple(parse_head(item, where=where) for item in items)


def as_heads(value: Any, *, name: str = "heads") -> tuple[tuple[int, int], ...]:
    """A head list as any setting takes it -> ``((layer, head), ...)``, order kept.

    ``"5.1"``, ``"5.1,5.5"``, ``(5, 1)`` (one head), ``["5.1", "5.5"]``, ``[(5, 1), (5, 5)]``,
    ``[[5, 1]]`` and mixes of those items; anything else is a one-line :class:`InputError`
    saying ``name=`` and the value.
    """
    where = f"{name}={value!r}"
    if isinstance(value, str):
        return parse_heads(value, where=where)
    if is_head_pair(value):
        return (parse_head(value, where=where),)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        out: list[tuple[int, int]] = []
        for item in items:
            if isinstance(item, str):
                out.extend(parse_heads(item, where=where))
            else:
                out.append(parse_head(item, where=where))
        return tuple(out)
    raise InputError(f"{where} is not a head list; {_EXAMPLE} (a str, a pair or a list of them)", parameter=name)
