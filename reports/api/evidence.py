"""``headlens.evidence``: test each role of a census with the intervention that role predicts.

A census says which heads *look* like sink, previous-token, induction ... heads from their attention;
the evidence run asks whether the model *uses* them that way (removing a sink changes the loss,
knocking out a previous-token head hurts induction, ...: :mod:`headlens.analyses.patching.evidence`).
It returns a new :class:`~headlens.reports.api.census.CensusResult`: the census's tables plus
``evidence`` (one row per tested (head, role)), an ``evidence`` column in ``heads``, and the
manifest's ``evidence``, ``config.evidence`` and ``composition_evidence`` entries; saved, that is
``headlens classify --evidence``'s ``evidence.csv`` beside the census files.  The census itself is
not changed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import pandas as pd

from headlens.analyses.circuits.composition import composition_evidence
from headlens.analyses.heads.classify import HeadRoles
from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS, EvidenceConfig, evidence_rule, role_evidence, sink_text
from headlens.probes.config import to_dict
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, weights_fingerprint
from headlens.reports.api.census_text import census_summary_of
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result
from headlens.reports.render.evidence_text import EVIDENCE_FILE, evidence_joined

if TYPE_CHECKING:  # census.py imports this module (census(evidence=...) calls the verb)
    from headlens.reports.api.census import CensusResult

log = logging.getLogger(__name__)

__all__ = ["evidence"]


def evidence(
    model: LoadedModel | str,
    census: CensusResult,
    config: EvidenceConfig | None = None,
    /,
    *,
    n: int = 32,
    T: int = 20,
    seed: int = 0,
    smoke: bool = False,
) -> CensusResult:
    """``census`` with each of its roles tested by the intervention the role predicts: a new
    :class:`~headlens.reports.api.census.CensusResult` whose ``evidence`` table holds one row per
    (head, role) with its verdict (``census`` is left as it was).

    ``model``: the model the census was run on (a loaded model, or a name loaded with default
    settings); another shape or other weights is a one-line :class:`InputError`.  ``config`` or
    keywords: :class:`~headlens.analyses.patching.evidence.EvidenceConfig`'s fields: ``n`` pairs,
    sequences or windows per test (at least 10 for a verdict), ``T`` random tokens per copy,
    ``seed``, ``smoke`` (no verdicts: a quick run of the same code).  A census of a pruned model
    (``mask=``) is refused: the interventions run on the unpruned model.
    """
    if not isinstance(census, Result) or census.kind != "census":
        raise InputError(f"census must be a CensusResult (from headlens.census), got {type(census).__name__}", census=None)
    if config is not None and not isinstance(config, EvidenceConfig):
        raise InputError(f"config must be an EvidenceConfig, got {type(config).__name__}", config=None)
    cfg = config if config is not None else EvidenceConfig(n=n, T=T, seed=seed, smoke=smoke)
    if census.manifest.get("mask"):
        raise InputError(
            "evidence with mask: the interventions run on the unpruned model, so they would not test the pruned model's roles",
            mask=census.manifest["mask"],
        )
    loaded = as_loaded(model)
    _check_same_model(loaded, census)
    prepend_bos = bool(census.manifest.get("prepend_bos", True))
    roles = census.roles
    table = (
        role_evidence(loaded, roles, n=cfg.n, T=cfg.T, seed=cfg.seed, prepend_bos=prepend_bos, smoke=cfg.smoke)
        if len(roles)
        else pd.DataFrame(columns=EVIDENCE_COLUMNS)
    )
    heads = census.heads.copy()
    heads["evidence"] = evidence_joined(table, heads)
    tables = {**census.tables, "heads": heads, "evidence": table}
    manifest = dict(census.manifest)
    manifest["evidence"] = {
        "file": EVIDENCE_FILE,
        "prepend_bos": prepend_bos,
        "rule": evidence_rule(),
        "counts": table["evidence"].value_counts().to_dict(),
        "sink_text": sink_text(loaded).describe(),  # which text the sink test read, why, its sha256 and length
    }
    manifest["config"] = {**manifest.get("config", {}), "evidence": to_dict(cfg)}
    manifest["composition_evidence"] = composition_evidence(loaded, roles)  # weights only: previous-token -> induction K-composition
    classified = HeadRoles(roles=roles, heads=census.heads.drop(columns=["roles", "evidence"], errors="ignore"))
    summary = census_summary_of(census.scores, classified, manifest, evidence=table, composition=manifest["composition_evidence"])
    return dataclasses.replace(census, tables=tables, manifest=manifest, summary=summary)


def _check_same_model(loaded: LoadedModel, census: CensusResult) -> None:
    """A one-line error when ``loaded`` is not the model ``census`` measured (shape, or weights where both are known)."""
    recorded = census.manifest.get("model") or {}
    if not isinstance(recorded, dict):
        return
    for key, have in (("n_layers", loaded.n_layers), ("n_heads", loaded.n_heads)):
        if recorded.get(key) is not None and int(recorded[key]) != int(have):
            raise InputError(
                f"model: {key}={have}, but the census was run on a model with {key}={recorded[key]} ({recorded.get('model')!r})",
                model=loaded.name,
            )
    want = recorded.get("weights_sha256")
    have_sha = weights_fingerprint(loaded) if want and loaded.source == "local" else None  # as the manifest's weights_sha256
    if want and have_sha and want != have_sha:
        raise InputError(f"model: its weights differ from those the census was run on ({recorded.get('model')!r})", model=loaded.name)
