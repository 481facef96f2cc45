"""Zero, mean and resample ablation of attention heads, applied to ``hook_z`` (before ``W_O``).

Definitions (``z[l]`` is ``blocks.l.attn.hook_z``, ``[batch, pos, head, d_head]``, the input of
``W_O``; ablating a head replaces its slice, so the head's whole contribution to the residual
stream, apart from the shared bias ``b_O``, is removed or replaced):

* **zero**: ``z[l][:, :, h] = 0``.  Exactly the model with head ``h``'s slice of ``W_O`` deleted.
* **mean**: ``z[l][:, t, h]`` is replaced by its mean over the evaluation set: per position ``t``
  when every item has the same length (text windows, aligned task prompts), otherwise the mean
  over every real position of every item.
* **resample**: item ``i`` gets ``z[l][j, t, h]`` from another item ``j`` of the same set (one
  seeded draw per item, among the items at least as long as ``i``; positions a shorter source
  does not reach take the mean over the set).

Replacement values always come from the baseline model (the unablated model, or the model with
``mask`` heads removed), computed in one pass before any ablation.

The single-head table (:func:`run_ablation`) is exact: every head is ablated alone and the
model is run to the metric.  It is fast because (1) the residual stream entering each layer is
stored by the baseline pass and each ablation of a head in layer ``L`` runs only blocks
``L..n-1`` (:class:`headlens.probes.patch.Start`), and (2) several heads of one layer are ablated in
one forward, one head per copy of the batch.  The first-order estimate (attribution, see
:mod:`headlens.analyses.ablation.gradients`) comes with it.  The sweep is resumable: ``journal`` (a
:class:`headlens.analyses.measure.records.RecordJournal`, e.g. the file journal
:class:`headlens.reports.api.journal.Journal`) receives each finished job and hands back those of an
interrupted run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.config import METHODS, AblationConfig
from headlens.analyses.ablation.gradients import attribution_estimates
from headlens.analyses.ablation.hooks import Reference, z_hook_name
from headlens.analyses.ablation.runs import (
    Baseline,
    ablated_logits,
    ablated_values,
    baseline_pass,
    naive_single_head_values,
    single_head_values,
)
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.measure.metrics import check_metric
from headlens.analyses.measure.records import RecordJournal, records_of
from headlens.analyses.measure.stats import bootstrap_mean_ci, spearman, spearman_p
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.patch import check_start

__all__ = [
    "METHODS",
    "TABLE_COLUMNS",
    "NO_EMBEDDING_ATTRIBUTION",
    "AblationConfig",
    "Reference",
    "Baseline",
    "AblationRun",
    "z_hook_name",
    "baseline_pass",
    "ablated_values",
    "ablated_logits",
    "single_head_values",
    "naive_single_head_values",
    "run_ablation",
    "study_jobs",
]

TABLE_COLUMNS = ["layer", "head", "method", "metric", "value", "delta", "ci_low", "ci_high", "n", "attribution"]

#: Copies of a batch stacked into one forward (several heads at once) stay under this many tokens.
AUTO_TOKENS_PER_FORWARD = 2048

#: Why the embedding metric has no attribution column (recorded in ``AblationRun.info``).
NO_EMBEDDING_ATTRIBUTION = (
    "off: the embedding change 1 - cos is at its minimum (0) in the unablated model, so its gradient "
    "with respect to a head's gate is zero and a first-order estimate says nothing"
)


# --------------------------------------------------------------------------- the study


@dataclass
class AblationRun:
    """The single-head table plus what the manifest needs."""

    table: pd.DataFrame
    masked_value: float  # the metric with the mask's heads removed (unablated_value without a mask): each delta is measured from it
    unablated_value: float  # the metric of the model as loaded (no head removed)
    spearman: float | None  # rank correlation of attribution with the exact delta
    config: AblationConfig  # the settings it ran with
    metric: str  # what was measured (the evaluation set's metric: loss, logit-diff or embedding)
    spearman_p: float | None = None  # its two-sided permutation p-value against no association (stats.spearman_p)
    info: dict[str, Any] = field(default_factory=dict)


def study_jobs(heads: dict[int, list[int]], heads_per_forward: int) -> list[tuple[int, list[int]]]:
    """The sweep's units of work: ``(layer, heads)`` chunks, fixed by the configuration alone."""
    jobs = []
    for layer, hs in heads.items():
        for i in range(0, len(hs), heads_per_forward):
            jobs.append((layer, hs[i : i + heads_per_forward]))
    return jobs


