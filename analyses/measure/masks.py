"""The head-mask file: a set of removed (pruned) attention heads, as JSON.

``headlens prune`` writes one (``write_json(path, mask.to_json())``: the commands write files,
the library only defines and reads the format); ``headlens ablate --mask`` (and ``classify --mask``) read it
back and run the model with those heads removed.  A removed head's ``z`` (the input of
``W_O``) is zero, which is exactly the model with that head's slice of ``W_O`` deleted
(``b_O`` is shared by the heads of a layer and stays).

Format (``version`` 1)::

    {
      "format": "headlens.head_mask",
      "version": 1,
      "n_layers": 12,
      "n_heads": 12,
      "removed": ["0.3", "5.1", "11.7"],
      "model": "gpt2",
      "info": {"source": "headlens prune", "fraction_removed": 0.3}
    }

``removed`` lists heads as ``"LAYER.HEAD"`` strings (``[layer, head]`` pairs are accepted
too); ``n_layers`` and ``n_heads`` say which model shape the mask was made for.
``model`` and ``info`` are free-form and informational only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Bool
from torch import Tensor

from headlens.probes.errors import InputError
from headlens.probes.head_lists import parse_head, parse_heads

__all__ = ["MASK_FORMAT", "MASK_VERSION", "HeadMask", "read_mask", "parse_head", "parse_heads", "head_name"]

MASK_FORMAT = "headlens.head_mask"
MASK_VERSION = 1


def head_name(layer: int, head: int) -> str:
    """``"5.1"`` for layer 5, head 1."""
    return f"{layer}.{head}"


@dataclass(frozen=True)
class HeadMask:
    """Removed heads of a model with ``n_layers`` x ``n_heads`` heads (sorted, no repeats)."""

    n_layers: int
    n_heads: int
    removed: tuple[tuple[int, int], ...]
    model: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [head_name(layer, head) for layer, head in self.removed if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads)]
        if bad:
            raise InputError(
                f"mask names head(s) {', '.join(bad)} that do not exist:"
                f" the model has layers 0..{self.n_layers - 1} and heads 0..{self.n_heads - 1}",
                heads=bad,
            )
        object.__setattr__(self, "removed", tuple(sorted(set(self.removed))))

    @classmethod
    def from_heads(
        cls, heads: Iterable[tuple[int, int]], *, n_layers: int, n_heads: int, model: str | None = None, info: dict[str, Any] | None = None
    ) -> HeadMask:
        return cls(n_layers=n_layers, n_heads=n_heads, removed=tuple(heads), model=model, info=dict(info or {}))

    def __len__(self) -> int:
        return len(self.removed)

    @property
    def heads(self) -> tuple[tuple[int, int], ...]:
        """The removed heads (same as ``removed``)."""
        return self.removed

    def __contains__(self, head: object) -> bool:
        return head in self.removed

    @property
    def fraction(self) -> float:
        """Fraction of all heads that are removed."""
        return len(self.removed) / (self.n_layers * self.n_heads)

    def by_layer(self) -> dict[int, list[int]]:
        """``{layer: [removed heads]}`` for layers with at least one removed head."""
        out: dict[int, list[int]] = {}
        for layer, head in self.removed:
            out.setdefault(layer, []).append(head)
        return out

    def to_tensor(self) -> Bool[Tensor, "layer head"]:
        """Boolean ``[n_layers, n_heads]``: True where the head is removed."""
        t = torch.zeros(self.n_layers, self.n_heads, dtype=torch.bool)
        for layer, head in self.removed:
            t[layer, head] = True
        return t

    def check_model(self, n_layers: int, n_heads: int, *, source: str = "mask") -> None:
        """Refuse a mask made for another model shape."""
        if (self.n_layers, self.n_heads) != (n_layers, n_heads):
            raise InputError(
                f"{source} was made for a model with {self.n_layers} layers x {self.n_heads} heads; this model has {n_layers} x {n_heads}",
                mask_shape=(self.n_layers, self.n_heads),
            )

    def check(self, n_layers: int, n_heads: int) -> None:
        """Same as :meth:`check_model`."""
        self.check_model(n_layers, n_heads)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MASK_FORMAT,
            "version": MASK_VERSION,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "removed": [head_name(layer, head) for layer, head in self.removed],
            "model": self.model,
            "info": self.info,
        }


def read_mask(path: str | Path, *, n_layers: int | None = None, n_heads: int | None = None) -> HeadMask:
    """Read and validate a mask file; with ``n_layers``/``n_heads``, also check it fits that model.

    Every problem is a one-line :class:`InputError`: missing or unreadable file, not JSON,
    wrong ``format``, a malformed head, a head outside the model.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"mask file {path} {'is a folder' if p.is_dir() else 'does not exist'}", path=str(path))
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read mask file {path}: {exc}".splitlines()[0], path=str(path)) from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"mask file {path} is not valid JSON ({exc.msg}, line {exc.lineno})", path=str(path)) from exc
    where = f"mask file {path}"
    if not isinstance(obj, dict) or obj.get("format") != MASK_FORMAT:
        raise InputError(
            f'{where} is not a headlens head mask (needs "format": "{MASK_FORMAT}"; write one with headlens prune)', path=str(path)
        )
    if "version" not in obj:
        raise InputError(f'{where} has no "version" field; this headlens reads version {MASK_VERSION}', path=str(path))
    if obj["version"] != MASK_VERSION:
        raise InputError(f"{where} has version {obj['version']!r}; this headlens reads version {MASK_VERSION}", path=str(path))
    shape = []
    for key in ("n_layers", "n_heads"):
        value = obj.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f'{where}: "{key}" must be a positive integer, got {value!r}', path=str(path))
        shape.append(value)
    removed = obj.get("removed")
    if not isinstance(removed, list):
        raise InputError(f'{where}: "removed" must be a list of heads such as ["5.1", "5.5"]', path=str(path))
    heads = [parse_head(item, where=where) for item in removed]
    if n_layers is not None and n_heads is not None:
        bad = [head_name(layer, head) for layer, head in heads if not (0 <= layer < n_layers and 0 <= head < n_heads)]
        if bad:
            raise InputError(
                f"{where} names head(s) {', '.join(bad)} that do not exist in this model"
                f" (layers 0..{n_layers - 1}, heads 0..{n_heads - 1})",
                heads=bad,
                path=str(path),
            )
    raw_info = obj.get("info")
    info = raw_info if isinstance(raw_info, dict) else {}
    model = obj.get("model") if isinstance(obj.get("model"), str) else None
    mask = HeadMask(n_layers=shape[0], n_heads=shape[1], removed=tuple(heads), model=model, info=info)
    if n_layers is not None and n_heads is not None:
        mask.check_model(n_layers, n_heads, source=where)
    return mask
