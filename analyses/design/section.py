"""The tables of the report's 'Design questions' section, computed in one call (no formatting here)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pandas as pd

from headlens.analyses.design.gqa import GQAConfig, run_gqa
from headlens.analyses.design.kv import KVConfig, kv_cache_table
from headlens.analyses.design.projections import ProjectionConfig, knockout_roles, run_knockouts
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.records import RecordJournal
from headlens.probes.attention import attention_spec
from headlens.probes.errors import HeadlensError

__all__ = ["design_section_tables"]

log = logging.getLogger(__name__)


def design_section_tables(
    model: Any,
    data: EvalSet,
    *,
    gqa: GQAConfig | None = None,
    projections: ProjectionConfig | None = None,
    census_config: Any = None,
    roles: bool = True,
    skip: dict[str, str] | None = None,
    journal: RecordJournal | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, pd.DataFrame]:
    """``kv`` (decoders only), ``gqa_summary``, ``gqa_heads``, ``gqa_groups``, ``gqa_comparison`` (both groupings run),
    ``knockout_losses`` and (with ``roles``) ``knockout_roles``; a part the model cannot do (already MQA, a family whose hooks cannot carry
    a knockout) is left out, with a log line saying why, and its reason is in ``skipped`` (one row per part).

    ``skip``: parts (``gqa``, ``projections``, ``roles``) not to run, each with the reason the
    caller gives (it lands in ``skipped``).  ``journal``: where the sweeps keep their per-variant
    records (:mod:`headlens.analyses.measure.records`), so an interrupted section resumes."""
    skip = dict(skip or {})
    out: dict[str, pd.DataFrame] = {}
    skipped: list[dict[str, str]] = [{"part": part, "reason": why} for part, why in skip.items()]
    if getattr(model, "is_encoder", False):  # as `headlens kv` refuses: no cache exists to size
        skipped.append({"part": "kv", "reason": "a bidirectional encoder keeps no KV cache at inference"})
    else:
        out["kv"] = kv_cache_table(model, KVConfig())
    if "gqa" not in skip and attention_spec(model).n_kv_heads > 1:
        try:
            res = run_gqa(model, data, gqa, journal=journal, progress=progress)
        except HeadlensError as exc:
            log.warning("design section: GQA what-if skipped: %s", exc)
            skipped.append({"part": "gqa", "reason": str(exc)})
        else:
            out.update(gqa_summary=res.summary, gqa_heads=res.heads, gqa_groups=res.groups)
            if res.comparison is not None:
                out["gqa_comparison"] = res.comparison
    elif "gqa" not in skip:
        skipped.append({"part": "gqa", "reason": "the model is already multi-query (1 KV head per layer)"})
    try:
        if "projections" not in skip:
            out["knockout_losses"] = run_knockouts(model, data, projections, journal=journal, progress=progress)
            if roles and "roles" not in skip:
                out["knockout_roles"] = knockout_roles(model, census_config, projections, journal=journal, progress=progress)[0]
    except HeadlensError as exc:
        log.warning("design section: projection knockout skipped: %s", exc)
        skipped.append({"part": "projections", "reason": str(exc)})
    out["skipped"] = pd.DataFrame(skipped, columns=["part", "reason"])
    return out
