"""``summary.md`` of a census, from its tables and its manifest's settings (with an evidence run: its section too).

Apart from :mod:`headlens.reports.api.census` so that :func:`headlens.reports.api.evidence.evidence` and the
census both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from headlens.analyses.heads.classify import HeadRoles
from headlens.reports.render.census_summary import census_summary

__all__ = ["census_summary_of"]


def census_summary_of(
    scores: pd.DataFrame,
    classified: HeadRoles,
    manifest: Mapping[str, Any],
    evidence: pd.DataFrame | None = None,
    composition: list[str] | None = None,
) -> str:
    """``summary.md`` of a census (with ``evidence``: of its evidence run too), from its manifest's settings."""
    model = manifest.get("model") or {}
    return census_summary(
        scores,
        classified,
        model=str(model.get("model")),
        prepend_bos=bool(manifest.get("prepend_bos")),
        thresholds=manifest["thresholds"],
        baseline_factor=manifest["baseline_factor"],
        stimuli=manifest.get("stimuli") or {},
        evidence=evidence,
        composition=composition,
    )
