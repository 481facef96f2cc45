"""What ``report.html`` shows, as plain data for the templates (``reports/render/page/templates``).

Every value here is text or numbers; the templates write the markup and Jinja2's autoescape
escapes every string, whatever it holds (model names, prompts, tokens, errors, paths).
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from headlens.analyses.heads.classify import roles_of
from headlens.reports.render.finding_lines import census_role_lines
from headlens.reports.render.page.design_view import design_view
from headlens.reports.render.page.evidence_view import evidence_view
from headlens.reports.render.page.figure import inline_svg
from headlens.reports.render.page.heatmaps import heatmaps, scored_detectors
from headlens.reports.render.page.markdown_view import ablation_view, design_md, manifest_summary
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.sink_counts import sink_disagreement, sink_rate_rows
from headlens.reports.render.page.smoke import smoke_columns_note, smoke_note
from headlens.reports.render.page.values import finite, metric_label, num, signed, sortval
from headlens.reports.render.sink_lines import population_of
from headlens.reports.render.tables import roles_joined

log = logging.getLogger(__name__)

__all__ = ["page_context", "SHORT", "COLUMN_TITLES"]

#: Column labels of the role table (full names in the header's tooltip).
SHORT = {
    "previous_token": "prev. token",
    "next_token": "next token",
    "duplicate_token": "dup. token",
    "induction": "induction",
    "sink": "sink",
    "referent": "referent",
}
COLUMN_TITLES = {
    "sink_alpha": "sink score: Gu et al. alpha from the sinks stage",
    "zero_delta": "change in the metric when the head alone is zero-ablated",
    "mean_delta": "change in the metric when the head alone is mean-ablated",
    "importance": "pruning importance (Michel et al.), L2-normalised per layer",
    "pruned_at": "fraction of heads removed when pruning took this head out",
}
EXACT_IMPORTANCE_TITLE = "pruning importance: the exact change in the metric when the head alone is zero-ablated from the unpruned model"
#: The heads table's columns from the other stages.  The sinks stage's alpha is not among them:
#: the census's ``sink`` column is the score the sink role comes from (page/sink_counts.py).
_EXTRA = [
    ("zero_delta", "zero \u0394", "delta"),
    ("mean_delta", "mean \u0394", "delta"),
    ("importance", "import.", "score"),
    ("pruned_at", "pruned at", "pct"),
]


def _exact_importance(report: ReportView) -> bool:
    """True when pruning ranked heads by their exact ablation change (the embedding metric)."""
    s = report.stage("pruning")
    return s.ok and s.info.get("metric") == "embedding"


def _data_metric(report: ReportView) -> str:
    for attr in ("ablation_zero", "ablation_mean"):
        t = getattr(report, attr)
        if t is not None and len(t):
            return str(t["metric"].iloc[0])
    return "loss"


def _banners(report: ReportView, *names: str) -> list[dict[str, str]]:
    """A FAILED (or skipped) notice for the stages a section is built from."""
    out = []
    for name in names:
        s = report.stage(name)
        if s.status in ("failed", "skipped"):
            out.append({"status": s.status, "name": name, "title": s.title, "error": s.error or ""})
    return out


def _stages(report: ReportView) -> list[dict[str, Any]]:
    return [
        {
            "i": i,
            "name": s.name,
            "title": s.title,
            "shown": "done" if s.status == "loaded" else s.status,  # the page is the same whether a stage ran now or earlier
            "error": s.error or "",
            "seconds": "" if s.seconds is None else f"{float(s.seconds):.1f} s",
        }
        for i, s in enumerate(report.stages, start=1)
    ]


def _role_table(report: ReportView) -> dict[str, Any]:
    heads = report.heads
    dets = scored_detectors(report.scores)[0]
    cols = [(d, SHORT.get(d, d.replace("_", " ")), "score") for d in dets] + [c for c in _EXTRA if c[0] in heads.columns]
    header = []
    for k, (col, label, kind) in enumerate(cols, start=2):
        title = EXACT_IMPORTANCE_TITLE if col == "importance" and _exact_importance(report) else COLUMN_TITLES.get(col, col + " score")
        header.append({"k": k, "col": col, "kind": kind, "label": label, "title": f"{title}; click to sort"})
    has = roles_of(report.roles) if report.roles is not None else {}
    intervals = _intervals(report.scores)
    rows = []
    for d in heads.to_dict("records"):
        roles = sorted(has.get((int(d["layer"]), int(d["head"])), ()))
        cells = []
        for col, _, kind in cols:
            v: Any = d.get(col)
            if kind == "delta":
                text = signed(v)
            elif kind == "pct":
                text = "n/a" if finite(v) is None else f"{100 * float(v):.0f}%"
            else:
                text = num(v)
            ci = intervals.get((int(d["layer"]), int(d["head"]), col)) if col in dets else None
            cells.append({"v": sortval(v), "text": text, "x": v, "ci": ci})
        rows.append(
            {
                "name": str(d["name"]),
                "order": int(d["layer"]) * 100000 + int(d["head"]),
                "roles": roles,
                "roles_sort": " ".join(roles),
                "cells": cells,
            }
        )
    return {"header": header, "rows": rows, "detectors": dets}


def _intervals(scores: Any) -> dict[tuple[int, int, str], str]:
    """``(layer, head, detector) -> "[0.62, 0.64]"``: each census score's 95% interval as the head table shows it."""
    if scores is None or not {"ci_low", "ci_high"} <= set(scores.columns):
        return {}
    out = {}
    for layer, head, det, lo, hi in zip(
        scores["layer"], scores["head"], scores["detector"], scores["ci_low"], scores["ci_high"], strict=True
    ):
        if finite(lo) is not None and finite(hi) is not None:
            out[(int(layer), int(head), str(det))] = f"[{num(lo)}, {num(hi)}]"
    return out


