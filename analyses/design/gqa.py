"""GQA what-if: a multi-head (or grouped-query) model turned into one with fewer KV heads, without retraining.

For each group size ``g`` (2, 4, ... up to one KV head per layer: MQA) and each grouping
(``adjacent``: KV heads 0-1, 2-3, ...; ``similar``: groups with the least scatter of keys and
values on the evaluation text, :mod:`headlens.analyses.design.grouping`), the K and V of the
heads in a group are mean-pooled in every layer at once (:func:`headlens.analyses.design.edits.pool_hooks`,
Ainslie et al. 2023's uptraining initialisation) and the model is measured against the original:

* the metric (loss on text windows; a task's logit difference when given),
* the KV cache it would need (:mod:`headlens.analyses.design.kv`),
* per head, how far its attention pattern moves: the Jensen-Shannon divergence (bits, in [0, 1])
  between each query's original and pooled attention rows, averaged over the queries at
  positions ``>= 1`` of every window (position 0 has a single key: JS is always 0 there).

On a grouped-query model the groups are over its KV heads (4 query / 2 KV heads: ``g = 2`` is MQA).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.design.config import GROUPINGS, GQAConfig
from headlens.analyses.design.edits import Groups, check_pooling, pool_hooks
from headlens.analyses.design.grouping import adjacent_groups, kv_distances, scatter, similar_groups
from headlens.analyses.design.kv import KVConfig, group_sizes, kv_cache_table
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.metrics import item_values, model_values
from headlens.analyses.measure.records import MemoryJournal, RecordJournal, records_of
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.probes.attention import attention_spec
from headlens.probes.engine import LayerView, Sums, reduce_pass
from headlens.probes.errors import InputError
from headlens.probes.hooks import attached

__all__ = ["GQAConfig", "GQARun", "check_gqa", "GROUPINGS", "run_gqa", "js_divergence", "variant_groups", "SUMMARY_COLUMNS"]

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = [
    "grouping",
    "g",
    "kv_heads",
    "kv_bytes_per_token",
    "kv_saved",
    "loss",
    "loss_change",
    "change_ci_low",
    "change_ci_high",
    "mean_js",
    "max_js",
    "scatter",
]
#: similar minus adjacent loss at each group size, paired over windows, with its 95% bootstrap interval.
#: Unpooled attention patterns kept between variants up to this size (bytes); beyond it each variant recomputes them.
CLEAN_CACHE_BYTES = 512 * 2**20
COMPARISON_COLUMNS = ["g", "similar_minus_adjacent", "ci_low", "ci_high", "same_groups"]


@dataclass
class GQARun:
    summary: pd.DataFrame  # one row per (grouping, g), plus the original (g = 1)
    heads: pd.DataFrame  # grouping, g, layer, head, js
    groups: pd.DataFrame  # grouping, g, layer, kv_heads ("0+1 2+3")
    task: pd.DataFrame | None = None  # grouping, g, logit_diff, change
    comparison: pd.DataFrame | None = None  # COMPARISON_COLUMNS (both groupings run)
    config: GQAConfig = field(default_factory=GQAConfig)


def js_divergence(p: Float[Tensor, "... k"], q: Float[Tensor, "... k"]) -> Float[Tensor, ...]:
    """Jensen-Shannon divergence in bits between rows of two attention patterns (float64)."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)

    def kl(a: Tensor) -> Tensor:
        return torch.where(a > 0, a * (torch.log2(a.clamp(min=1e-300)) - torch.log2(m.clamp(min=1e-300))), 0.0).sum(-1)

    return (0.5 * kl(p) + 0.5 * kl(q)).clamp(min=0.0)


def check_gqa(model: Any, config: GQAConfig) -> tuple[int, list[int]]:
    """Refuse, before anything runs, what the what-if cannot do; return ``(KV heads per layer, group sizes)``."""
    if getattr(model, "is_encoder", False):
        raise InputError("the GQA what-if measures next-token loss, which a bidirectional encoder does not model")
    n_kv = attention_spec(model).n_kv_heads
    if n_kv == 1:
        raise InputError("the model is already multi-query (1 KV head per layer): there is nothing to pool")
    sizes = list(config.group_sizes) if config.group_sizes else group_sizes(n_kv)
    for g in sizes:
        if n_kv % g:
            raise InputError(
                f"group size {g} does not divide the {n_kv} KV heads per layer (choose from {', '.join(map(str, group_sizes(n_kv)))})",
                group=g,
            )
    bad = [x for x in config.groupings if x not in GROUPINGS]
    if bad or not config.groupings:
        raise InputError(f"unknown grouping {', '.join(bad) or '(none)'}: choose from {', '.join(GROUPINGS)}")
    return n_kv, sizes


