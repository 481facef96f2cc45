"""The ``census`` stage: head census and roles, the files ``headlens classify`` writes
(:func:`headlens.reports.api.census.census`, then ``result.write``); the report's roles equal classify's."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.reports.api.census import CensusResult, census, used_thresholds
from headlens.reports.api.result import read_csv_table
from headlens.reports.render.census_files import HEADS_FILE, ROLES_FILE, read_roles
from headlens.reports.render.figures.report import FIGURE_FORMATS
from headlens.reports.render.progress import progress_bars
from headlens.reports.runs.report.context import Stage, StageContext, relative_names
from headlens.reports.runs.report.markers import json_key

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["STAGE"]

#: the report's role rule: a role needs ci_low >= 2 x the uniform baseline (classify's default)
BASELINE_FACTOR = 2.0

STRONGEST_COLUMNS = ("layer", "head", "name", "strongest_detector", "strongest_score")


def _run_census(ctx: StageContext) -> dict[str, Any]:
    loaded = ctx.model()
    result = ctx.census if _reusable(ctx.census, ctx.settings.census(), ctx.command) else None
    if result is not None:
        ctx.say("reusing the census computed earlier in this process (same model and settings)")
        result = replace(result, manifest={**result.manifest, "report_stage": "census"})
    else:
        if ctx.census is not None:
            log.info("census stage: the census given was computed with other settings; computing the stage's own")
        with progress_bars("census", quiet=ctx.quiet) as progress:
            result = census(
                loaded, ctx.settings.census(), thresholds={}, baseline_factor=BASELINE_FACTOR, progress=progress, command=ctx.command
            )
        result.manifest["report_stage"] = "census"
    result.write(ctx.dir, formats=FIGURE_FORMATS)
    pdfs = sorted(ctx.dir.glob("heatmap_*.pdf"))
    return {"stimuli": result.stimuli, "n_roles": int((result.heads["roles"] != "").sum()), "extra_files": relative_names(pdfs, ctx.dir)}


def _plain(obj: Any) -> Any:
    """A config (dataclass) or its manifest form as JSON values, to compare the two."""
    return json_key(asdict(obj) if is_dataclass(obj) and not isinstance(obj, type) else obj)


def _reusable(given: Any, config: Any, command: list[str]) -> bool:
    """``given`` (a CensusResult) is what this stage would compute: the same census settings, the default
    thresholds and baseline factor, no mask, no evidence, the same command in its manifest."""
    if not isinstance(given, CensusResult) or given.evidence is not None:
        return False
    run = given.run
    used = used_thresholds(given.scores["detector"])
    return (
        _plain(run.census.config) == _plain(config)
        and json_key(run.thresholds) == json_key(used)
        and run.baseline_factor == BASELINE_FACTOR
        and run.mask is None
        and given.manifest.get("command") == command
    )


def _load_census(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    scores = pd.read_csv(d / "scores.csv")
    roles = read_roles(d)  # the long table; converted when the folder predates it
    thresholds = json.loads((d / "manifest.json").read_text(encoding="utf-8")).get("thresholds") or {}
    # per head: the strongest detector (heads.csv; in older folders roles.csv had these columns)
    # (text columns as text, an empty strongest_score NaN: a head named after no detector)
    per_head = read_csv_table(d / HEADS_FILE if (d / HEADS_FILE).is_file() else d / ROLES_FILE)
    strongest = per_head[list(STRONGEST_COLUMNS)] if set(STRONGEST_COLUMNS) <= set(per_head.columns) else None
    return {"scores": scores, "roles": roles, "strongest": strongest, "thresholds": {str(k): float(v) for k, v in thresholds.items()}}


def _apply(report: Report, loaded: dict[str, Any]) -> None:
    report.scores, report.roles, report.thresholds = loaded["scores"], loaded["roles"], loaded["thresholds"]
    report.strongest = loaded.get("strongest")


STAGE = Stage("census", "head census and roles", _run_census, _load_census, lambda s: s.census(), _apply)
