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

The single-head table (:func:`ablation_study`) is exact: every head is ablated alone and the
model is run to the metric.  It is fast because (1) the residual stream entering each layer is
stored by the baseline pass and each ablation of a head in layer ``L`` runs only blocks
``L..n-1`` (:mod:`headlens.analyses.ablation.suffix`), and (2) several heads of one layer are ablated in
one forward, one head per copy of the batch.  The first-order estimate (attribution, see
:mod:`headlens.analyses.ablation.gradients`) comes with it.  The sweep is resumable through
:class:`headlens.analyses.ablation.journal.Journal`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.ablation.data import EvalSet, check_metric, model_values
from headlens.analyses.ablation.suffix import check_from_layer, resid_hook_name, run_from_layer
from headlens.analyses.ablation.masks import HeadMask
from headlens.analyses.ablation.journal import Journal
from headlens.analyses.stats import bootstrap_mean_ci, spearman
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel, check_layers_heads

__all__ = [
    "METHODS",
    "TABLE_COLUMNS",
    "NO_EMBEDDING_ATTRIBUTION",
    "AblationConfig",
    "Reference",
    "Baseline",
    "AblationResult",
    "z_hook_name",
    "baseline_pass",
    "ablated_values",
    "ablated_logits",
    "single_head_values",
    "naive_single_head_values",
    "ablation_study",
    "study_jobs",
]

METHODS = ("zero", "mean", "resample")
TABLE_COLUMNS = ["layer", "head", "method", "metric", "value", "delta", "ci_low", "ci_high", "n", "attribution"]

#: Copies of a batch stacked into one forward (several heads at once) stay under this many tokens.
AUTO_TOKENS_PER_FORWARD = 2048

#: Why the embedding metric has no attribution column (recorded in ``AblationResult.info``).
NO_EMBEDDING_ATTRIBUTION = (
    "off: the embedding change 1 - cos is at its minimum (0) in the unablated model, so its gradient "
    "with respect to a head's gate is zero and a first-order estimate says nothing"
)


def z_hook_name(layer: int) -> str:
    return f"blocks.{layer}.attn.hook_z"


@dataclass(frozen=True, kw_only=True)
class AblationConfig:
    """How to run an ablation study.

    ``heads``/``layers`` restrict the table (default: every head not removed by the mask).
    ``batch_size`` items go through the model at once; ``heads_per_forward`` heads of one layer
    are ablated in one forward (one per copy of the batch; ``None`` = as many as keep a forward
    under ``AUTO_TOKENS_PER_FORWARD`` tokens).  ``prefix_reuse`` runs each ablation from its
    layer on (checked against a full forward once; off = one full forward per head).
    ``n_bootstrap`` resamples of the items give the ``ci`` interval of each delta (``seed``).
    ``seed`` also draws the resample sources.  ``attribution`` is skipped, with a note in
    ``AblationResult.info["attribution"]``, for the embedding metric (its gradient is zero).
    """

    method: str = "zero"
    heads: tuple[tuple[int, int], ...] | None = None
    layers: tuple[int, ...] | None = None
    batch_size: int = 8
    heads_per_forward: int | None = None
    prefix_reuse: bool = True
    n_bootstrap: int = 1000
    ci: float = 0.95
    seed: int = 0
    attribution: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"unknown ablation method {self.method!r}: choose from {', '.join(METHODS)}", method=self.method)
        if self.batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")
        if self.heads_per_forward is not None and self.heads_per_forward < 1:
            raise InputError(f"heads per forward must be at least 1, got {self.heads_per_forward}")
        if not 0 < self.ci < 1:
            raise InputError(f"confidence level must be between 0 and 1, got {self.ci}")
        if self.n_bootstrap < 0:
            raise InputError(f"bootstrap resamples must be >= 0, got {self.n_bootstrap}")


# --------------------------------------------------------------------------- replacement values


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

    def replacement(self, layer: int, rows: Sequence[int], width: int, *, dtype: torch.dtype, device: torch.device) -> Float[Tensor, "batch pos head d_head"] | None:
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


def _resample_sources(lengths: Tensor, seed: int) -> Tensor:
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


def _ablate_hook(layer: int, copies: list[list[int]], reference: Reference | None, rows: Sequence[int], removed: Sequence[int]) -> HookFn:
    """A ``hook_z`` hook: remove ``removed`` heads everywhere and, in copy ``c`` of the batch,
    replace heads ``copies[c]`` (zero, or the reference's values)."""

    def fn(z: Tensor, hook: Any = None) -> Tensor:  # noqa: ARG001
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


