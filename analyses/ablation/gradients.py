"""Gradient-based head scores: attribution (a first-order ablation estimate) and Michel et al.
(2019) head importance.  Both come from gates on ``hook_z``.

Every item ``i`` gets its own gates ``g[i, l, h]`` (all 1) and ``hook_z`` becomes
``rep + g * (z - rep)``, where ``rep`` is the ablation's replacement (0 for zero ablation, the
mean or a resampled ``z`` otherwise).  At ``g = 1`` the model is unchanged; ``g = 0`` ablates the
head.  Items never interact, so one backward pass of ``sum_i m_i`` gives every item's own
gradient ``d m_i / d g[i, l, h]``.

* **attribution** (first-order estimate of the ablation's delta):
  ``A[l, h] = mean_i (-d m_i / d g[i, l, h])``, i.e. the change ``g: 1 -> 0`` times the slope.
* **importance** (Michel et al. 2019): ``I[l, h] = mean_i |d m_i / d g[i, l, h]|`` with zero-ablation
  gates (their multiplicative head gate ``xi``), then normalised per layer to unit L2 norm
  (``I[l] / ||I[l]||_2``), as in their pruning experiments.

Cost: one forward and one backward pass (gradients reach the gates only, not the weights) per
batch: about three forward passes.  Heads removed by a mask have no gate (NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.ablation.hooks import Reference, z_hook_name
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.measure.stats import spearman  # re-exported: scipy.stats.spearmanr, NaN pairs dropped
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

__all__ = [
    "gate_gradients",
    "gate_gradients_and_values",
    "attribution_estimates",
    "head_importance",
    "importance_from_gradients",
    "normalise_per_layer",
    "spearman",
]


def _gate_hook(layer: int, gates: Tensor, reference: Reference | None, rows: list[int], removed: list[int]) -> HookFn:
    def fn(z: Tensor, hook: Any = None) -> Tensor:
        g = gates[:, layer].to(device=z.device, dtype=z.dtype)[
            :, None, :, None
        ]  # [batch, 1, head, 1]; the activation's device (layers may sit on several)
        rep = None if reference is None else reference.replacement(layer, rows, z.shape[1], dtype=z.dtype, device=z.device)
        out = g * z if rep is None else rep + g * (z - rep)
        if removed:
            keep = torch.ones(z.shape[2], dtype=z.dtype, device=z.device)
            keep[removed] = 0
            out = out * keep[None, None, :, None]
        return out

    return fn


def gate_gradients(
    model: LoadedModel,
    data: EvalSet,
    *,
    reference: Reference | None = None,
    mask: HeadMask | None = None,
    batch_size: int = 8,
    progress: Callable[[str, int, int], None] | None = None,
) -> Float[Tensor, "item layer head"]:
    """``d m_i / d g[i, l, h]`` at ``g = 1`` for every item, layer and head (float32, CPU).

    ``reference=None`` (or a zero reference) gives plain multiplicative gates ``g * z``.
    Refused for the embedding metric, whose gradient is zero at ``g = 1``.
    """
    return gate_gradients_and_values(model, data, reference=reference, mask=mask, batch_size=batch_size, progress=progress)[0]


def gate_gradients_and_values(
    model: LoadedModel,
    data: EvalSet,
    *,
    reference: Reference | None = None,
    mask: HeadMask | None = None,
    batch_size: int = 8,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[Float[Tensor, "item layer head"], Float[Tensor, " item"]]:
    """:func:`gate_gradients` and, from the same forward, each item's metric (float64, CPU) with
    ``mask`` heads removed: at ``g = 1`` the gated model is the model (``1 * z == z`` exactly),
    so the pruning sweep reads a step's value off the pass that ranks the next step's heads."""
    if data.metric == "embedding":
        raise InputError(
            "no gradient estimate from the embedding metric: 1 - cos is at its minimum (0) in the unablated model, "
            "so its gradient is zero; "
            "measure heads exactly (run_ablation) instead",
            metric=data.metric,
        )
    if reference is not None and reference.method == "zero":
        reference = None
    n_l, n_h = model.n_layers, model.n_heads
    masked = mask.by_layer() if mask is not None else {}
    out = torch.zeros(len(data), n_l, n_h, dtype=torch.float32)
    item_vals = torch.zeros(len(data), dtype=torch.float64)
    batches = data.rows(batch_size)
    with torch.enable_grad():
        for i, rows in enumerate(batches):
            tokens, lengths, _ = data.batch(rows)
            gates = torch.ones(len(rows), n_l, n_h, device=model.device, dtype=torch.float32, requires_grad=True)
            hooks = [(z_hook_name(layer), _gate_hook(layer, gates, reference, rows, masked.get(layer, []))) for layer in range(n_l)]
            with attached(model.bridge, hooks):
                values = model_values(model, tokens, lengths, data, rows)
            (grad,) = torch.autograd.grad(values.sum(), [gates])
            out[rows] = grad.detach().cpu()
            item_vals[rows] = values.detach().double().cpu()
            del values, grad
            if progress is not None:
                progress("gradients", i + 1, len(batches))
    if mask is not None:
        out[:, mask.to_tensor()] = float("nan")
    return out, item_vals


def attribution_estimates(
    model: LoadedModel, data: EvalSet, *, reference: Reference | None = None, mask: HeadMask | None = None, batch_size: int = 8
) -> Float[Tensor, "layer head"]:
    """First-order estimate of each head's ablation delta: ``mean_i (-d m_i / d g)``."""
    return -gate_gradients(model, data, reference=reference, mask=mask, batch_size=batch_size).double().mean(0).float()


def normalise_per_layer(importance: Float[Tensor, "layer head"]) -> Float[Tensor, "layer head"]:
    """``I[l] / ||I[l]||_2`` over the heads of each layer (NaN heads ignored and kept NaN;
    a layer whose norm is 0 stays 0)."""
    filled = torch.nan_to_num(importance, nan=0.0)
    norm = filled.pow(2).sum(-1, keepdim=True).sqrt()
    out = torch.where(norm > 0, filled / norm.clamp(min=torch.finfo(filled.dtype).tiny), torch.zeros_like(filled))
    return torch.where(torch.isnan(importance), importance, out)


def head_importance(
    model: LoadedModel,
    data: EvalSet,
    *,
    mask: HeadMask | None = None,
    batch_size: int = 8,
    normalise: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> Float[Tensor, "layer head"]:
    """Michel et al. (2019): ``I = mean_i |d m_i / d xi|`` with gates ``xi`` on ``z``, per-layer L2
    normalised when ``normalise``.  Removed heads are NaN."""
    return importance_from_gradients(gate_gradients(model, data, mask=mask, batch_size=batch_size, progress=progress), normalise=normalise)


def importance_from_gradients(grads: Float[Tensor, "item layer head"], *, normalise: bool = True) -> Float[Tensor, "layer head"]:
    """Michel importance from :func:`gate_gradients`: ``mean_i |grad|``, per-layer L2 normalised when ``normalise``."""
    raw = grads.abs().double().mean(0).float()
    return normalise_per_layer(raw) if normalise else raw
