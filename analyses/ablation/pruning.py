"""Iterative head pruning (Michel et al. 2019) with a random-order control and KV-cache savings.

Procedure (:func:`run_pruning`):

1. ``step 0``: nothing removed; the metric of the full model is the baseline ``v0``.
2. Each step computes Michel importance (:func:`headlens.analyses.ablation.gradients.head_importance`,
   per-layer L2 normalised) on the model as pruned so far (with the ``embedding`` metric, whose
   gradient is zero in the unablated model, the exact importance instead: the change in the
   metric when the head alone is zero-ablated from the model as pruned so far,
   :func:`exact_importance`, not normalised), removes the
   ``max(1, round(step x remaining))`` least important remaining heads (ties: lower layer, then
   lower head first), and measures the metric.  Removing a head is zero ablation of its ``z``.
3. Until ``max_fraction`` of the heads are gone (default: all of them).

Control: for each of ``random_seeds`` seeds, one random order of all heads; the metric with the
first ``n`` heads of that order removed, for the same ``n`` as every importance step.  The curve
reports the mean, standard deviation, minimum and maximum over seeds.

**Removable fraction**: the largest fraction removed at a step such that this step and every
earlier one degrade the metric by at most ``max_increase`` relative to ``v0``
(``(v - v0) / |v0|`` for loss; ``(v0 - v) / |v0|`` for logit-diff, where lower is worse;
``v - v0``, absolute, for the embedding change, whose unablated value is 0).  The heads removed at
that step are the pruned set (a :class:`headlens.analyses.measure.masks.HeadMask`).

**Shared passes** (the numbers are those of one pass per ranking and one full forward per value,
to float rounding, tested): a step's value comes from the gradient pass (or, for the embedding
change, the exact table's baseline pass) that ranks the next step's heads, on the same pruned
model (the gates are 1, so the gated model is the model); the ranking is journaled with the step.
Each random order's masks grow one prefix of the order at a time, so each is run from the first
layer with a newly removed head on the previous mask's residuals
(:class:`headlens.analyses.ablation.incremental.MaskSequence`; ``info["random_runs_from_layer"]``
counts the runs by their first layer).

**KV cache saved** per 1,000 tokens: ``2 x kv_heads_removed x d_head x 1000 x bytes_per_value``
at the model's dtype.  With grouped-query attention a KV head is removed only when every query
head sharing it is removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.config import PruneConfig
from headlens.analyses.ablation.gradients import gate_gradients_and_values, importance_from_gradients
from headlens.analyses.ablation.incremental import MaskSequence
from headlens.analyses.ablation.runs import ablated_values
from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask, head_name
from headlens.analyses.measure.metrics import check_metric, worse_by
from headlens.analyses.measure.records import RecordJournal
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

__all__ = [
    "PruneConfig",
    "PruneRun",
    "run_pruning",
    "exact_importance",
    "importance_kind",
    "kv_bytes_saved",
    "CURVE_COLUMNS",
    "step_size",
    "random_order",
]

#: How heads are ranked, by metric kind (``PruneRun.info["importance"]``).
GRADIENT_IMPORTANCE = "Michel et al. 2019: mean over items of |d metric / d gate| on z, L2-normalised per layer"
EXACT_IMPORTANCE = (
    "exact: the change in the metric when the head alone is zero-ablated from the model as pruned so far "
    "(the embedding change has zero gradient in the unablated model, so gradient importance is undefined)"
)

CURVE_COLUMNS = [
    "step",
    "n_removed",
    "fraction_removed",
    "value",
    "relative_change",
    "within_max_increase",
    "kv_heads_removed",
    "kv_bytes_saved_per_1k_tokens",
    "random_mean",
    "random_std",
    "random_min",
    "random_max",
    "removed_this_step",
]


def kv_bytes_saved(model: LoadedModel, removed: set[tuple[int, int]]) -> tuple[int, int]:
    """``(kv_heads_removed, bytes per 1,000 tokens)`` for the removed query heads."""
    n_kv = model.n_kv_heads
    group = model.n_heads // n_kv
    gone = 0
    for layer in range(model.n_layers):
        for g in range(n_kv):
            if all((layer, g * group + j) in removed for j in range(group)):
                gone += 1
    per_value = torch.empty((), dtype=model.dtype).element_size()
    return gone, 2 * gone * model.d_head * 1000 * per_value


@dataclass
class PruneRun:
    curve: pd.DataFrame  # CURVE_COLUMNS, one row per step (step 0 = nothing removed)
    random: pd.DataFrame  # seed, step, n_removed, value
    importance: pd.DataFrame  # layer, head, importance (normalised), importance_raw at step 0
    pruned: HeadMask  # the largest set within max_increase
    unablated_value: float  # the metric of the model as loaded (step 0: nothing removed)
    removable_fraction: float
    config: PruneConfig  # the settings it ran with
    metric: str  # what was measured (the evaluation set's metric)
    info: dict[str, Any] = field(default_factory=dict)


def importance_kind(metric: str) -> str:
    """What ranks the heads for ``metric``: :data:`EXACT_IMPORTANCE` for the embedding change,
    :data:`GRADIENT_IMPORTANCE` otherwise."""
    return EXACT_IMPORTANCE if metric == "embedding" else GRADIENT_IMPORTANCE


def exact_importance(model: LoadedModel, data: EvalSet, *, mask: HeadMask | None = None, batch_size: int = 8) -> torch.Tensor:
    """``[layer, head]`` (float64): the change in the metric when each head alone is zero-ablated
    from the model with ``mask`` heads removed (the exact single-head table,
    :func:`headlens.analyses.ablation.study.run_ablation`); removed heads are NaN."""
    return _exact_importance_and_value(model, data, mask=mask, batch_size=batch_size)[0]


def _exact_importance_and_value(model: LoadedModel, data: EvalSet, *, mask: HeadMask | None, batch_size: int) -> tuple[torch.Tensor, float]:
    """:func:`exact_importance` and the metric of the model with ``mask`` heads removed (the
    study's baseline pass: the same forward ``value_of`` would run)."""
    config = AblationConfig(method="zero", batch_size=batch_size, n_bootstrap=0, attribution=False)
    result = run_ablation(model, data, config, mask=mask)
    out = torch.full((model.n_layers, model.n_heads), float("nan"), dtype=torch.float64)
    for layer, head, delta in zip(result.table["layer"], result.table["head"], result.table["delta"], strict=True):
        out[int(layer), int(head)] = float(delta)
    return out, result.masked_value


def _to_list(t: torch.Tensor) -> list[list[float | None]]:
    """A ``[layer, head]`` tensor for the journal (JSON has no NaN: removed heads are None)."""
    return [[None if v != v else float(v) for v in row] for row in t.tolist()]


def _from_list(rows: list[list[float | None]]) -> torch.Tensor:
    return torch.tensor([[float("nan") if v is None else v for v in row] for row in rows], dtype=torch.float64)


def step_size(config: PruneConfig, total: int, n_removed: int, limit: int) -> int:
    """Heads removed by the next step: ``step`` of the remaining heads, at least 1, never past ``limit``."""
    return min(max(1, round(config.step * (total - n_removed))), limit - n_removed)


def random_order(n_layers: int, n_heads: int, seed: int, index: int) -> list[tuple[int, int]]:
    """The ``index``-th random order of the control (all heads, seeded from ``seed``)."""
    heads_all = [(layer, h) for layer in range(n_layers) for h in range(n_heads)]
    gen = torch.Generator().manual_seed(seed * 1000 + index)
    return [heads_all[i] for i in torch.randperm(len(heads_all), generator=gen).tolist()]


def _pick(importance: torch.Tensor, removed: set[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    cands = [
        (float(importance[layer, h]), layer, h)
        for layer in range(importance.shape[0])
        for h in range(importance.shape[1])
        if (layer, h) not in removed
    ]
    cands.sort()
    return [(layer, h) for _, layer, h in cands[:n]]


def _mask(model: LoadedModel, heads: set[tuple[int, int]] | list[tuple[int, int]]) -> HeadMask:
    return HeadMask.from_heads(heads, n_layers=model.n_layers, n_heads=model.n_heads, model=model.name)


@dataclass
class _Passes:
    """The passes of one pruning run over ``data``: what the model measures with a set of heads
    removed, and the journal each record goes to."""

    model: LoadedModel
    data: EvalSet
    config: PruneConfig
    journal: RecordJournal | None

    def save(self, rec: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append([rec])

    def value_of(self, heads: set[tuple[int, int]]) -> float:
        mask = _mask(self.model, heads) if heads else None
        return float(ablated_values(self.model, self.data, [], mask=mask, batch_size=self.config.batch_size).double().mean())

    def importance_and_value(self, removed: set[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor, float]:
        """``(raw, ranking, value)`` of the model with ``removed`` heads gone, from one pass:
        the gradient pass (or the exact table's baseline pass) also gives the metric."""
        mask = _mask(self.model, removed) if removed else None
        if self.data.metric == "embedding":
            raw, value = _exact_importance_and_value(self.model, self.data, mask=mask, batch_size=self.config.batch_size)
            return raw, raw, value
        grads, values = gate_gradients_and_values(self.model, self.data, mask=mask, batch_size=self.config.batch_size)
        raw = importance_from_gradients(grads, normalise=False)
        return raw, importance_from_gradients(grads), float(values.double().mean())


def _greedy_steps(passes: _Passes, steps: dict[int, dict[str, Any]], limit: int, progress: Callable[[str, int, int], None] | None) -> int:
    """Fill ``steps`` (step -> its record, those of the journal kept) from step 0 (nothing removed)
    until ``limit`` heads are removed, each step removing the least important of the heads left;
    the number of the last step."""
    total = passes.model.n_layers * passes.model.n_heads
    if 0 not in steps:
        raw, normalised, v = passes.importance_and_value(set())
        steps[0] = {
            "kind": "step",
            "step": 0,
            "removed": [],
            "added": [],
            "value": v,
            "importance_raw": raw.tolist(),
            "importance": normalised.tolist(),
        }
        passes.save(steps[0])
    removed: set[tuple[int, int]] = set()
    step = 0
    while len(removed) < limit:
        step += 1
        if step not in steps:
            prev = steps[step - 1]
            # the ranking of the model as pruned so far: stored with the previous step (a journal
            # written before rankings were stored has it for step 0 only)
            imp = _from_list(prev["importance"]) if "importance" in prev else passes.importance_and_value(removed)[1]
            n = step_size(passes.config, total, len(removed), limit)
            added = _pick(imp, removed, n)
            new = removed | set(added)
            rec: dict[str, Any] = {"kind": "step", "step": step, "removed": sorted(map(list, new)), "added": [list(h) for h in added]}
            if len(new) < limit:  # another step follows: its ranking comes from the pass that measures this one
                _, ranking, rec["value"] = passes.importance_and_value(new)
                rec["importance"] = _to_list(ranking)
            else:
                rec["value"] = passes.value_of(new)
            steps[step] = rec
            passes.save(steps[step])
        removed = {tuple(h) for h in steps[step]["removed"]}
        if progress is not None:
            progress("prune", len(removed), limit)
    return step


def _random_control(
    passes: _Passes,
    grid: list[int],
    rand: dict[tuple[int, int], float],
    v0: float,
    progress: Callable[[str, int, int], None] | None,
) -> MaskSequence:
    """Fill ``rand`` ((seed, step) -> value, those of the journal kept): the random-order control at
    the same numbers of removed heads (``grid``, by step); the runs, for their record."""
    model, config = passes.model, passes.config
    runs = MaskSequence(model, passes.data, batch_size=config.batch_size)  # each order's next mask continues from the last one's residuals
    for s in range(config.random_seeds):
        order = random_order(model.n_layers, model.n_heads, config.seed, s)
        runs.reset()
        for st, n in enumerate(grid):
            if (s, st) in rand:
                continue
            rand[(s, st)] = v0 if n == 0 else float(runs.values(set(order[:n])).double().mean())
            passes.save({"kind": "random", "seed": s, "step": st, "n_removed": n, "value": rand[(s, st)]})
            if progress is not None:
                progress("random orders", s * len(grid) + st + 1, config.random_seeds * len(grid))
    return runs


def _curve(
    passes: _Passes, steps: dict[int, dict[str, Any]], n_steps: int, rand: dict[tuple[int, int], float], v0: float
) -> tuple[pd.DataFrame, int]:
    """The curve (:data:`CURVE_COLUMNS`, one row per step up to ``n_steps``) and the last step of the
    run of steps within ``max_increase`` from step 0."""
    model, config, metric = passes.model, passes.config, passes.data.metric
    total = model.n_layers * model.n_heads
    rows = []
    ok_so_far = True
    best = 0
    for st in range(n_steps + 1):
        rec = steps[st]
        rem = {tuple(h) for h in rec["removed"]}
        rel = worse_by(metric, rec["value"], v0)
        ok_so_far = ok_so_far and rel <= config.max_increase
        if ok_so_far:
            best = st
        kv, kv_bytes = kv_bytes_saved(model, rem)
        rv = np.array([rand[(s, st)] for s in range(config.random_seeds)], dtype=np.float64)
        rows.append(
            {
                "step": st,
                "n_removed": len(rem),
                "fraction_removed": len(rem) / total,
                "value": rec["value"],
                "relative_change": rel,
                "within_max_increase": bool(rel <= config.max_increase),
                "kv_heads_removed": kv,
                "kv_bytes_saved_per_1k_tokens": kv_bytes,
                "random_mean": rv.mean() if len(rv) else np.nan,
                "random_std": rv.std(ddof=1) if len(rv) > 1 else (0.0 if len(rv) else np.nan),
                "random_min": rv.min() if len(rv) else np.nan,
                "random_max": rv.max() if len(rv) else np.nan,
                "removed_this_step": " ".join(head_name(*h) for h in rec["added"]),
            }
        )
    return pd.DataFrame(rows, columns=CURVE_COLUMNS), best


def _importance_table(model: LoadedModel, step0: dict[str, Any]) -> pd.DataFrame:
    """Each head's importance at step 0 (nothing removed), normalised and raw."""
    raw0 = torch.tensor(step0["importance_raw"], dtype=torch.float64)
    imp0 = torch.tensor(step0["importance"], dtype=torch.float64)
    return pd.DataFrame(
        [
            {"layer": layer, "head": h, "importance": float(imp0[layer, h]), "importance_raw": float(raw0[layer, h])}
            for layer in range(model.n_layers)
            for h in range(model.n_heads)
        ],
        columns=["layer", "head", "importance", "importance_raw"],
    )


def _pruned_mask(passes: _Passes, step: int, rec: dict[str, Any], v0: float) -> HeadMask:
    """The mask of the heads removed by ``step`` (its record ``rec``), with what it was chosen by."""
    model = passes.model
    best_removed = sorted({tuple(h) for h in rec["removed"]})
    return HeadMask.from_heads(
        best_removed,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        model=model.name,
        info={
            "source": "headlens prune",
            "step": step,
            "fraction_removed": len(best_removed) / (model.n_layers * model.n_heads),
            "metric": passes.data.metric,
            "value": rec["value"],
            "baseline_value": v0,
            "max_increase": passes.config.max_increase,
            "kv_bytes_saved_per_1k_tokens": kv_bytes_saved(model, set(best_removed))[1],
        },
    )


def run_pruning(
    model: LoadedModel,
    data: EvalSet,
    config: PruneConfig | None = None,
    *,
    journal: RecordJournal | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> PruneRun:
    """Run the iterative pruning and its random control (see module doc); resumable via ``journal``."""
    config = config or PruneConfig()
    check_metric(model, data.metric)
    total = model.n_layers * model.n_heads
    limit = int(np.floor(config.max_fraction * total + 1e-9))
    if limit < 1:
        raise InputError(f"max_fraction={config.max_fraction} removes no head of {total}", max_fraction=config.max_fraction)
    records = journal.records if journal is not None else []
    passes = _Passes(model, data, config, journal)
    steps = {r["step"]: r for r in records if r.get("kind") == "step"}
    n_steps = _greedy_steps(passes, steps, limit, progress)
    v0 = steps[0]["value"]
    grid = [len(steps[s]["removed"]) for s in range(n_steps + 1)]
    rand = {(r["seed"], r["step"]): r["value"] for r in records if r.get("kind") == "random"}
    runs = _random_control(passes, grid, rand, v0, progress)
    curve, best = _curve(passes, steps, n_steps, rand, v0)
    random_df = pd.DataFrame(
        [
            {"seed": s, "step": st, "n_removed": grid[st], "value": rand[(s, st)]}
            for s in range(config.random_seeds)
            for st in range(n_steps + 1)
        ],
        columns=["seed", "step", "n_removed", "value"],
    )
    pruned = _pruned_mask(passes, best, steps[best], v0)
    return PruneRun(
        curve=curve,
        random=random_df,
        importance=_importance_table(model, steps[0]),
        pruned=pruned,
        unablated_value=v0,
        removable_fraction=pruned.info["fraction_removed"],
        config=config,
        metric=data.metric,
        info={
            "steps": n_steps,
            "kv_heads_per_layer": model.n_kv_heads,
            "importance": importance_kind(data.metric),
            "random_runs_from_layer": {str(k): v for k, v in sorted(runs.runs.items())},  # the random orders' runs by their first layer run
        },
    )