def variant_groups(model: Any, data: EvalSet, config: GQAConfig) -> tuple[dict[tuple[str, int], Groups], list[np.ndarray]]:
    """``(grouping, g) -> {layer: groups}`` for every variant, and the per-layer distances used for ``similar``."""
    n_kv, sizes = check_gqa(model, config)
    dists = kv_distances(model, data, batch_size=config.batch_size)[0]
    out: dict[tuple[str, int], Groups] = {}
    for g in sizes:
        for grouping in config.groupings:
            if grouping == "adjacent":
                out[(grouping, g)] = {layer: adjacent_groups(n_kv, g) for layer in range(model.n_layers)}
            else:
                out[(grouping, g)] = {layer: similar_groups(dists[layer], g) for layer in range(model.n_layers)}
    return out, dists


class _Pattern:
    """Reducer that keeps a layer's pattern (float32) as it is."""

    name = "pattern"

    @staticmethod
    def partial(rows: Tensor, ctx: Any, q0: int) -> Sums:
        return {"rows": rows}

    @staticmethod
    def finish(sums: Sums, ctx: Any) -> Tensor:
        return sums["rows"].float()


@dataclass(frozen=True)
class _Against:
    """One layer of a pooled pass: the unpooled pattern ``[batch, head, q, k]`` and the counted queries ``[batch, q]``."""

    clean: Tensor
    q_ok: Tensor


class _JSDivergence:
    """Reducer: per head, the Jensen-Shannon divergence from the unpooled rows, summed over the counted queries (float64)."""

    name = "js"

    @staticmethod
    def partial(rows: Tensor, ctx: _Against, q0: int) -> Sums:
        nb = rows.shape[2]
        js = js_divergence(ctx.clean[:, :, q0 : q0 + nb], rows)  # [batch, head, q]
        return {"sum": (js * ctx.q_ok[:, None, q0 : q0 + nb]).sum(dim=(0, 2))}

    @staticmethod
    def finish(sums: Sums, ctx: _Against) -> Tensor:
        return sums["sum"]


def _clean_cache_fits(model: Any, data: EvalSet, config: GQAConfig) -> bool:
    """Whether the unpooled patterns of every window fit :data:`CLEAN_CACHE_BYTES` (else each variant recomputes them)."""
    width = max((w for _, _, w in (data.batch(rows) for rows in data.rows(config.batch_size))), default=0)
    need = len(data) * model.n_layers * model.n_heads * width * width * 4
    if need > CLEAN_CACHE_BYTES:
        log.info("gqa: the unpooled patterns (%d MiB) exceed the cache budget: each variant recomputes them", need >> 20)
    return need <= CLEAN_CACHE_BYTES


def run_gqa(
    model: Any,
    data: EvalSet,
    config: GQAConfig | None = None,
    *,
    task: EvalSet | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    journal: RecordJournal | None = None,
) -> GQARun:
    """Loss, KV cache and per-head pattern movement of every pooled variant (see the module docstring).

    Resumable: ``journal`` (:class:`~headlens.analyses.measure.records.RecordJournal`) receives one
    record per variant as it finishes (``gqa_original``: the unpooled per-window losses;
    ``gqa_variant``: a variant's per-window losses and JS sums) and, when it holds those of an
    interrupted run, those variants are not measured again.  Every number is computed from the
    records (a run without a journal keeps them in memory), so a resumed result equals an
    uninterrupted one.
    """
    config = config or GQAConfig()
    if data.metric != "loss":
        raise InputError("the GQA what-if is measured on text windows (loss); give a task with task=")
    check_pooling(model)
    variants, dists = variant_groups(model, data, config)
    journal = journal if journal is not None else MemoryJournal()
    done = {(r["grouping"], int(r["g"])): r for r in records_of(journal, "gqa_variant")}
    todo = [key for key in variants if key not in done]
    clean = _CleanPatterns(model, keep=bool(todo) and _clean_cache_fits(model, data, config))
    with torch.inference_mode():
        if not records_of(journal, "gqa_original"):
            journal.append([_original_record(model, data, config, clean)])
        for n_done, key in enumerate(todo, start=len(variants) - len(todo) + 1):
            journal.append([_variant_record(model, data, config, clean, key, variants[key])])
            done[key] = journal.records[-1]
            if progress is not None:
                progress("gqa", n_done, len(variants))
    per_item = {("original", 1): records_of(journal, "gqa_original")[-1]["values"], **{key: done[key]["values"] for key in variants}}
    per_item = {key: np.asarray(v, dtype=np.float64) for key, v in per_item.items()}
    summary, heads, groups = _variant_tables(model, config, variants, dists, done, per_item)
    return GQARun(
        summary=summary,
        heads=heads,
        groups=groups,
        task=_task_values(model, task, variants, config) if task is not None else None,
        comparison=_similar_vs_adjacent(variants, per_item),
        config=config,
    )


