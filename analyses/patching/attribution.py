"""Attribution patching: the first-order estimate of every head's denoising patch at once
(Nanda 2023; Syed et al. 2023).  An estimate, never exact.

Each head of each pair gets a gate ``a`` (0) and ``hook_z`` becomes ``z + a (z_clean - z)``.  At
``a = 0`` the corrupted run is unchanged, at ``a = 1`` the head is patched; the estimate of
pair ``i``'s patched metric is ``corrupt_i + d m_i / d a[i, l, h]``, i.e.
``(z_clean - z_corrupt) . d m_i / d z``.  Pairs never interact, so one backward pass of
``sum_i m_i`` gives every pair's own gradient.  Cost: one clean forward (its ``z``), one
corrupted forward kept for the backward, one backward reaching the gates only (not the
weights): about three forward passes.  The estimates are normalised exactly as the exact
effects (:mod:`headlens.analyses.patching.effects`).

:func:`agreement` compares estimates with exact patching of the same task: Spearman's rho
over heads and the overlap of the ``k`` heads with the largest absolute effect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.ablation.hooks import z_hook_name
from headlens.analyses.ablation.metrics import model_values
from headlens.analyses.patching.effects import Gap, normalised_effects, task_gap
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.analyses.patching.runs import cache_run
from headlens.analyses.stats import spearman
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

__all__ = ["AttributionResult", "attribution_patch", "agreement", "ATTRIBUTION_COLUMNS", "TOP_K"]

ATTRIBUTION_COLUMNS = ["layer", "head", "name", "attribution", "attribution_low", "attribution_high", "attribution_metric"]
#: Heads compared by the top-k overlap.
TOP_K = 5


@dataclass
class AttributionResult:
    table: pd.DataFrame  # ATTRIBUTION_COLUMNS
    gap: Gap
    per_item: np.ndarray  # [layer * head, item] estimated patched metric
    info: dict[str, Any] = field(default_factory=dict)


def _gate_hook(layer: int, gates: Tensor, source: Tensor) -> HookFn:
    def fn(z: Tensor, hook: Any = None) -> Tensor:
        src = source[:, : z.shape[1]].to(device=z.device, dtype=z.dtype)
        return z + gates[:, layer].to(z.dtype)[:, None, :, None] * (src - z)

    return fn


def attribution_patch(
    model: LoadedModel,
    task: PairTask,
    *,
    batch_size: int = 8,
    n_resamples: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> AttributionResult:
    """Estimated denoising effect of every head (see the module doc)."""
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    n_l, n_h = model.n_layers, model.n_heads
    clean = cache_run(model, clean_set, z_layers=range(n_l), batch_size=batch_size)
    corrupt_values = torch.zeros(len(task), dtype=torch.float64)
    grads = torch.zeros(len(task), n_l, n_h, dtype=torch.float64)
    batches = corrupt_set.rows(batch_size)
    with torch.enable_grad():
        for i, rows in enumerate(batches):
            tokens, lengths, width = corrupt_set.batch(rows)
            gates = torch.zeros(len(rows), n_l, n_h, device=model.device, dtype=torch.float32, requires_grad=True)
            hooks = [(z_hook_name(layer), _gate_hook(layer, gates, clean.z[layer][rows, :width])) for layer in range(n_l)]
            with attached(model.bridge, hooks):
                values = model_values(model, tokens, lengths, corrupt_set, rows)
            (grad,) = torch.autograd.grad(values.sum(), [gates])
            corrupt_values[rows] = values.detach().cpu().double()
            grads[rows] = grad.detach().cpu().double()
            if progress is not None:
                progress("attribution", i + 1, len(batches))
    if corrupt_set.metric == "embedding" and float(grads.abs().max()) == 0.0:
        raise InputError(
            "attribution patching: the metric's gradient is zero on the corrupted inputs, so no first-order estimate exists;"
            " run exact patching"
        )
    gap = task_gap(clean_set.metric, clean.values.numpy(), corrupt_values.numpy(), n_resamples=n_resamples, seed=seed)
    estimated = (corrupt_values[:, None, None] + grads).reshape(len(task), n_l * n_h).T.numpy()  # [head, item]
    eff, low, high = normalised_effects(estimated, clean.values.numpy(), corrupt_values.numpy(), gap, n_resamples=n_resamples, seed=seed)
    table = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(n_l), n_h),
            "head": np.tile(np.arange(n_h), n_l),
            "name": [f"{a}.{b}" for a in range(n_l) for b in range(n_h)],
            "attribution": eff,
            "attribution_low": low,
            "attribution_high": high,
            "attribution_metric": estimated.mean(1),
        }
    )
    info = {
        "method": "attribution patching (first-order estimate of denoising; not exact)",
        "metric": clean_set.metric,
        "gap": gap.describe(),
        "n_resamples": n_resamples,
        "seed": seed,
        "task": task.describe(),
    }
    return AttributionResult(table=table, gap=gap, per_item=estimated, info=info)


def agreement(estimated: pd.DataFrame, exact: pd.DataFrame, *, k: int = TOP_K) -> dict[str, Any]:
    """Spearman's rho and the top-``k`` overlap (by absolute effect) of attribution and exact denoising.

    ``estimated`` has ``attribution``, ``exact`` has ``denoising``; rows are matched on (layer, head)."""
    joined = estimated.merge(exact, on=["layer", "head"], how="inner")
    a = joined["attribution"].to_numpy(dtype=float)
    b = joined["denoising"].to_numpy(dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    k = min(k, int(ok.sum()))
    if k == 0:
        return {"spearman": float("nan"), "top_k": 0, "top_k_overlap": float("nan"), "n_heads": 0}
    names = joined["name_x"].to_numpy() if "name_x" in joined else joined["name"].to_numpy()
    names = names[ok]
    top_a = set(names[np.argsort(-np.abs(a[ok]), kind="stable")[:k]])
    top_b = set(names[np.argsort(-np.abs(b[ok]), kind="stable")[:k]])
    return {"spearman": spearman(a[ok], b[ok]), "top_k": k, "top_k_overlap": len(top_a & top_b) / k, "n_heads": int(ok.sum())}
