"""The join: one row per head from every stage that finished, and the :class:`Report` built
from the stages' loaded outputs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headlens.probes.head_lists import parse_head
from headlens.reports.render.tables import roles_joined
from headlens.reports.runs.report.result import Report, StageStatus
from headlens.reports.runs.report.stages import STAGE_DEFS

log = logging.getLogger(__name__)

__all__ = ["head_table", "assemble"]


def head_table(r: Report) -> pd.DataFrame:
    """One row per head, joining every stage that finished."""
    rows = pd.DataFrame([{"layer": layer, "head": h} for layer in range(r.n_layers) for h in range(r.n_heads)], columns=["layer", "head"])
    rows.insert(0, "name", rows["layer"].astype(str) + "." + rows["head"].astype(str))
    rows["roles"] = "" if r.roles is None else roles_joined(r.roles, rows)  # a rendering of the long table
    if r.scores is not None:
        wide = r.scores.pivot_table(index=["layer", "head"], columns="detector", values="score", sort=False)
        for det in dict.fromkeys(r.scores["detector"]):
            col = (
                wide[det] if det in wide.columns else pd.Series(dtype=float)
            )  # a detector that scored no head (all NaN) has no pivot column
            rows[det] = [col.get((a, b), np.nan) for a, b in zip(rows["layer"], rows["head"], strict=True)]

    def join(df: pd.DataFrame | None, col: str, name: str) -> None:
        if df is None:
            return
        m = df.set_index(["layer", "head"])[col]
        rows[name] = [float(m.get((a, b), np.nan)) for a, b in zip(rows["layer"], rows["head"], strict=True)]

    if r.sinks is not None:
        bos = bool(r.settings.get("prepend_bos", True))
        sub = r.sinks[r.sinks["bos"].astype(bool) == bos]
        join(sub if len(sub) else r.sinks.drop_duplicates(["layer", "head"]), "alpha_mean", "sink_alpha")
    join(r.ablation_zero, "delta", "zero_delta")
    join(r.ablation_mean, "delta", "mean_delta")
    join(r.importance, "importance", "importance")
    if r.pruning_curve is not None:
        when: dict[tuple[int, int], float] = {}
        curve = r.pruning_curve
        for removed, fraction in zip(curve["removed_this_step"], curve["fraction_removed"].astype(float), strict=True):
            for name in (removed if isinstance(removed, str) else "").split():
                when[parse_head(name, where="pruning curve")] = float(fraction)
        rows["pruned_at"] = [when.get((a, b), np.nan) for a, b in zip(rows["layer"], rows["head"], strict=True)]
    return rows


def assemble(
    model_name: str,
    n_layers: int,
    n_heads: int,
    settings: Any,
    stages: list[StageStatus],
    loaded: dict[str, dict[str, Any]],
    manifest: dict[str, Any],
    out_dir: Path | None,
) -> Report:
    """The :class:`Report`: each stage that loaded puts its tables on it (``Stage.apply``), then the join."""
    r = Report(
        model=model_name, n_layers=n_layers, n_heads=n_heads, settings=settings.to_json(), stages=stages, manifest=manifest, out_dir=out_dir
    )
    for name, outputs in loaded.items():
        STAGE_DEFS[name].apply(r, outputs)
    r.heads = head_table(r)
    return r
