"""What replaces an ablated head's ``z`` and the ``hook_z`` hooks that apply it.

:class:`Reference` holds the replacement values of a method (zero, mean, resample; see
:mod:`headlens.analyses.ablation.study`), built by the baseline pass; :func:`ablate_hook` removes
heads and replaces others, one set per copy of a batch; :func:`mask_hooks` removes a mask's
heads.  The single-head runs and the gradient gates (:mod:`headlens.analyses.ablation.gradients`)
both use them.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.measure.masks import HeadMask
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn

__all__ = ["z_hook_name", "Reference", "resample_sources", "ablate_hook", "mask_hooks"]


def z_hook_name(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


@dataclass
class Reference:
    """What replaces an ablated head's ``z``: built from the baseline pass (see module doc)."""

    method: str
    aligned: bool
    mean: dict[int, Tensor] = field(default_factory=dict)  # layer -> [pos, head, d_head] (aligned) or [1, head, d_head]
    flat_mean: dict[int, Tensor] = field(default_factory=dict)  # layer -> [head, d_head]
    z: dict[int, Tensor] = field(default_factory=dict)  # resample: layer -> [item, pos, head, d_head]
    source: Tensor | None = None  # resample: [item] index of each item's source
    source_len: Tensor | None = None

    def replacement(
        self, layer: int, rows: Sequence[int], width: int, *, dtype: torch.dtype, device: torch.device
    ) -> Float[Tensor, "batch pos head d_head"] | None:
        """Replacement ``z`` for items ``rows`` (``None`` for zero ablation)."""
        if self.method == "zero":
            return None
        if self.method == "mean":
            m = self.mean[layer][:width] if self.aligned else self.mean[layer]
            return m.to(device=device, dtype=dtype).unsqueeze(0).expand(len(rows), width, *m.shape[1:])
        assert self.source is not None and self.source_len is not None
        src = self.source[list(rows)]
        out = self.z[layer][src, :width].to(device=device, dtype=dtype).clone()
        short = torch.arange(width)[None, :] >= self.source_len[src][:, None]  # [batch, pos]
        if bool(short.any()):
            out[short.to(device)] = self.flat_mean[layer].to(device=device, dtype=dtype)
        return out


def resample_sources(lengths: Tensor, seed: int) -> Tensor:
    """For each item, a different item at least as long (seeded); else the longest other item."""
    n = len(lengths)
    if n < 2:
        raise InputError("resample ablation needs at least 2 items (windows or prompts) to take z from")
    gen = torch.Generator().manual_seed(seed)
    src = torch.empty(n, dtype=torch.long)
    for i in range(n):
        ok = [j for j in range(n) if j != i and lengths[j] >= lengths[i]]
        if not ok:
            others = [j for j in range(n) if j != i]
            best = max(int(lengths[j]) for j in others)
            ok = [j for j in others if lengths[j] == best]
        src[i] = ok[int(torch.randint(len(ok), (1,), generator=gen))]
    return src


# --------------------------------------------------------------------------- hooks


def ablate_hook(layer: int, copies: list[list[int]], reference: Reference | None, rows: Sequence[int], removed: Sequence[int]) -> HookFn:
    """A ``hook_z`` hook: remove ``removed`` heads everywhere and, in copy ``c`` of the batch,
    replace heads ``copies[c]`` (zero, or the reference's values)."""

    def fn(z: Tensor, hook: Any = None) -> Tensor:
        z = z.clone(memory_format=torch.contiguous_format)
        if removed:
            z[:, :, list(removed)] = 0
        k = len(copies)
        if k == 0:
            return z
        b, width = z.shape[0] // k, z.shape[1]
        zv = z.view(k, b, *z.shape[1:])
        rep = None if reference is None else reference.replacement(layer, rows, width, dtype=z.dtype, device=z.device)
        for c, heads in enumerate(copies):
            if not heads:
                continue
            if rep is None:
                zv[c][:, :, heads] = 0
            else:
                zv[c][:, :, heads] = rep[:, :, heads]
        return z

    return fn


def mask_hooks(mask: HeadMask | None, *, skip: Set[int] = frozenset(), from_layer: int = 0) -> list[tuple[str, HookFn]]:
    if mask is None:
        return []
    return [
        (z_hook_name(layer), ablate_hook(layer, [], None, [], heads))
        for layer, heads in mask.by_layer().items()
        if layer >= from_layer and layer not in skip
    ]