class _CleanPatterns:
    """The unpooled pass of a batch: its logits and each layer's pattern; with ``keep`` the
    patterns are kept per batch (then a later call returns no logits, only the patterns)."""

    def __init__(self, model: Any, *, keep: bool) -> None:
        self.model, self.keep = model, keep
        self.cache: dict[int, dict[int, Tensor]] = {}

    def __call__(self, i: int, toks: Tensor) -> tuple[Tensor, dict[int, Tensor]]:
        if i in self.cache:
            return torch.empty(0), self.cache[i]
        clean: dict[int, Tensor] = {}

        def store(layer: int, out: dict[str, Any], ctx: Any) -> None:
            clean[layer] = out[_Pattern.name]

        logits = reduce_pass(self.model, toks, None, [_Pattern()], context=lambda view: None, on_layer=store, return_type="logits").output
        if self.keep:
            self.cache[i] = clean
        return logits, clean


def _original_record(model: Any, data: EvalSet, config: GQAConfig, clean: _CleanPatterns) -> dict[str, Any]:
    """The ``gqa_original`` record: the unpooled model's per-window losses."""
    vals = []
    for i, rows in enumerate(data.rows(config.batch_size)):
        toks, lengths, _ = data.batch(rows)
        logits, _ = clean(i, toks.to(model.device))
        vals.append(item_values(logits, toks.to(model.device), lengths, data, rows))
    return {"kind": "gqa_original", "values": torch.cat(vals).double().cpu().tolist()}


def _variant_record(
    model: Any, data: EvalSet, config: GQAConfig, clean_pass: _CleanPatterns, key: tuple[str, int], groups: Groups
) -> dict[str, Any]:
    """The ``gqa_variant`` record of one pooled variant: per-window losses, and per head the JS
    divergence from the unpooled rows summed over the counted queries (``js_n`` of them)."""
    js_sum = torch.zeros(model.n_layers, model.n_heads, dtype=torch.float64)
    js_n, vals = 0, []
    for i, rows in enumerate(data.rows(config.batch_size)):
        toks, lengths, width = data.batch(rows)
        toks = toks.to(model.device)
        _, clean = clean_pass(i, toks)
        q_ok = ((torch.arange(width)[None, :] < lengths[:, None]) & (torch.arange(width)[None, :] >= 1)).to(model.device)
        js_n += int(q_ok.sum())

        def add_js(layer: int, out: dict[str, Any], ctx: Any) -> None:
            js_sum[layer] += out[_JSDivergence.name].cpu()

        def against(view: LayerView, clean: dict[int, Tensor] = clean, q_ok: Tensor = q_ok) -> _Against:
            return _Against(clean=clean[view.layer.layer], q_ok=q_ok)

        logits = reduce_pass(
            model, toks, None, [_JSDivergence()], context=against, on_layer=add_js, hooks=pool_hooks(groups), return_type="logits"
        ).output
        vals.append(item_values(logits, toks, lengths, data, rows))
    values = torch.cat(vals).double().cpu().tolist()
    return {"kind": "gqa_variant", "grouping": key[0], "g": key[1], "values": values, "js_sum": js_sum.tolist(), "js_n": js_n}