def _findings(report: ReportView) -> list[str]:
    """The census's findings as ``headlens classify`` prints them (:func:`census_role_lines`): the
    page leads with them, above the head table."""
    if report.scores is None or report.roles is None or not len(report.heads):
        return []
    heads = report.strongest.copy() if report.strongest is not None else report.heads[["layer", "head", "name"]].copy()
    heads["roles"] = roles_joined(report.roles, heads)
    return census_role_lines(heads, report.scores, report.roles)


def _sinks_a_population(report: ReportView) -> bool:
    """More than half the heads have the sink role (:func:`population_of`): the head table opens on the others."""
    if report.scores is None or report.roles is None:
        return False
    return population_of({"scores": report.scores, "roles": report.roles}) is not None


def _pruning(report: ReportView) -> dict[str, Any] | None:
    curve = report.pruning_curve
    if curve is None:
        return None
    info = report.stage("pruning").info
    embedding = info.get("metric") == "embedding"
    figure = None
    if report.out_dir is not None:
        figure = inline_svg(
            report.out_dir / "pruning" / "pruning_curve.svg",
            element_id="pruning-svg",
            label="pruning curve: the metric against the fraction of heads removed, importance order and random orders",
        )
    rows = []
    for d in curve.to_dict("records"):
        removed = d.get("removed_this_step")
        rows.append(
            {
                "step": int(d["step"]),
                "n_removed": int(d["n_removed"]),
                "fraction": f"{100 * float(d['fraction_removed']):.0f}%",
                "value": num(d["value"], 4),
                "change": signed(d["relative_change"], 4) if embedding else signed(100 * float(d["relative_change"]), 1) + "%",
                "random": "n/a" if finite(d["random_mean"]) is None else f"{num(d['random_mean'], 4)} \u00b1 {num(d['random_std'], 4)}",
                "kv": f"{int(d['kv_bytes_saved_per_1k_tokens']):,}",
                "removed": removed if isinstance(removed, str) else "",
                "raw": d,
            }
        )
    return {
        "embedding": embedding,
        "metric": metric_label(str(info.get("metric", "loss"))),
        "metric_name": str(info.get("metric", "loss")),
        "unablated": num(info.get("unablated_value"), 4),
        "unablated_value": info.get("unablated_value"),
        "random_seeds": info.get("random_seeds", "?"),
        "max_increase": float(info.get("max_increase") or 0),
        "removable": f"{100 * float(info.get('removable_fraction') or 0):.0f}%",
        "finding": not report.smoke_test("pruning"),  # a smoke test's removable fraction is not shown as a result
        "figure": figure,
        "figure_file": "pruning/pruning_curve.svg",
        "rows": rows,
    }


