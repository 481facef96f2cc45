"""Runs of the model with heads ablated: the baseline pass (per-item values, replacement values,
stored residuals), several heads ablated together, and each head of a layer ablated alone (one
copy of the batch per head, from the head's layer on).  Definitions:
:mod:`headlens.analyses.ablation.study`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.ablation.hooks import Reference, ablate_hook, mask_hooks, resample_sources, z_hook_name
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.measure.metrics import model_values
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import Start, patched_forward, patched_runner, resid_site

__all__ = ["Baseline", "baseline_pass", "ablated_values", "ablated_logits", "single_head_values", "naive_single_head_values"]


@dataclass
class Baseline:
    """The baseline model's per-item metric values, replacement values and stored residuals."""

    values: Tensor  # [item] float64
    reference: Reference
    resid: dict[int, Tensor] = field(default_factory=dict)  # layer -> [item, pos, d_model]

    @property
    def value(self) -> float:
        return float(self.values.double().mean())


def baseline_pass(
    model: LoadedModel,
    data: EvalSet,
    *,
    method: str = "zero",
    mask: HeadMask | None = None,
    resid_layers: Sequence[int] = (),
    batch_size: int = 8,
    seed: int = 0,
    store_device: str | torch.device = "cpu",
) -> Baseline:
    """One pass over ``data`` with ``mask`` heads removed: per-item metric values, the
    reference for ``method`` and, for ``resid_layers``, the residual entering each layer.

    Memory: ``len(resid_layers) x items x pos x d_model`` values for the residuals, and as
    much per layer for ``z`` with resample ablation.
    """
    if mask is not None:
        mask.check_model(model.n_layers, model.n_heads)
    n, width_all = data.tokens.shape
    n_l, n_h, d = model.n_layers, model.n_heads, model.d_head
    aligned = data.aligned
    need_z = method in ("mean", "resample")
    pos_sum = {layer: torch.zeros(width_all if aligned else 1, n_h, d, dtype=torch.float64) for layer in range(n_l)} if need_z else {}
    flat_sum = {layer: torch.zeros(n_h, d, dtype=torch.float64) for layer in range(n_l)} if need_z else {}
    z_store = (
        {layer: torch.zeros(n, width_all, n_h, d, dtype=model.dtype, device=store_device) for layer in range(n_l)}
        if method == "resample"
        else {}
    )
    resid = {layer: torch.zeros(n, width_all, model.bridge.cfg.d_model, dtype=model.dtype, device=store_device) for layer in resid_layers}
    values = torch.zeros(n, dtype=torch.float64)
    state: dict[str, Any] = {}

    def z_keeper(layer: int) -> HookFn:
        def fn(z: Tensor, hook: Any = None) -> None:
            rows, lengths = state["rows"], state["lengths"]
            real = (torch.arange(z.shape[1], device=z.device)[None, :] < lengths.to(z.device)[:, None]).to(torch.float64)  # [b, pos]
            zz = z.detach().to(torch.float64) * real[:, :, None, None]
            flat_sum[layer] += zz.sum((0, 1)).cpu()
            if aligned:
                pos_sum[layer][: z.shape[1]] += zz.sum(0).cpu()
            if method == "resample":
                z_store[layer][rows, : z.shape[1]] = z.detach().to(store_device)

        return fn

    def resid_keeper(layer: int) -> HookFn:
        def fn(x: Tensor, hook: Any = None) -> None:
            resid[layer][state["rows"], : x.shape[1]] = x.detach().to(store_device)

        return fn

    hooks = mask_hooks(mask)
    if need_z:
        hooks += [(z_hook_name(layer), z_keeper(layer)) for layer in range(n_l)]
    hooks += [(resid_site(layer).hook, resid_keeper(layer)) for layer in resid_layers]
    run = patched_runner(model, hooks)
    with torch.inference_mode():
        for rows in data.rows(batch_size):
            tokens, lengths, _ = data.batch(rows)
            state.update(rows=rows, lengths=lengths)
            values[rows] = model_values(model, tokens, lengths, data, rows, run=run).cpu()
    reference = Reference(method=method, aligned=aligned)
    if need_z:
        n_real = float(data.lengths.sum())
        for layer in range(n_l):
            reference.flat_mean[layer] = (flat_sum[layer] / n_real).to(model.dtype)
            reference.mean[layer] = (pos_sum[layer] / n).to(model.dtype) if aligned else reference.flat_mean[layer][None]
    if method == "resample":
        reference.z = z_store
        reference.source = resample_sources(data.lengths, seed)
        reference.source_len = data.lengths.clone()
    return Baseline(values=values, reference=reference, resid=resid)


