"""``summary.md`` of a census, from its run (with an evidence run: its section too).

Apart from :mod:`headlens.reports.api.census` so that :func:`headlens.reports.api.evidence.evidence` and the
census both use it without importing each other.
"""

from __future__ import annotations

from headlens.reports.api.census_run import ClassifyRun
from headlens.reports.render.census_summary import census_summary

__all__ = ["census_summary_of"]


def census_summary_of(run: ClassifyRun, *, model: str) -> str:
    """``summary.md`` of a census (with its evidence run: of that too): its scores and roles, the thresholds
    and baseline factor the roles were given by, the census's BOS setting and stimuli; ``model``: its name."""
    evidence = run.evidence
    return census_summary(
        run.census.scores,
        run.classified,
        model=model,
        prepend_bos=run.census.config.prepend_bos,
        thresholds=run.thresholds,
        baseline_factor=run.baseline_factor,
        stimuli=run.census.stimuli,
        evidence=evidence.table if evidence is not None else None,
        composition=evidence.composition if evidence is not None else None,
    )
