"""Projection knockout: tie one attention projection to another in one layer (or head) and measure what breaks.

Kinds (:data:`headlens.analyses.design.edits.KINDS`): ``q=k`` (queries from the key projection:
``q_i . k_j = k_i . k_j``, a symmetric score matrix, so a head can no longer prefer ``j = i - 1``
over ``j = i + 1`` by content alone: the causal mask is all that breaks the symmetry), ``v=k``
(values from the key projection: what a head moves is what it matches on) and ``q=k=v``.

:func:`run_knockouts` gives the loss change of each knockout (one layer at a time, all its heads,
or with ``per_head`` each head alone); :func:`knockout_roles` re-runs the census with each layer's
knockout in place and lists, per head, the roles it had and has; :func:`run_projections` runs both
(the census when given its config) into a :class:`ProjectionsRun`.  Every knockout is first checked
to take effect on this family (:func:`headlens.analyses.design.edits.check_knockout`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.incremental import MAX_CACHE_BYTES, stream_bytes
from headlens.analyses.design.config import KINDS, ProjectionConfig
from headlens.analyses.design.edits import check_knockout, knockout_hooks
from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.heads.classify import classify_heads
from headlens.analyses.heads.prefix import CensusPrefix
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.metrics import item_values
from headlens.analyses.measure.records import MemoryJournal, RecordJournal, records_of
from headlens.probes.errors import InputError
from headlens.probes.hooks import attached
from headlens.probes.patch import Start, check_start, patched_forward, resid_site

__all__ = [
    "ProjectionConfig",
    "ProjectionsRun",
    "run_projections",
    "knockout_targets",
    "run_knockouts",
    "knockout_roles",
    "roles_by_head",
    "LOSS_COLUMNS",
    "ROLE_CHANGE_COLUMNS",
]

log = logging.getLogger(__name__)

LOSS_COLUMNS = ["layer", "head", "kind", "loss", "loss_change", "relative_change"]
ROLE_CHANGE_COLUMNS = ["knocked_layer", "kind", "layer", "head", "roles_before", "roles_after", "lost", "gained"]


@dataclass(kw_only=True)
class ProjectionsRun:
    """One projection-knockout study (:func:`run_projections`): the loss change of each knockout and, when the
    census ran under each knockout (``census`` is its config; ``None``: it did not), the roles changed and the
    census scores."""

    losses: pd.DataFrame  # LOSS_COLUMNS, the intact model first (kind "none")
    role_changes: pd.DataFrame | None = None  # ROLE_CHANGE_COLUMNS
    census_scores: pd.DataFrame | None = None  # the census under each knockout, stacked (knocked_layer, kind)
    config: ProjectionConfig = field(default_factory=ProjectionConfig)
    census: CensusConfig | None = None


def run_projections(
    model: Any,
    data: EvalSet,
    config: ProjectionConfig | None = None,
    *,
    census: CensusConfig | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    journal: RecordJournal | None = None,
) -> ProjectionsRun:
    """:func:`run_knockouts` on ``data`` and, with ``census``, :func:`knockout_roles` (resumable in one ``journal``)."""
    config = config or ProjectionConfig()
    losses = run_knockouts(model, data, config, progress=progress, journal=journal)
    changes, scores = knockout_roles(model, census, config, progress=progress, journal=journal) if census is not None else (None, None)
    return ProjectionsRun(losses=losses, role_changes=changes, census_scores=scores, config=config, census=census)


def knockout_targets(model: Any, config: ProjectionConfig) -> list[tuple[int, int | None, str]]:
    """``(layer, head or None, kind)`` of every knockout; refuses unknown kinds, layers and families the hooks cannot carry."""
    bad = [k for k in config.kinds if k not in KINDS]
    if bad or not config.kinds:
        raise InputError(f"unknown knockout {', '.join(bad) or '(none)'}: choose from {', '.join(KINDS)}")
    layers = list(config.layers) if config.layers is not None else list(range(model.n_layers))
    wrong = [x for x in layers if not 0 <= x < model.n_layers]
    if wrong:
        raise InputError(f"layer {wrong[0]} does not exist (the model has layers 0..{model.n_layers - 1})", layer=wrong[0])
    for kind in config.kinds:
        check_knockout(model, kind)
    out: list[tuple[int, int | None, str]] = []
    for layer in layers:
        for kind in config.kinds:
            out.append((layer, None, kind))
            if config.per_head:
                out += [(layer, h, kind) for h in range(model.n_heads)]
    return out


def run_knockouts(
    model: Any,
    data: EvalSet,
    config: ProjectionConfig | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    journal: RecordJournal | None = None,
) -> pd.DataFrame:
    """Loss of every knockout against the intact model (first row: ``kind = "none"``). ``head`` is -1 for a whole layer.

    Resumable: ``journal`` receives one record per knockout as it finishes (``knockout_base``,
    ``knockout``: per-window losses) and skips those it already holds; the table is computed
    from the records either way (in memory without a journal).
    """
    config = config or ProjectionConfig()
    if data.metric != "loss":
        raise InputError("projection knockouts are measured on text windows (loss)")
    targets = knockout_targets(model, config)
    journal = journal if journal is not None else MemoryJournal()
    done = {(int(r["layer"]), int(r["head"]), str(r["knockout"])): r["values"] for r in records_of(journal, "knockout")}
    pending = [t for t in targets if (t[0], -1 if t[1] is None else t[1], t[2]) not in done]
    measure = _Losses(model, data, config, _prefix_layers(model, data, config, pending))
    with torch.inference_mode():
        base = records_of(journal, "knockout_base")
        if not base or (measure.resid and pending):  # resumed: the intact pass again, for its residuals (the journal's values stand)
            values = measure([])
            if not base:
                journal.append([{"kind": "knockout_base", "values": values}])
        for i, (layer, head, kind) in enumerate(targets, start=1):
            key = (layer, -1 if head is None else head, kind)
            if key not in done:
                values = measure(knockout_hooks(model, layer, kind, None if head is None else [head]), layer)
                journal.append([{"kind": "knockout", "layer": key[0], "head": key[1], "knockout": kind, "values": values}])
                done[key] = journal.records[-1]["values"]
            if progress is not None:
                progress("projections", i, len(targets))
    return _loss_table(float(np.mean(records_of(journal, "knockout_base")[-1]["values"])), targets, done)


def _prefix_layers(model: Any, data: EvalSet, config: ProjectionConfig, pending: list[tuple[int, int | None, str]]) -> list[int]:
    """The knocked layers whose knockouts run from a kept residual (none when not allowed, when the
    residuals would not fit, or when a continued forward does not reproduce a full one).

    A knockout of layer L leaves the residual entering L as it is: the intact pass keeps it and
    each knockout runs blocks L.. only (checked against a full forward once)."""
    layers = sorted({layer for layer, _, _ in pending if layer > 0})
    n, width = data.tokens.shape
    size = stream_bytes(model, n * width, len(layers))
    if layers and config.prefix_reuse and size > MAX_CACHE_BYTES:  # the residuals kept on the device would not fit
        log.info(
            "projection knockouts: one full forward per knockout (the residuals of %d layers would take %.1f GiB)",
            len(layers),
            size / 2**30,
        )
    prefix = bool(layers) and config.prefix_reuse and size <= MAX_CACHE_BYTES and check_start(model, data.longest()[0], layers)
    return layers if prefix else []


class _Losses:
    """Per-window losses of the model with hooks in place, batch by batch; the intact pass (no
    hooks) keeps the residual entering each of ``prefix_layers``, from which a knockout of that
    layer then runs."""

    def __init__(self, model: Any, data: EvalSet, config: ProjectionConfig, prefix_layers: list[int]) -> None:
        self.model, self.data = model, data
        self.batches = data.rows(config.batch_size)
        self.resid: dict[int, list[torch.Tensor]] = {layer: [] for layer in prefix_layers}

    def __call__(self, hooks: list[tuple[str, Callable[..., Any]]], layer: int = 0) -> list[float]:
        model, data, resid = self.model, self.data, self.resid
        vals = []
        for b, rows in enumerate(self.batches):
            toks, lengths, _ = data.batch(rows)
            toks = toks.to(model.device)
            if layer > 0 and resid:
                logits = patched_forward(model, toks, hooks, start=Start(layer=layer, resid=resid[layer][b]))
            else:
                keep = [(resid_site(lay).hook, _keeper(resid[lay])) for lay in resid] if not hooks else []
                logits = patched_forward(model, toks, [*hooks, *keep])
            vals.append(item_values(logits, toks, lengths, data, rows))
        return torch.cat(vals).double().cpu().tolist()


def _loss_table(base: float, targets: list[tuple[int, int | None, str]], done: dict[tuple[int, int, str], list[float]]) -> pd.DataFrame:
    """One row for the intact model (``base``), then one per knockout."""
    out = [{"layer": -1, "head": -1, "kind": "none", "loss": base, "loss_change": 0.0, "relative_change": 0.0}]
    for layer, head, kind in targets:
        v = float(np.mean(done[(layer, -1 if head is None else head, kind)]))
        out.append(
            {
                "layer": layer,
                "head": -1 if head is None else head,
                "kind": kind,
                "loss": v,
                "loss_change": v - base,
                "relative_change": (v - base) / abs(base) if base else float("nan"),
            }
        )
    return pd.DataFrame(out, columns=LOSS_COLUMNS)


def _keeper(store: list[torch.Tensor]) -> Callable[..., None]:
    def fn(x: torch.Tensor, hook: Any = None) -> None:
        store.append(x.detach().clone())

    return fn


def roles_by_head(scores: pd.DataFrame) -> dict[tuple[int, int], set[str]]:
    """``(layer, head) -> roles`` from census scores (:func:`headlens.analyses.heads.classify.classify_heads`)."""
    roles = classify_heads(scores).roles  # one row per (head, role)
    out: dict[tuple[int, int], set[str]] = {}
    heads = scores[["layer", "head"]].drop_duplicates()
    for layer, head in zip(heads["layer"].astype(int).tolist(), heads["head"].astype(int).tolist(), strict=True):
        out[(layer, head)] = set()
    for layer, head, role in zip(roles["layer"].astype(int).tolist(), roles["head"].astype(int).tolist(), roles["role"], strict=True):
        out[(layer, head)].add(str(role))
    return out


def knockout_roles(
    model: Any,
    census_config: Any = None,
    config: ProjectionConfig | None = None,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    journal: RecordJournal | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The census with each layer's knockout in place: ``(role changes, scores)``.

    Role changes: one row per (knocked layer, kind, head of any layer) whose roles differ from the
    intact model's, plus one row per head for the intact model (``kind = "none"``).  Scores: the
    census tables stacked, with ``knocked_layer`` and ``kind`` columns.  Resumable as
    :func:`run_knockouts`: one ``knockout_census`` record (the census scores) per knockout.
    """
    config = replace(config or ProjectionConfig(), per_head=False)
    census_config = census_config or CensusConfig(n_prompts=32, n_bootstrap=200)
    targets = knockout_targets(model, config)
    journal = journal if journal is not None else MemoryJournal()
    done = {(int(r["knocked_layer"]), str(r["knockout"])): r for r in records_of(journal, "knockout_census")}
    pending = [(layer, kind) for layer, _, kind in targets if (layer, kind) not in done]
    # A knockout of layer L leaves layers 0..L-1 as they are: the intact census keeps its stimuli,
    # the stream entering each knocked layer and its per-prompt results, and each knockout's census
    # runs blocks L.. only (the same table as a full census).
    prefix = CensusPrefix(layers=tuple(sorted({layer for layer, _ in pending if layer > 0}))) if config.prefix_reuse else None
    if (-1, "none") not in done or (prefix is not None and pending):  # resumed: the intact census again, for what it keeps
        scores = run_census(model, census_config, prefix=prefix).scores
        if (-1, "none") not in done:
            journal.append([_census_record(-1, "none", scores)])
            done[(-1, "none")] = journal.records[-1]
    for i, (layer, _, kind) in enumerate(targets, start=1):
        if (layer, kind) not in done:
            with attached(model.bridge, knockout_hooks(model, layer, kind)):
                result = run_census(model, census_config, prefix=prefix.starting_at(layer) if prefix is not None else None)
            journal.append([_census_record(layer, kind, result.scores)])
            done[(layer, kind)] = journal.records[-1]
        if progress is not None:
            progress("census", i, len(targets))
    runs = [
        (layer, kind, _census_scores(done[(layer, kind)])) for layer, kind in [(-1, "none"), *((layer, kind) for layer, _, kind in targets)]
    ]
    base = runs[0][2]
    before = roles_by_head(base)
    rows = [
        {
            "knocked_layer": -1,
            "kind": "none",
            "layer": lh[0],
            "head": lh[1],
            "roles_before": _join(r),
            "roles_after": _join(r),
            "lost": "",
            "gained": "",
        }
        for lh, r in sorted(before.items())
    ]
    for layer, kind, scores in runs[1:]:
        after = roles_by_head(scores)
        for lh in sorted(before):
            b, a = before[lh], after.get(lh, set())
            if a != b:
                rows.append(
                    {
                        "knocked_layer": layer,
                        "kind": kind,
                        "layer": lh[0],
                        "head": lh[1],
                        "roles_before": _join(b),
                        "roles_after": _join(a),
                        "lost": _join(b - a),
                        "gained": _join(a - b),
                    }
                )
    stacked = pd.concat([s.assign(knocked_layer=layer, kind=kind) for layer, kind, s in runs], ignore_index=True)
    return pd.DataFrame(rows, columns=ROLE_CHANGE_COLUMNS), stacked


def _census_record(layer: int, kind: str, scores: pd.DataFrame) -> dict[str, Any]:
    rows = [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in scores.to_dict("records")]
    return {"kind": "knockout_census", "knocked_layer": layer, "knockout": kind, "columns": list(scores.columns), "scores": rows}


def _census_scores(record: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(record["scores"], columns=record["columns"])


def _join(roles: Sequence[str] | set[str]) -> str:
    return ";".join(sorted(roles))