# --------------------------------------------------------------------------- ablated runs


def ablated_values(
    model: LoadedModel,
    data: EvalSet,
    heads: Sequence[tuple[int, int]],
    *,
    reference: Reference | None = None,
    mask: HeadMask | None = None,
    batch_size: int = 8,
) -> Float[Tensor, " item"]:
    """Per-item metric with every head in ``heads`` ablated together (plus ``mask`` heads
    removed), one full forward per batch.  ``reference=None`` means zero ablation."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= layer < model.n_layers and 0 <= head < model.n_heads):
            raise InputError(f"head {layer}.{head} does not exist in this model", head=f"{layer}.{head}")
        by_layer.setdefault(layer, []).append(head)
    masked = mask.by_layer() if mask is not None else {}
    values = torch.zeros(len(data), dtype=torch.float64)
    with torch.inference_mode():
        for rows in data.rows(batch_size):
            tokens, lengths, _ = data.batch(rows)
            hooks = [
                (z_hook_name(layer), ablate_hook(layer, [hs], reference, rows, masked.get(layer, []))) for layer, hs in by_layer.items()
            ]
            hooks += mask_hooks(mask, skip=set(by_layer))
            values[rows] = model_values(model, tokens, lengths, data, rows, run=patched_runner(model, hooks)).cpu()
    return values


def ablated_logits(
    model: LoadedModel,
    tokens: Tensor,
    heads: Sequence[tuple[int, int]],
    *,
    mask: HeadMask | None = None,
) -> Float[Tensor, "batch pos vocab"]:
    """Logits of one forward on ``tokens`` with ``heads`` zero-ablated (and ``mask`` heads removed):
    the same hooks as every zero ablation here, for inspection and reference tests."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in [*heads, *(mask.removed if mask is not None else ())]:
        by_layer.setdefault(layer, []).append(head)
    hooks = [(z_hook_name(layer), ablate_hook(layer, [], None, [], sorted(set(hs)))) for layer, hs in by_layer.items()]
    with torch.inference_mode():
        return patched_forward(model, tokens, hooks)


def single_head_values(
    model: LoadedModel,
    data: EvalSet,
    layer: int,
    heads: Sequence[int],
    baseline: Baseline,
    *,
    mask: HeadMask | None = None,
    batch_size: int = 8,
    prefix_reuse: bool = True,
) -> Float[Tensor, "head item"]:
    """Per-item metric with each of ``heads`` (all in ``layer``) ablated alone: one forward per
    batch for all of them (one copy of the batch per head), from block ``layer`` on when
    ``prefix_reuse`` (``baseline.resid[layer]`` must be stored)."""
    heads = list(heads)
    k = len(heads)
    masked = mask.by_layer() if mask is not None else {}
    out = torch.zeros(k, len(data), dtype=torch.float64)
    reference = None if baseline.reference.method == "zero" else baseline.reference
    with torch.inference_mode():
        for rows in data.rows(batch_size):
            tokens, lengths, width = data.batch(rows)
            hooks = [(z_hook_name(layer), ablate_hook(layer, [[h] for h in heads], reference, rows, masked.get(layer, [])))]
            start = None
            if prefix_reuse:
                hooks += mask_hooks(mask, skip={layer}, from_layer=layer + 1)
                start = Start(layer=layer, resid=baseline.resid[layer][rows, :width].to(model.device).repeat(k, 1, 1))
            else:
                hooks += mask_hooks(mask, skip={layer})
            vals = model_values(model, tokens, lengths, data, rows, copies=k, run=patched_runner(model, hooks, start=start))
            out[:, rows] = vals.cpu().view(k, len(rows))
    return out


def naive_single_head_values(
    model: LoadedModel,
    data: EvalSet,
    heads: Sequence[tuple[int, int]],
    baseline: Baseline,
    *,
    mask: HeadMask | None = None,
    batch_size: int = 8,
) -> Float[Tensor, "head item"]:
    """The reference loop: one full forward per head per batch (what the fast table must equal)."""
    reference = None if baseline.reference.method == "zero" else baseline.reference
    return torch.stack([ablated_values(model, data, [h], reference=reference, mask=mask, batch_size=batch_size) for h in heads])
