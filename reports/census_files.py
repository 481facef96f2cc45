"""A head census as files: ``scores.csv``, ``roles.csv``, ``heads.csv``, heatmaps, ``summary.md``,
``manifest.json``.  Shared by ``headlens classify`` and the report's census stage.

``roles.csv`` is the long role table (``layer, head, name, role``: one row per (head, role), the
source of truth, :func:`headlens.analyses.heads.classify.classify_heads`); ``heads.csv`` is one
row per head with the roles joined for reading (``roles``, ``;``-separated) and the strongest
detector.  With ``evidence`` (:class:`headlens.analyses.patching.evidence.EvidenceConfig`, ``headlens
classify --evidence``) each role is then tested by its intervention: ``evidence.csv`` (one row
per (head, role): verdict, figure with its interval, the reason), an ``evidence`` column in
``heads.csv``, an Evidence section in ``summary.md`` and the settings in the manifest; the
census files are written first, so a failing evidence run loses none of them.  Folders written before the long table have a one-row-per-head ``roles.csv`` instead:
:func:`read_roles` reads both.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

__all__ = ["classify_to_dir", "read_roles", "ROLES_FILE", "HEADS_FILE"]

ROLES_FILE = "roles.csv"
HEADS_FILE = "heads.csv"


def classify_to_dir(
    loaded: Any,
    config: Any,
    out_dir: Path,
    *,
    thresholds: dict[str, float],
    baseline_factor: float,
    quiet: bool,
    command: list[str],
    extra: dict | None = None,
    formats: tuple[str, ...] = ("png", "svg"),
    evidence: Any = None,
) -> tuple[Any, pd.DataFrame]:
    """Run the census and write its files; return ``(CensusResult, heads table)`` (the
    ``heads.csv`` table: one row per head, roles joined for reading; with ``evidence``, an
    ``EvidenceConfig``, its ``evidence`` column too and ``evidence.csv`` beside it)."""
    from headlens.analyses.heads.census import run_census
    from headlens.analyses.heads.classify import classify_heads, default_thresholds
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import write_json, write_text
    from headlens.reports.census_summary import census_summary
    from headlens.reports.figures.common import detector_heatmaps
    from headlens.reports.progress import progress_bars
    from headlens.reports.tables import head_roles_table, write_table

    with progress_bars("census", quiet=quiet) as progress:
        result = run_census(loaded, config, progress=progress)
    classified = classify_heads(result.scores, thresholds, baseline_factor=baseline_factor)
    heads = head_roles_table(classified)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_table(result.scores, out_dir / "scores.csv")
    write_table(classified.roles, out_dir / ROLES_FILE)
    write_table(heads, out_dir / HEADS_FILE)
    detector_heatmaps(result.scores, classified.roles, out_dir, formats=formats)
    used = {k: v for k, v in {**default_thresholds(), **thresholds}.items() if k in set(result.scores["detector"])}
    summary = dict(model=loaded.name, prepend_bos=config.prepend_bos, thresholds=used, baseline_factor=baseline_factor, stimuli=result.stimuli)
    write_text(out_dir / "summary.md", census_summary(result.scores, classified, **summary))
    configs = {"census": config}
    manifest_extra = {"stimuli": result.stimuli, "thresholds": used, "baseline_factor": baseline_factor, **(extra or {})}
    write_json(out_dir / "manifest.json", build_manifest(model=loaded, command=command, seed=config.seed, prepend_bos=config.prepend_bos, configs=configs, extra=manifest_extra))
    if evidence is not None:
        from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS, evidence_rule
        from headlens.reports.evidence_text import EVIDENCE_FILE, evidence_joined

        table = evidence.run(loaded, classified.roles, prepend_bos=config.prepend_bos) if len(classified.roles) else pd.DataFrame(columns=EVIDENCE_COLUMNS)
        write_table(table, out_dir / EVIDENCE_FILE)
        heads["evidence"] = evidence_joined(table, heads)
        write_table(heads, out_dir / HEADS_FILE)
        write_text(out_dir / "summary.md", census_summary(result.scores, classified, evidence=table, **summary))
        manifest_extra["evidence"] = {"file": EVIDENCE_FILE, "prepend_bos": config.prepend_bos, "rule": evidence_rule(), "counts": table["evidence"].value_counts().to_dict()}
        configs["evidence"] = evidence
        write_json(out_dir / "manifest.json", build_manifest(model=loaded, command=command, seed=config.seed, prepend_bos=config.prepend_bos, configs=configs, extra=manifest_extra))
    return result, heads


def read_roles(folder: str | Path) -> pd.DataFrame:
    """The long role table of a census folder: ``roles.csv`` as written now, or converted from
    the one-row-per-head ``roles.csv`` of older folders."""
    from headlens.analyses.heads.classify import roles_from_wide

    table = pd.read_csv(Path(folder) / ROLES_FILE, dtype={"name": str, "role": str, "roles": str}, keep_default_na=False)
    if "role" in table.columns:
        return table
    return roles_from_wide(table)
