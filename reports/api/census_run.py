"""What a :class:`~headlens.reports.api.census.CensusResult` carries: the census run, the roles it gives and,
with an evidence run, the interventions' verdicts (issue 47 item 3: the typed run is the result's payload).

Apart from :mod:`headlens.reports.api.census` so that :mod:`headlens.reports.api.evidence` (which census.py
imports) and :mod:`headlens.reports.api.census_text` use the types without importing census.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from headlens.analyses.heads.census import CensusRun
from headlens.analyses.heads.census_config import CensusConfig
from headlens.analyses.heads.classify import HeadRoles
from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.reports.api.common import config_from_record

log = logging.getLogger(__name__)

__all__ = ["ClassifyRun", "EvidenceRun", "classify_run_of"]


@dataclass(kw_only=True)
class EvidenceRun:
    """An evidence run on a census's roles: its config, the verdicts (one row per tested (head, role)),
    ``info`` (the manifest's ``evidence`` entry: the rule, counts, the sink test's text, the plan, the time,
    the sink sample) and ``composition`` (the data-free previous-token -> induction composition lines)."""

    config: EvidenceConfig
    table: pd.DataFrame
    info: dict[str, Any]
    composition: list[str]


@dataclass(kw_only=True)
class ClassifyRun:
    """A census and its roles, as ``headlens classify`` runs them: the analysis' :class:`CensusRun` (its
    scores, config and stimuli), the long ``roles`` table, ``heads`` (one row per head, roles joined; with
    evidence an ``evidence`` column), the thresholds and baseline factor the roles were given by, the head
    mask the census ran under, and the evidence run when there was one.

    Read back from a folder (:func:`classify_run_of`), the census run's per-prompt arrays and its detector
    notes (recorded per stimulus set only) come back empty."""

    census: CensusRun
    roles: pd.DataFrame
    heads: pd.DataFrame
    thresholds: dict[str, float]
    baseline_factor: float
    mask: str | None = None
    evidence: EvidenceRun | None = None

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """``scores``, ``roles``, ``heads`` and, with evidence, ``evidence``: the result's tables, in the saved order."""
        tables = {"scores": self.census.scores, "roles": self.roles, "heads": self.heads}
        if self.evidence is not None:
            tables["evidence"] = self.evidence.table
        return tables

    @property
    def classified(self) -> HeadRoles:
        """The roles as :func:`~headlens.analyses.heads.classify.classify_heads` gave them (``heads`` without
        the joined ``roles`` and ``evidence`` columns)."""
        return HeadRoles(roles=self.roles, heads=self.heads.drop(columns=["roles", "evidence"], errors="ignore"))

    def with_tables(self, tables: dict[str, pd.DataFrame]) -> ClassifyRun:
        """This run with its tables replaced by ``tables`` (by :attr:`tables`' names)."""
        evidence = replace(self.evidence, table=tables["evidence"]) if self.evidence is not None else None
        census = replace(self.census, scores=tables["scores"])
        return replace(self, census=census, roles=tables["roles"], heads=tables["heads"], evidence=evidence)


def classify_run_of(tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> ClassifyRun:
    """The :class:`ClassifyRun` of a saved census: the tables from their files; the census config, stimuli,
    thresholds, baseline factor and mask from the manifest, and its evidence entries when it has them."""
    config = config_from_record(CensusConfig, manifest["config"]["census"])
    census = CensusRun(scores=tables["scores"], per_prompt={}, stimuli=manifest["stimuli"], config=config)
    evidence = None
    if "evidence" in tables:
        evidence = EvidenceRun(
            config=config_from_record(EvidenceConfig, manifest["config"]["evidence"]),
            table=tables["evidence"],
            info=manifest["evidence"],
            composition=list(manifest.get("composition_evidence") or []),
        )
    return ClassifyRun(
        census=census,
        roles=tables["roles"],
        heads=tables["heads"],
        thresholds=manifest["thresholds"],
        baseline_factor=float(manifest["baseline_factor"]),
        mask=manifest.get("mask"),
        evidence=evidence,
    )
