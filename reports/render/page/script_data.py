"""The data the page's script reads (``<script type="application/json" id="hl-data">``):
per head its roles, scores, ablation and sink numbers; the example prompts' attention."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from headlens.analyses.heads.classify import SINK_ROLE as SINK
from headlens.analyses.heads.classify import roles_of
from headlens.reports.render.page.attention_component import view_data
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.values import finite, metric_label

log = logging.getLogger(__name__)

__all__ = ["script_data", "initial_head"]


def _name(layer: Any, head: Any) -> str:
    return f"{int(layer)}.{int(head)}"


def script_data(report: ReportView) -> dict[str, Any]:
    has = roles_of(report.roles) if report.roles is not None else {}
    heads: dict[str, Any] = {}
    for layer, head in zip(report.heads["layer"], report.heads["head"], strict=True):
        heads[_name(layer, head)] = {"roles": sorted(has.get((int(layer), int(head)), ()))}
    if report.scores is not None:
        for d in report.scores.to_dict("records"):
            name = _name(d["layer"], d["head"])
            if name in heads:
                det = str(d["detector"])
                heads[name].setdefault("scores", []).append(
                    [
                        det,
                        finite(d["score"]),
                        finite(d["ci_low"]),
                        finite(d["ci_high"]),
                        finite(d["baseline"]),
                        int(d["n"]),
                        finite(d.get("accuracy")),
                        report.thresholds.get(det),
                    ]
                )
    for attr, key in (("ablation_zero", "zero"), ("ablation_mean", "mean")):
        table = getattr(report, attr)
        if table is not None:
            for d in table.to_dict("records"):
                name = _name(d["layer"], d["head"])
                if name in heads:
                    heads[name][key] = [finite(d["delta"]), finite(d["ci_low"]), finite(d["ci_high"]), finite(d["value"]), int(d["n"])]
    if report.sinks is not None:
        for d in report.sinks.to_dict("records"):
            name = _name(d["layer"], d["head"])
            if name in heads:
                heads[name].setdefault("sink", []).append(
                    [bool(d["bos"]), finite(d["alpha_mean"]), finite(d["alpha_std"]), finite(d["sink_rate"]), finite(d["uniform_alpha"])]
                )
    for d in report.heads.to_dict("records"):
        for key in ("importance", "pruned_at"):
            if finite(d.get(key)) is not None:
                heads[str(d["name"])][key] = finite(d[key])
    metric, ablation_title = None, None
    for attr in ("ablation_zero", "ablation_mean"):
        t = getattr(report, attr)
        if t is not None and len(t):
            metric = metric_label(str(t["metric"].iloc[0]))
            # the embedding change is a change already: no "change in embedding change"
            ablation_title = "Ablation of this head alone: " + (
                metric if str(t["metric"].iloc[0]) == "embedding" else f"change in {metric}"
            )
            if report.smoke_test(attr):
                ablation_title += " (smoke test: no finding)"
    # each example is one attention view (static/attention_view.js), every head, one byte per weight
    examples = [
        {
            "prompt": e.prompt,
            "truncated": bool(e.truncated),
            "view": view_data(e.tokens, e.pattern, layers=range(report.n_layers), heads=range(report.n_heads), encoding="u8"),
        }
        for e in report.examples
        if e.pattern.shape[:2] == (report.n_layers, report.n_heads) and np.isfinite(e.pattern).all()  # else: "no example prompts"
    ]
    return {
        "L": report.n_layers,
        "H": report.n_heads,
        "metric": metric,
        "ablation_title": ablation_title,
        "sinks_title": "Sinks stage: alpha on its own sequences"
        + (" (smoke test)" if report.smoke_test("sinks") else "")
        + "; the sink role is the census's (sink score above)",
        "bos": bool(report.settings.get("prepend_bos", True)),
        "initial": initial_head(report),
        "heads": heads,
        "examples": examples,
        "failed": {s.name: s.error for s in report.stages if s.status == "failed"},
    }


def initial_head(report: ReportView) -> str:
    """The head shown first: the strongest one with a role other than sink (the default state of most
    heads in Llama-family models), else with a role, else 0.0."""
    if report.roles is None or not len(report.roles):
        return "0.0"
    specific = report.roles[report.roles["role"].astype(str) != SINK]
    chosen = specific if len(specific) else report.roles
    with_role = set(zip(chosen["layer"].astype(int), chosen["head"].astype(int), strict=True))
    best = report.strongest
    if best is not None and len(best):
        best = best[[(int(a), int(b)) in with_role for a, b in zip(best["layer"], best["head"], strict=True)]]
        if len(best):
            top = best.sort_values(["strongest_score", "layer", "head"], ascending=[False, True, True], kind="stable").iloc[0]
            return _name(top["layer"], top["head"])
    layer, head = min(with_role)
    return _name(layer, head)