def _mask_hooks(mask: HeadMask | None, *, skip: set[int] = frozenset(), from_layer: int = 0) -> list[tuple[str, HookFn]]:
    if mask is None:
        return []
    return [
        (z_hook_name(layer), _ablate_hook(layer, [], None, [], heads))
        for layer, heads in mask.by_layer().items()
        if layer >= from_layer and layer not in skip
    ]


# --------------------------------------------------------------------------- baseline pass


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
    z_store = {layer: torch.zeros(n, width_all, n_h, d, dtype=model.dtype, device=store_device) for layer in range(n_l)} if method == "resample" else {}
    resid = {layer: torch.zeros(n, width_all, model.bridge.cfg.d_model, dtype=model.dtype, device=store_device) for layer in resid_layers}
    values = torch.zeros(n, dtype=torch.float64)
    state: dict[str, Any] = {}

    def z_keeper(layer: int) -> HookFn:
        def fn(z: Tensor, hook: Any = None) -> None:  # noqa: ARG001
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
        def fn(x: Tensor, hook: Any = None) -> None:  # noqa: ARG001
            resid[layer][state["rows"], : x.shape[1]] = x.detach().to(store_device)

        return fn

    hooks = _mask_hooks(mask)
    if need_z:
        hooks += [(z_hook_name(layer), z_keeper(layer)) for layer in range(n_l)]
    hooks += [(resid_hook_name(layer), resid_keeper(layer)) for layer in resid_layers]
    with torch.inference_mode(), attached(model.bridge, hooks):
        for rows in data.rows(batch_size):
            tokens, lengths, _ = data.batch(rows)
            state.update(rows=rows, lengths=lengths)
            values[rows] = model_values(model, tokens, lengths, data, rows).cpu()
    reference = Reference(method=method, aligned=aligned)
    if need_z:
        n_real = float(data.lengths.sum())
        for layer in range(n_l):
            reference.flat_mean[layer] = (flat_sum[layer] / n_real).to(model.dtype)
            reference.mean[layer] = (pos_sum[layer] / n).to(model.dtype) if aligned else reference.flat_mean[layer][None]
    if method == "resample":
        reference.z = z_store
        reference.source = _resample_sources(data.lengths, seed)
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
            hooks = [(z_hook_name(layer), _ablate_hook(layer, [hs], reference, rows, masked.get(layer, []))) for layer, hs in by_layer.items()]
            hooks += _mask_hooks(mask, skip=set(by_layer))
            with attached(model.bridge, hooks):
                values[rows] = model_values(model, tokens, lengths, data, rows).cpu()
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
    hooks = [(z_hook_name(layer), _ablate_hook(layer, [], None, [], sorted(set(hs)))) for layer, hs in by_layer.items()]
    with torch.inference_mode(), attached(model.bridge, hooks):
        return model.bridge(tokens.to(model.device), return_type="logits")


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
            hooks = [(z_hook_name(layer), _ablate_hook(layer, [[h] for h in heads], reference, rows, masked.get(layer, [])))]
            if prefix_reuse:
                hooks += _mask_hooks(mask, skip={layer}, from_layer=layer + 1)
                resid = baseline.resid[layer][rows, :width].to(model.device).repeat(k, 1, 1)

                def run(t: Tensor, **kw: Any) -> Tensor:
                    return run_from_layer(model, t, resid, layer, hooks, **kw)

                vals = model_values(model, tokens, lengths, data, rows, copies=k, run=run)
            else:
                hooks += _mask_hooks(mask, skip={layer})
                with attached(model.bridge, hooks):
                    vals = model_values(model, tokens, lengths, data, rows, copies=k)
            out[:, rows] = vals.cpu().view(k, len(rows))
    return out


def naive_single_head_values(model: LoadedModel, data: EvalSet, heads: Sequence[tuple[int, int]], baseline: Baseline, *, mask: HeadMask | None = None, batch_size: int = 8) -> Float[Tensor, "head item"]:
    """The reference loop: one full forward per head per batch (what the fast table must equal)."""
    reference = None if baseline.reference.method == "zero" else baseline.reference
    return torch.stack([ablated_values(model, data, [h], reference=reference, mask=mask, batch_size=batch_size) for h in heads])


# --------------------------------------------------------------------------- the study


@dataclass
class AblationResult:
    """The single-head table plus what the manifest needs."""

    table: pd.DataFrame
    baseline_value: float  # metric of the baseline model (mask heads removed, if any)
    unablated_value: float  # metric of the model with no head removed
    spearman: float | None  # rank correlation of attribution with the exact delta
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


def _head_records(journal: Journal | None, kind: str) -> list[dict[str, Any]]:
    return [r for r in (journal.records if journal is not None else []) if r.get("kind") == kind]


