"""The ``evidence`` stage: each role of the census stage tested by the intervention it predicts
(:func:`headlens.reports.api.evidence.evidence` on the census stage's folder, as ``headlens classify --evidence``):
``evidence.csv``, one row per (head, role) with "supported", "not supported" or "not testable
here", the figure with its interval and the reason.

It reads the census stage's roles (``census/roles.csv``), so it needs that stage; its resume
key holds the census configuration, so a census that reruns with other settings reruns it.
``--quick``: a smoke test (8 items per test, 12 random tokens per copy): the figures with "no
finding" in place of every verdict.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.probes.errors import InputError
from headlens.reports.api.census import CensusResult
from headlens.reports.api.evidence import evidence
from headlens.reports.render.census_files import ROLES_FILE
from headlens.reports.render.evidence_text import EVIDENCE_FILE
from headlens.reports.render.tables import write_table
from headlens.reports.runs.report.context import Stage, StageContext

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["STAGE", "evidence_config"]

#: Items per test and random tokens per copy: full run, ``--quick``.
FULL, QUICK = (32, 20), (8, 12)


def evidence_config(settings: Any) -> EvidenceConfig:
    n, T = QUICK if settings.quick else FULL
    return EvidenceConfig(n=n, T=T, seed=settings.seed, smoke=bool(settings.quick))


def _run(ctx: StageContext) -> dict[str, Any]:
    census = ctx.dir.parent / "census"
    if not (census / ROLES_FILE).is_file():
        raise InputError("the evidence stage tests the census stage's roles: run the census stage (do not --skip census)")
    config = evidence_config(ctx.settings)
    tested = evidence(ctx.model(), CensusResult.from_folder(census), config, progress=ctx.step, say=ctx.say)
    run = tested.run.evidence
    assert run is not None  # the verb always adds it
    write_table(run.table, ctx.dir / EVIDENCE_FILE)
    about = run.info
    info = {"n_items": config.n, "T": config.T, "smoke": config.smoke, "rule": about["rule"], "counts": about["counts"]}
    return {**info, "plan": about["plan"], **({"sink_sample": about["sink_sample"]} if "sink_sample" in about else {})}


def _load(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "evidence": pd.read_csv(
            d / EVIDENCE_FILE, dtype={"name": str, "role": str, "evidence": str, "detail": str, "unit": str, "test": str}
        )
    }


def _apply(report: Report, loaded: dict[str, Any]) -> None:
    report.evidence = loaded["evidence"]


STAGE = Stage(
    "evidence",
    "causal evidence for each role",
    _run,
    _load,
    lambda s: {"evidence": evidence_config(s), "census": s.census()},
    _apply,
    needs=("census",),
)
