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
over heads and the overlap of the ``k`` heads with the largest absolute effect, with what that
overlap means: its chance level (two random ``k``-sets among ``n`` heads share ``k / n`` of their
heads on average: 62.5% for the top 5 of 8 heads, so "100%" there is no strong claim) and the
chance of an overlap at least as large (hypergeometric); the heads of the exact top ``k`` the
estimate misses; and the largest absolute disagreement, head by head (a rank correlation near 1
can hide an estimate of 0.214 for an exact 1.000).
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
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.measure.stats import CHANCE_P, spearman, spearman_p
from headlens.analyses.patching.effects import Gap, normalised_effects, task_gap
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.analyses.patching.runs import cache_run
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

__all__ = ["AttributionRun", "run_attribution_patching", "agreement", "ATTRIBUTION_COLUMNS", "TOP_K", "CHANCE_P"]

ATTRIBUTION_COLUMNS = ["layer", "head", "name", "attribution", "attribution_low", "attribution_high", "attribution_metric"]
#: Heads compared by the top-k overlap.
TOP_K = 5
# CHANCE_P (analyses.measure.stats, exported here as before): an overlap whose chance of arising between random top-k sets is
# at least this is "at chance"; so is a rank correlation whose permutation p-value is.


@dataclass
class AttributionRun:
    table: pd.DataFrame  # ATTRIBUTION_COLUMNS
    gap: Gap
    per_item: np.ndarray  # [layer * head, item] estimated patched metric
    info: dict[str, Any] = field(default_factory=dict)


def _gate_hook(layer: int, gates: Tensor, source: Tensor) -> HookFn:
    def fn(z: Tensor, hook: Any = None) -> Tensor:
        src = source[:, : z.shape[1]].to(device=z.device, dtype=z.dtype)
        return z + gates[:, layer].to(z.dtype)[:, None, :, None] * (src - z)

    return fn


def run_attribution_patching(
    model: LoadedModel,
    task: PairTask,
    *,
    batch_size: int = 8,
    n_resamples: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> AttributionRun:
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
    return AttributionRun(table=table, gap=gap, per_item=estimated, info=info)


def agreement(estimated: pd.DataFrame, exact: pd.DataFrame, *, k: int = TOP_K) -> dict[str, Any]:
    """Attribution against exact denoising (rows matched on layer, head; ``estimated`` has
    ``attribution``, ``exact`` has ``denoising``), over the heads where both are finite:

    ``spearman`` and ``spearman_p`` (its two-sided permutation p-value, :func:`~headlens.analyses.measure.stats.spearman_p`);
    ``top_k``, ``top_k_overlap`` (the share of the exact top ``k`` by absolute effect
    that is in the estimate's top ``k``); ``top_k_chance`` (``k / n_heads``, the expected overlap of
    random top-``k`` sets); ``top_k_p_chance`` (the probability that random sets overlap at least as
    much); ``above_chance`` (``top_k_p_chance < CHANCE_P``); ``missed`` (the exact top-``k`` heads
    the estimate's top ``k`` lacks, by exact rank); ``largest_disagreement`` (``head``,
    ``estimate``, ``exact``, ``abs_difference`` of the head where they differ most); ``n_heads``.
    """
    from scipy.stats import hypergeom  # deferred: scipy.stats is about 0.8 s of `import headlens`

    joined = estimated.merge(exact, on=["layer", "head"], how="inner")
    a = joined["attribution"].to_numpy(dtype=float)
    b = joined["denoising"].to_numpy(dtype=float)
    ok = np.isfinite(a) & np.isfinite(b)
    n = int(ok.sum())
    k = min(k, n)
    if k == 0:
        nan = float("nan")
        return {
            "spearman": nan,
            "spearman_p": nan,
            "top_k": 0,
            "top_k_overlap": nan,
            "top_k_chance": nan,
            "top_k_p_chance": nan,
            "above_chance": False,
            "missed": [],
            "largest_disagreement": None,
            "n_heads": 0,
        }
    names = joined["name_x"].to_numpy() if "name_x" in joined else joined["name"].to_numpy()
    names, a, b = [str(x) for x in names[ok]], a[ok], b[ok]
    top_a = [names[i] for i in np.argsort(-np.abs(a), kind="stable")[:k]]
    top_b = [names[i] for i in np.argsort(-np.abs(b), kind="stable")[:k]]
    shared = len(set(top_a) & set(top_b))
    p_chance = float(hypergeom.sf(shared - 1, n, k, k))  # P(overlap >= shared): k of n heads drawn, k of them "exact top"
    worst = int(np.argmax(np.abs(a - b)))
    return {
        "spearman": spearman(a, b),
        "spearman_p": spearman_p(a, b),
        "top_k": k,
        "top_k_overlap": shared / k,
        "top_k_chance": k / n,
        "top_k_p_chance": p_chance,
        "above_chance": p_chance < CHANCE_P,
        "missed": [h for h in top_b if h not in top_a],
        "largest_disagreement": {
            "head": names[worst],
            "estimate": float(a[worst]),
            "exact": float(b[worst]),
            "abs_difference": float(abs(a[worst] - b[worst])),
        },
        "n_heads": n,
    }