def ablation_study(
    model: LoadedModel,
    data: EvalSet,
    config: AblationConfig | None = None,
    *,
    mask: HeadMask | None = None,
    journal: Journal | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> AblationResult:
    """The exact single-head table: one row per head ablated alone (``TABLE_COLUMNS``).

    ``value`` = mean over items of the metric with the head ablated; ``delta`` = mean over items
    of (ablated - baseline), with a percentile bootstrap interval over items (``ci_low``,
    ``ci_high``); ``n`` = items; ``attribution`` = first-order estimate of ``delta`` (NaN when
    switched off).  ``journal``, when given, receives each job's results as they finish and
    supplies those of an interrupted run.  ``progress(stage, done, total)`` reports progress.
    """
    config = config or AblationConfig()
    check_metric(model, data.metric)
    if mask is not None:
        mask.check_model(model.n_layers, model.n_heads)
    chosen = check_layers_heads(model, config.layers, config.heads)
    removed = set(mask.removed) if mask is not None else set()
    heads = {layer: [h for h in hs if (layer, h) not in removed] for layer, hs in chosen.items()}
    heads = {layer: hs for layer, hs in heads.items() if hs}
    if not heads:
        raise InputError("every head asked for is removed by the mask: nothing to ablate")
    k = config.heads_per_forward or _auto_heads_per_forward(data, config.batch_size, model.n_heads)
    jobs = study_jobs(heads, k)
    t0 = time.perf_counter()

    prefix = config.prefix_reuse and any(layer > 0 for layer in heads)
    if prefix:
        probe_layer = max(layer for layer in heads)
        tokens, _, _ = data.batch([0])  # the first item alone: no padding
        prefix = check_from_layer(model, tokens, probe_layer)
    base = baseline_pass(model, data, method=config.method, mask=mask, resid_layers=sorted(heads) if prefix else (), batch_size=config.batch_size, seed=config.seed)
    t_base = time.perf_counter() - t0

    if journal is not None and (prev := _head_records(journal, "baseline")):
        base.values = torch.tensor(prev[-1]["values"], dtype=torch.float64)  # the run being resumed used these
    elif journal is not None:
        journal.append([{"kind": "baseline", "values": base.values.tolist()}])
    unablated = base.value
    if mask is not None and len(mask):
        unablated = float(ablated_values(model, data, [], batch_size=config.batch_size).double().mean())

    # First-order estimate (cheap; journaled so a resumed table is identical).
    attribution = {}
    t_attr = 0.0
    attribution_note = None
    if config.attribution and data.metric == "embedding":
        attribution_note = NO_EMBEDDING_ATTRIBUTION
    elif config.attribution:
        if prev := _head_records(journal, "attribution"):
            attribution = {(r["layer"], r["head"]): r["estimate"] for r in prev[-1]["heads"]}
        else:
            from headlens.analyses.ablation.gradients import attribution_estimates

            ta = time.perf_counter()
            est = attribution_estimates(model, data, reference=base.reference, mask=mask, batch_size=config.batch_size)
            t_attr = time.perf_counter() - ta
            attribution = {(layer, h): float(est[layer, h]) for layer, hs in heads.items() for h in hs}
            if journal is not None:
                journal.append([{"kind": "attribution", "heads": [{"layer": layer, "head": h, "estimate": v} for (layer, h), v in attribution.items()]}])

    done: dict[tuple[int, int], list[float]] = {(r["layer"], r["head"]): r["values"] for r in _head_records(journal, "head")}
    ts = time.perf_counter()
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
    t_sweep = time.perf_counter() - ts

    order = [(layer, h) for layer, hs in heads.items() for h in hs]
    ablated = np.array([done[h] for h in order], dtype=np.float64)  # [head, item]
    base_v = base.values.double().numpy()
    diffs = ablated - base_v[None, :]
    lo, hi = bootstrap_mean_ci(diffs.T, n_resamples=config.n_bootstrap, level=config.ci, seed=config.seed)  # NaN with < 2 items or 0 resamples
    table = pd.DataFrame(
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
    rho = None
    if config.attribution and attribution_note is None and len(table) >= 2:
        rho = spearman(table["attribution"].to_numpy(), table["delta"].to_numpy())
    info = {
        "prefix_reuse": prefix,
        "heads_per_forward": k,
        "jobs": len(jobs),
        "jobs_resumed": n_done_jobs,
        "seconds": {"baseline": round(t_base, 3), "attribution": round(t_attr, 3), "sweep": round(t_sweep, 3)},
    }
    if attribution_note is not None:
        info["attribution"] = attribution_note
    return AblationResult(table=table, baseline_value=float(base_v.mean()), unablated_value=unablated, spearman=rho, info=info)