def _auto_heads_per_forward(data: EvalSet, batch_size: int, n_heads: int) -> int:
    tokens = min(batch_size, len(data)) * int(data.tokens.shape[1])
    return max(1, min(n_heads, AUTO_TOKENS_PER_FORWARD // max(tokens, 1)))


def _heads_to_ablate(model: LoadedModel, config: AblationConfig, mask: HeadMask | None) -> dict[int, list[int]]:
    """The heads asked for (all by default), less those the mask removes, by layer."""
    if mask is not None:
        mask.check_model(model.n_layers, model.n_heads)
    chosen = check_layers_heads(model, config.layers, config.heads)
    removed = set(mask.removed) if mask is not None else set()
    heads = {layer: [h for h in hs if (layer, h) not in removed] for layer, hs in chosen.items()}
    heads = {layer: hs for layer, hs in heads.items() if hs}
    if not heads:
        raise InputError("every head asked for is removed by the mask: nothing to ablate")
    return heads


def _baseline(
    model: LoadedModel,
    data: EvalSet,
    config: AblationConfig,
    heads: dict[int, list[int]],
    mask: HeadMask | None,
    journal: RecordJournal | None,
) -> tuple[Baseline, bool, float]:
    """``(baseline, prefix, seconds)``: the baseline pass (its values those of the run being resumed,
    when the journal holds them), whether each ablation runs from its layer on (checked once), and
    the pass's seconds."""
    t0 = time.perf_counter()
    prefix = config.prefix_reuse and any(layer > 0 for layer in heads)
    if prefix:
        prefix = check_start(model, data.longest()[0], [layer for layer in heads if layer > 0])
    base = baseline_pass(
        model,
        data,
        method=config.method,
        mask=mask,
        resid_layers=sorted(heads) if prefix else (),
        batch_size=config.batch_size,
        seed=config.seed,
    )
    t_base = time.perf_counter() - t0
    if journal is not None and (prev := records_of(journal, "baseline")):
        base.values = torch.tensor(prev[-1]["values"], dtype=torch.float64)  # the run being resumed used these
    elif journal is not None:
        journal.append([{"kind": "baseline", "values": base.values.tolist()}])
    return base, prefix, t_base


def _attribution(
    model: LoadedModel,
    data: EvalSet,
    config: AblationConfig,
    heads: dict[int, list[int]],
    base: Baseline,
    mask: HeadMask | None,
    journal: RecordJournal | None,
) -> tuple[dict[tuple[int, int], float], float, str | None]:
    """``(estimates, seconds, note)``: the first-order estimate of each head's delta (cheap; journaled
    so a resumed table is identical), or none and the note saying why (the embedding metric)."""
    if not config.attribution:
        return {}, 0.0, None
    if data.metric == "embedding":
        return {}, 0.0, NO_EMBEDDING_ATTRIBUTION
    if prev := records_of(journal, "attribution"):
        return {(r["layer"], r["head"]): r["estimate"] for r in prev[-1]["heads"]}, 0.0, None
    ta = time.perf_counter()
    est = attribution_estimates(model, data, reference=base.reference, mask=mask, batch_size=config.batch_size)
    t_attr = time.perf_counter() - ta
    attribution = {(layer, h): float(est[layer, h]) for layer, hs in heads.items() for h in hs}
    if journal is not None:
        heads_done = [{"layer": layer, "head": h, "estimate": v} for (layer, h), v in attribution.items()]
        journal.append([{"kind": "attribution", "heads": heads_done}])
    return attribution, t_attr, None


def _sweep(
    model: LoadedModel,
    data: EvalSet,
    config: AblationConfig,
    jobs: list[tuple[int, list[int]]],
    base: Baseline,
    *,
    mask: HeadMask | None,
    prefix: bool,
    journal: RecordJournal | None,
    progress: Callable[[str, int, int], None] | None,
) -> tuple[dict[tuple[int, int], list[float]], int]:
    """``(values, resumed)``: each head's per-item values with it ablated (those of the journal kept),
    and how many jobs the journal already held."""
    done: dict[tuple[int, int], list[float]] = {(r["layer"], r["head"]): r["values"] for r in records_of(journal, "head")}
    n_done_jobs = 0
    for i, (layer, hs) in enumerate(jobs):
        if all((layer, h) in done for h in hs):
            n_done_jobs += 1
            continue
        vals = single_head_values(model, data, layer, hs, base, mask=mask, batch_size=config.batch_size, prefix_reuse=prefix)
        records = [{"kind": "head", "layer": layer, "head": h, "values": vals[j].tolist()} for j, h in enumerate(hs)]
        if journal is not None:
            journal.append(records)
        for r in records:
            done[(layer, r["head"])] = r["values"]
        if progress is not None:
            progress("ablate", i + 1, len(jobs))
    return done, n_done_jobs


def _table(
    data: EvalSet,
    config: AblationConfig,
    order: list[tuple[int, int]],
    done: dict[tuple[int, int], list[float]],
    base_v: np.ndarray,
    attribution: dict[tuple[int, int], float],
) -> pd.DataFrame:
    """The single-head table (:data:`TABLE_COLUMNS`), one row per head of ``order``."""
    ablated = np.array([done[h] for h in order], dtype=np.float64)  # [head, item]
    diffs = ablated - base_v[None, :]
    lo, hi = bootstrap_mean_ci(
        diffs.T, n_resamples=config.n_bootstrap, level=config.ci, seed=config.seed
    )  # NaN with < 2 items or 0 resamples
    return pd.DataFrame(
        {
            "layer": [layer for layer, _ in order],
            "head": [h for _, h in order],
            "method": config.method,
            "metric": data.metric,
            "value": ablated.mean(1),
            "delta": diffs.mean(1),
            "ci_low": lo,
            "ci_high": hi,
            "n": len(data),
            "attribution": [attribution.get(h, math.nan) for h in order],
        },
        columns=TABLE_COLUMNS,
    )


def run_ablation(
    model: LoadedModel,
    data: EvalSet,
    config: AblationConfig | None = None,
    *,
    mask: HeadMask | None = None,
    journal: RecordJournal | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> AblationRun:
    """The exact single-head table: one row per head ablated alone (``TABLE_COLUMNS``).

    ``value`` = mean over items of the metric with the head ablated; ``delta`` = mean over items
    of (ablated - baseline), with a percentile bootstrap interval over items (``ci_low``,
    ``ci_high``); ``n`` = items; ``attribution`` = first-order estimate of ``delta`` (NaN when
    switched off).  ``journal``, when given, receives each job's results as they finish and
    supplies those of an interrupted run.  ``progress(stage, done, total)`` reports progress.
    """
    config = config or AblationConfig()
    check_metric(model, data.metric)
    heads = _heads_to_ablate(model, config, mask)
    k = config.heads_per_forward or _auto_heads_per_forward(data, config.batch_size, model.n_heads)
    jobs = study_jobs(heads, k)
    base, prefix, t_base = _baseline(model, data, config, heads, mask, journal)
    unablated = base.value
    if mask is not None and len(mask):
        unablated = float(ablated_values(model, data, [], batch_size=config.batch_size).double().mean())
    attribution, t_attr, attribution_note = _attribution(model, data, config, heads, base, mask, journal)
    ts = time.perf_counter()
    done, n_done_jobs = _sweep(model, data, config, jobs, base, mask=mask, prefix=prefix, journal=journal, progress=progress)
    t_sweep = time.perf_counter() - ts

    base_v = base.values.double().numpy()
    table = _table(data, config, [(layer, h) for layer, hs in heads.items() for h in hs], done, base_v, attribution)
    rho = rho_p = None
    if config.attribution and attribution_note is None and len(table) >= 2:
        est, delta = table["attribution"].to_numpy(), table["delta"].to_numpy()
        rho, rho_p = spearman(est, delta), spearman_p(est, delta, seed=config.seed)
    info = {
        "prefix_reuse": prefix,
        "heads_per_forward": k,
        "jobs": len(jobs),
        "jobs_resumed": n_done_jobs,
        "seconds": {"baseline": round(t_base, 3), "attribution": round(t_attr, 3), "sweep": round(t_sweep, 3)},
    }
    if attribution_note is not None:
        info["attribution"] = attribution_note
    return AblationRun(
        table=table,
        masked_value=float(base_v.mean()),
        unablated_value=unablated,
        spearman=rho,
        config=config,
        metric=data.metric,
        spearman_p=rho_p,
        info=info,
    )
