"""A head census as files: ``scores.csv``, ``roles.csv``, ``heads.csv``, heatmaps, ``summary.md``,
``manifest.json``.  Shared by ``headlens classify`` and the report's census stage.

``roles.csv`` is the long role table (``layer, head, name, role``: one row per (head, role), the
source of truth, :func:`headlens.analyses.heads.classify.classify_heads`); ``heads.csv`` is one
row per head with the roles joined for reading (``roles``, ``;``-separated) and the strongest
detector.  Folders written before the long table have a one-row-per-head ``roles.csv`` instead:
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
) -> tuple[Any, pd.DataFrame]:
    """Run the census and write its files; return ``(CensusResult, heads table)`` (the
    ``heads.csv`` table: one row per head, roles joined for reading)."""
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
    write_text(
        out_dir / "summary.md",
        census_summary(result.scores, classified, model=loaded.name, prepend_bos=config.prepend_bos, thresholds=used, baseline_factor=baseline_factor, stimuli=result.stimuli),
    )
    manifest = build_manifest(
        model=loaded, command=command, seed=config.seed, prepend_bos=config.prepend_bos, configs={"census": config},
        extra={"stimuli": result.stimuli, "thresholds": used, "baseline_factor": baseline_factor, **(extra or {})},
    )
    write_json(out_dir / "manifest.json", manifest)
    return result, heads


def read_roles(folder: str | Path) -> pd.DataFrame:
    """The long role table of a census folder: ``roles.csv`` as written now, or converted from
    the one-row-per-head ``roles.csv`` of older folders."""
    from headlens.analyses.heads.classify import roles_from_wide

    table = pd.read_csv(Path(folder) / ROLES_FILE, dtype={"name": str, "role": str, "roles": str}, keep_default_na=False)
    if "role" in table.columns:
        return table
    return roles_from_wide(table)
