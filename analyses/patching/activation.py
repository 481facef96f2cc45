"""Activation patching of every head's output (``hook_z``, the input of the output projection).

* **denoising**: run the corrupted inputs with one head's ``z`` taken from the clean run; the
  normalised metric (:mod:`headlens.analyses.patching.effects`) says how much of the clean
  behaviour that one head restores (0: none, 1: all).
* **noising**: run the clean inputs with one head's ``z`` taken from the corrupted run; on the
  same 0 (corrupted) .. 1 (clean) scale, a value well below 1 means the head is needed.

All positions at once, or each position alone (``per_position``).  ``hook_z`` has one slot per
query head on every family (grouped-query models included), so this works wherever the census
does.  Cost: one cached forward per direction and input, then for each layer ``L`` one forward
per batch for all its heads (one copy of the batch per head) started at block ``L``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.patching.config import DIRECTIONS, PatchConfig
from headlens.analyses.patching.effects import Gap, normalised_effects, subset_counts, task_gap
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.analyses.patching.runs import Patch, RunCache, cache_run, can_start_late, patched_values
from headlens.probes.loading import LoadedModel, check_layers_heads

log = logging.getLogger(__name__)

__all__ = ["PatchConfig", "PatchRun", "DIRECTIONS", "run_patching", "PATCH_COLUMNS"]

#: Columns of the head table (per position: ``pos`` after ``name``).
PATCH_COLUMNS = ["layer", "head", "name"] + [f"{d}{s}" for d in DIRECTIONS for s in ("", "_low", "_high", "_metric")]


@dataclass
class PatchRun:
    """The head table and everything needed to read it."""

    table: pd.DataFrame  # PATCH_COLUMNS (plus ``pos``)
    gap: Gap
    per_item: dict[str, np.ndarray] = field(default_factory=dict)  # direction -> [patch, item] raw metric
    info: dict[str, Any] = field(default_factory=dict)


def _patches(selection: dict[int, list[int]], width: int, per_position: bool) -> dict[int, list[Patch]]:
    if not per_position:
        return {layer: [(h, None) for h in heads] for layer, heads in selection.items()}
    return {layer: [(h, p) for h in heads for p in range(width)] for layer, heads in selection.items()}


def _direction_values(
    model: LoadedModel,
    target_set: EvalSet,
    target_cache: RunCache | None,
    source: RunCache,
    plan: dict[int, list[Patch]],
    config: PatchConfig,
    *,
    progress: Callable[[str, int, int], None] | None,
    stage: str,
    done: int,
    total: int,
) -> list[np.ndarray]:
    """Per layer of ``plan``, ``[patch, item]``: the metric on ``target_set`` with each patch's ``z``
    taken from ``source`` (started at the layer from ``target_cache``'s residuals when given);
    ``progress(stage, done + layers so far, total)`` after each layer."""
    values = []
    for layer in sorted(plan):
        values.append(
            patched_values(
                model, target_set, target_cache, source.z[layer], layer, plan[layer], batch_size=config.batch_size, max_rows=config.max_rows
            ).numpy()
        )
        if progress is not None:
            progress(stage, done + len(values), total)
    return values


def _effect_columns(
    columns: dict[str, Any], direction: str, raw: np.ndarray, clean: RunCache, corrupt: RunCache, gap: Gap, config: PatchConfig
) -> None:
    """Add ``direction``'s columns to ``columns``: the normalised effect with its interval, the raw
    metric and, per position, how many pairs have the position (logging why an effect is NaN)."""
    clean_v, corrupt_v = clean.values.numpy(), corrupt.values.numpy()
    eff, low, high = normalised_effects(raw, clean_v, corrupt_v, gap, n_resamples=config.n_resamples, seed=config.seed)
    columns[direction], columns[f"{direction}_low"], columns[f"{direction}_high"] = eff, low, high
    if config.per_position and "n_pairs" not in columns:  # a position only some pairs have: its own count, and why it is NaN
        columns["n_pairs"], why = subset_counts(raw, clean_v, corrupt_v, gap, n_resamples=config.n_resamples, seed=config.seed)
        undefined = (
            {str(w): int(c) for w, c in zip(*np.unique(why[why != ""].astype(str), return_counts=True), strict=True)} if gap.defined else {}
        )
        for w, c in undefined.items():
            log.warning("%d patches have no normalised effect: %s", c, w)
    with np.errstate(invalid="ignore"):
        columns[f"{direction}_metric"] = np.nanmean(raw, axis=1) if raw.size else np.zeros(0)


def run_patching(
    model: LoadedModel, task: PairTask, config: PatchConfig | None = None, *, progress: Callable[[str, int, int], None] | None = None
) -> PatchRun:
    """Activation patching of the selected heads (see the module doc).

    ``progress(stage, done, total)`` is called after each layer of each direction.
    """
    config = config or PatchConfig()
    selection = check_layers_heads(model, None, config.heads)
    layers = sorted(selection)
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=config.batch_size)
    late = config.start_late and can_start_late(model, clean_set)
    resid_layers = [layer for layer in layers if layer > 0] if late else []
    bs = config.batch_size
    clean = cache_run(model, clean_set, z_layers=layers, resid_layers=resid_layers if "noising" in config.directions else [], batch_size=bs)
    corrupt = cache_run(
        model, corrupt_set, z_layers=layers, resid_layers=resid_layers if "denoising" in config.directions else [], batch_size=bs
    )
    metric = clean_set.metric
    gap = task_gap(metric, clean.values.numpy(), corrupt.values.numpy(), n_resamples=config.n_resamples, seed=config.seed)
    if not gap.defined:
        log.warning("normalised patching effects are undefined: %s", gap.reason)
    plan = _patches(selection, int(task.lengths.max()), config.per_position)
    rows = [(layer, h, p) for layer in layers for h, p in plan[layer]]
    columns: dict[str, Any] = {"layer": [r[0] for r in rows], "head": [r[1] for r in rows], "name": [f"{r[0]}.{r[1]}" for r in rows]}
    if config.per_position:
        columns["pos"] = [r[2] for r in rows]
    per_item: dict[str, np.ndarray] = {}
    total, done = len(layers) * len(config.directions), 0
    for direction in [d for d in DIRECTIONS if d in config.directions]:
        target_set, target_cache, source = (corrupt_set, corrupt, clean) if direction == "denoising" else (clean_set, clean, corrupt)
        values = _direction_values(
            model,
            target_set,
            target_cache if late else None,
            source,
            plan,
            config,
            progress=progress,
            stage=direction,
            done=done,
            total=total,
        )
        done += len(values)
        per_item[direction] = raw = np.concatenate(values) if values else np.zeros((0, len(task)))
        _effect_columns(columns, direction, raw, clean, corrupt, gap, config)
    info = {
        "metric": metric,
        "gap": gap.describe(),
        "directions": list(config.directions),
        "per_position": config.per_position,
        "started_late": late,
        "batch_size": bs,
        "n_resamples": config.n_resamples,
        "seed": config.seed,
        "interval": "95% percentile bootstrap over pairs of the linearised ratio of means (headlens.analyses.patching.effects)",
        "task": task.describe(),
    }
    return PatchRun(table=pd.DataFrame(columns), gap=gap, per_item=per_item, info=info)