def _variant_tables(
    model: Any,
    config: GQAConfig,
    variants: dict[tuple[str, int], Groups],
    dists: list[np.ndarray],
    done: dict[tuple[str, int], dict[str, Any]],
    per_item: dict[tuple[str, int], np.ndarray],
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The summary (the original, then one row per variant), the per-head JS and the groups tables."""
    L, H = model.n_layers, model.n_heads
    n_kv = attention_spec(model).n_kv_heads
    own_bytes = int(kv_cache_table(model, KVConfig(cache_dtype=config.cache_dtype))["bytes_per_token"].iloc[0])
    base_items = per_item[("original", 1)]
    base_loss = float(base_items.mean())
    zero = dict.fromkeys(("loss_change", "change_ci_low", "change_ci_high", "mean_js", "max_js", "scatter"), 0.0)
    rows_out = [
        {"grouping": "original", "g": 1, "kv_heads": n_kv, "kv_bytes_per_token": own_bytes, "kv_saved": 0.0, "loss": base_loss, **zero}
    ]
    head_rows, group_rows = [], []
    for key, groups in variants.items():
        grouping, g = key
        loss = float(per_item[key].mean())
        low, high = bootstrap_mean_ci(per_item[key] - base_items)
        js = (torch.tensor(done[key]["js_sum"], dtype=torch.float64) / max(int(done[key]["js_n"]), 1)).numpy()
        per_token = own_bytes // g
        rows_out.append(
            {
                "grouping": grouping,
                "g": g,
                "kv_heads": n_kv // g,
                "kv_bytes_per_token": per_token,
                "kv_saved": 1.0 - per_token / own_bytes,
                "loss": loss,
                "loss_change": loss - base_loss,
                "change_ci_low": float(low),
                "change_ci_high": float(high),
                "mean_js": float(js.mean()),
                "max_js": float(js.max()),
                "scatter": float(sum(scatter(dists[layer], groups[layer]) for layer in range(L))),
            }
        )
        head_rows += [
            {"grouping": grouping, "g": g, "layer": layer, "head": h, "js": float(js[layer, h])} for layer in range(L) for h in range(H)
        ]
        group_rows += [
            {"grouping": grouping, "g": g, "layer": layer, "kv_heads": " ".join("+".join(map(str, grp)) for grp in groups[layer])}
            for layer in range(L)
        ]
    return pd.DataFrame(rows_out, columns=SUMMARY_COLUMNS), pd.DataFrame(head_rows), pd.DataFrame(group_rows)


def _similar_vs_adjacent(variants: dict[tuple[str, int], Groups], per_item: dict[tuple[str, int], np.ndarray]) -> pd.DataFrame | None:
    """Per group size with both groupings: the loss of ``similar`` minus ``adjacent``, with its interval."""
    comp = []
    for g in sorted({g for _, g in variants}):
        if ("similar", g) in variants and ("adjacent", g) in variants:
            diff = per_item[("similar", g)] - per_item[("adjacent", g)]
            low, high = bootstrap_mean_ci(diff)
            same = variants[("similar", g)] == variants[("adjacent", g)]
            comp.append(
                {"g": g, "similar_minus_adjacent": float(diff.mean()), "ci_low": float(low), "ci_high": float(high), "same_groups": same}
            )
    return pd.DataFrame(comp, columns=COMPARISON_COLUMNS) if comp else None


def _task_values(model: Any, task: EvalSet, variants: dict[tuple[str, int], Groups], config: GQAConfig) -> pd.DataFrame:
    """The task metric (logit difference) of the original and of every pooled variant."""

    def measure(hooks: Sequence[tuple[str, Callable[..., Any]]]) -> float:
        vals = []
        with torch.inference_mode(), attached(model.bridge, list(hooks)):
            for rows in task.rows(config.batch_size):
                toks, lengths, _ = task.batch(rows)
                vals.append(model_values(model, toks, lengths, task, rows))
        return float(torch.cat(vals).mean())

    base = measure([])
    rows = [{"grouping": "original", "g": 1, task.metric: base, "change": 0.0}]
    for (grouping, g), groups in variants.items():
        v = measure(pool_hooks(groups))
        rows.append({"grouping": grouping, "g": g, task.metric: v, "change": v - base})
    return pd.DataFrame(rows)
