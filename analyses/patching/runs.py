"""Forwards of a patching study: a cached run, and runs with some heads' ``z`` swapped in.

:func:`cache_run` runs an evaluation set once, keeping each pair's metric value, ``hook_z`` of
the chosen layers and the residual stream entering the chosen layers.  :func:`patched_values`
measures many patches of one layer in one forward per batch: copy ``c`` of the batch gets patch
``c`` (head ``h``, at every position or at one position ``p``: its ``z`` replaced by the
source run's), and the forward starts at block ``layer`` from the stored residual (blocks before
it are untouched by a patch there), so a layer-``L`` patch costs ``(n_layers - L) / n_layers`` of
a forward.  Patched positions a pair does not have (beyond its length) give NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.ablation.hooks import z_hook_name
from headlens.analyses.measure.embedding import attention_mask
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.metrics import model_values
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import Start, check_start, patched_runner, resid_site

__all__ = ["RunCache", "Patch", "cache_run", "patched_values", "can_start_late", "patch_z_hook"]

#: A patch: ``(head, position)``; position ``None`` patches every position.
Patch = tuple[int, int | None]


@dataclass
class RunCache:
    """One run over an evaluation set: per-item values, ``z`` and stored residuals."""

    values: Tensor  # [item] float64
    z: dict[int, Tensor] = field(default_factory=dict)  # layer -> [item, pos, head, d_head]
    resid: dict[int, Tensor] = field(default_factory=dict)  # layer -> [item, pos, d_model]


def cache_run(
    model: LoadedModel,
    data: EvalSet,
    *,
    z_layers: Sequence[int] = (),
    resid_layers: Sequence[int] = (),
    batch_size: int = 8,
    hooks: Sequence[tuple[str, HookFn]] = (),
    store_device: str | torch.device = "cpu",
) -> RunCache:
    """Run ``data`` once (with ``hooks`` attached) and keep what later patches need."""
    n, width = data.tokens.shape
    cache = RunCache(values=torch.zeros(n, dtype=torch.float64))
    state: dict[str, Any] = {}

    def keeper(store: dict[int, Tensor], layer: int) -> HookFn:
        def fn(x: Tensor, hook: Any = None) -> None:
            if layer not in store:
                store[layer] = torch.zeros(n, width, *x.shape[2:], dtype=x.dtype, device=store_device)
            store[layer][state["rows"], : x.shape[1]] = x.detach().to(store_device)

        return fn

    keep = [*hooks]
    keep += [(z_hook_name(layer), keeper(cache.z, layer)) for layer in z_layers]
    keep += [(resid_site(layer).hook, keeper(cache.resid, layer)) for layer in resid_layers]
    with torch.inference_mode(), attached(model.bridge, keep):
        for rows in data.rows(batch_size):
            tokens, lengths, _ = data.batch(rows)
            state["rows"] = rows
            cache.values[rows] = model_values(model, tokens, lengths, data, rows).cpu()
    return cache


def can_start_late(model: LoadedModel, data: EvalSet) -> bool:
    """True when a forward continued from a later block reproduces the full one on this model."""
    if model.n_layers < 2:
        return False
    tokens, lengths, width = data.longest()
    mask = attention_mask(model, lengths, width)
    kwargs: dict[str, Any] = {} if mask is None else {"attention_mask": mask}
    return check_start(model, tokens, range(1, model.n_layers), **kwargs)


def patch_z_hook(patches: Sequence[Patch], source: Tensor) -> HookFn:
    """A ``hook_z`` hook: copy ``c`` of the batch gets ``source``'s ``z`` for patch ``c``.

    ``source`` is ``[batch, pos, head, d_head]`` (the batch's rows of the source run)."""

    def fn(z: Tensor, hook: Any = None) -> Tensor:
        z = z.clone(memory_format=torch.contiguous_format)
        k = len(patches)
        zv = z.view(k, z.shape[0] // k, *z.shape[1:])
        src = source[:, : z.shape[1]].to(device=z.device, dtype=z.dtype)
        for c, (head, pos) in enumerate(patches):
            if pos is None:
                zv[c, :, :, head] = src[:, :, head]
            elif pos < z.shape[1]:
                zv[c, :, pos, head] = src[:, pos, head]
        return z

    return fn


def patched_values(
    model: LoadedModel,
    target: EvalSet,
    target_cache: RunCache | None,
    source_z: Tensor,
    layer: int,
    patches: Sequence[Patch],
    *,
    batch_size: int = 8,
    max_rows: int = 256,
    hooks: Sequence[tuple[str, HookFn]] = (),
) -> Float[Tensor, "patch item"]:
    """Per-item metric of ``target`` with each patch of ``layer`` applied alone (see the module doc).

    ``source_z`` is the source run's ``z`` of ``layer`` ``[item, pos, head, d_head]``.  With
    ``target_cache`` holding ``resid[layer]`` the forwards start at block ``layer``; with
    ``None`` they run the whole model.  ``hooks`` are attached to every forward (e.g. heads
    frozen elsewhere).  At most ``max_rows`` rows (copies x items) go into one forward.
    """
    out = torch.full((len(patches), len(target)), float("nan"), dtype=torch.float64)
    start_late = target_cache is not None and layer in target_cache.resid and layer > 0
    per_forward = max(1, max_rows // max(1, batch_size))
    with torch.inference_mode():
        for rows in target.rows(batch_size):
            tokens, lengths, width = target.batch(rows)
            src = source_z[rows, :width]
            for first in range(0, len(patches), per_forward):
                chunk = list(patches[first : first + per_forward])
                k = len(chunk)
                all_hooks = [(z_hook_name(layer), patch_z_hook(chunk, src)), *hooks]
                start = None
                if start_late and target_cache is not None:  # start_late implies a cache
                    start = Start(layer=layer, resid=target_cache.resid[layer][rows, :width].to(model.device).repeat(k, 1, 1))
                run = patched_runner(model, all_hooks, start=start)
                vals = model_values(model, tokens, lengths, target, rows, copies=k, run=run)
                vals = vals.cpu().view(k, len(rows))
                for c, (_, pos) in enumerate(chunk):
                    if pos is not None:
                        vals[c, lengths.cpu() <= pos] = float("nan")
                out[first : first + k, rows] = vals
    return out