def _figure_links(report: ReportView) -> list[dict[str, Any]]:
    empty = {f"heatmap_{d}.png" for d in scored_detectors(report.scores)[1]}  # a detector without scores: no figure to offer
    items = []
    for s in report.stages:
        for f in s.files:
            if f.endswith(".png") and not (s.name == "census" and f in empty):
                stem = f[: -len(".png")]
                links = [
                    {"href": quote(f"{s.name}/{stem}.{ext}"), "label": ext.upper()}
                    for ext in ("png", "svg", "pdf")
                    if f"{stem}.{ext}" in s.files
                ]
                items.append({"stage": s.name, "stem": stem, "path": f"{s.name}/{stem}", "links": links})
    return items


def page_context(report: ReportView) -> dict[str, Any]:
    """Everything the templates of ``report.html`` and ``report.md`` need, for a
    :class:`headlens.reports.runs.report.result.Report`: the one context both are rendered from."""
    quick = bool(report.settings.get("quick"))
    bos = bool(report.settings.get("prepend_bos", True))
    exact = _exact_importance(report)
    dets = scored_detectors(report.scores)[0]
    return {
        "model": str(report.model),
        "n_layers": report.n_layers,
        "n_heads": report.n_heads,
        "bos": bos,
        "quick": quick,
        "sub": f"{report.n_layers} layers \u00d7 {report.n_heads} heads \u00b7 BOS {'prepended' if bos else 'not prepended'} \u00b7 "
        + ("quick run (smoke-test settings: few prompts and windows)" if quick else "full run"),
        "failed": [s.name for s in report.failed],
        "stage_notes": {
            name: _banners(report, *names)
            for name, names in {
                "census": ("census",),
                "examples": ("examples",),
                "pruning": ("pruning",),
                "sinks": ("sinks",),
                "heatmaps": ("census", "sinks", "ablation_zero", "ablation_mean", "pruning"),
                "design": ("design",),
                "ablation_zero": ("ablation_zero",),
                "ablation_mean": ("ablation_mean",),
            }.items()
        },
        "metric": metric_label(_data_metric(report)),
        # the embedding change is a change from the unablated model already: no "change in embedding change"
        "delta_note": f"the {metric_label('embedding')} when the head alone is ablated"
        if _data_metric(report) == "embedding"
        else f"change in {metric_label(_data_metric(report))} when the head alone is ablated",
        "metric_note": report.metric_note,
        "sinks_note": report.sinks_note,
        "findings": _findings(report),
        "sink_population": _sinks_a_population(report),
        "table": _role_table(report),
        "unscored": scored_detectors(report.scores)[1],
        "smoke_notes": {name: smoke_note(report, name) for name in ("sinks", "pruning", "design", "ablation_zero", "ablation_mean")},
        "smoke_columns": smoke_columns_note(
            report, {"zero_delta": "zero \u0394", "mean_delta": "mean \u0394", "importance": "import.", "pruned_at": "pruned at"}
        ),
        "smoke_columns_by_name": smoke_columns_note(report, {}),  # the columns named as report.md's header names them
        "thresholds": dict(report.thresholds),
        "scores": report.scores.to_dict("records") if dets and report.scores is not None else [],
        "ablation": {name: ablation_view(report, name) for name in ("ablation_zero", "ablation_mean")},
        "n_heads_total": len(report.heads),
        "examples": [{"prompt": e.prompt, "n_tokens": len(e.tokens), "truncated": bool(e.truncated)} for e in report.examples],
        "heatmaps": heatmaps(report, exact),
        "figure_links": _figure_links(report),
        "pruning": _pruning(report),
        "sink_rates": sink_rate_rows(report),
        "sink_eps": f"{float(report.stage('sinks').info.get('eps', 0.3)):g}",
        "sink_disagreement": sink_disagreement(report),
        "design": design_view(report),
        "evidence": evidence_view(report),
        "stages": _stages(report),
        "design_md": design_md(report),
        "manifest": json.dumps(report.manifest, indent=2, sort_keys=False, default=str),
        "manifest_summary": manifest_summary(report.manifest),
    }
