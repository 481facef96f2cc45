"""The parts of the report's template context that only ``report.md`` shows (the page shows the
same stages as heatmaps and its own sections): the single-head ablation tables with their
readings, the design section's Markdown and the manifest's summary.

Values stay numbers here; ``report.md.j2`` formats them (:mod:`headlens.reports.render.page.markdown`'s
filters).  Part of :func:`headlens.reports.render.page.view.page_context`, the one context both
pages are rendered from.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from headlens.analyses.measure.verdicts import difference_verdict
from headlens.reports.render.design_tables import design_section_view
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.smoke import data_items, smoke_where
from headlens.reports.render.verdict_text import verdict_words

log = logging.getLogger(__name__)

__all__ = ["ablation_view", "design_md", "manifest_summary", "MANIFEST_SUMMARY_KEYS"]

#: The manifest's entries ``report.md`` shows (the page shows all of it).
MANIFEST_SUMMARY_KEYS = ("headlens_version", "created_utc", "command", "model", "prepend_bos", "seed", "dtype", "device", "versions")


def ablation_view(report: ReportView, name: str) -> dict[str, Any] | None:
    """The table of stage ``name`` (``ablation_zero`` or ``ablation_mean``), largest change first,
    each row with its reading (:func:`headlens.reports.render.verdict_text.verdict_words`); None
    when the stage has no table."""
    table = getattr(report, name)
    if table is None:
        return None
    info = report.stage(name).info
    metric = str(table["metric"].iloc[0]) if len(table) else "metric"
    data = info.get("data") or {}
    n_items, unit = data_items(info)
    smoke = report.smoke_test(name)
    up, down = ("moves the embedding", "below 0") if metric == "embedding" else (f"raises the {metric}", f"lowers the {metric}")
    top = table.reindex(table["delta"].abs().sort_values(ascending=False, kind="stable").index)
    rows = [
        {
            "name": f"{int(r['layer'])}.{int(r['head'])}",
            "delta": r["delta"],
            "ci_low": r["ci_low"],
            "ci_high": r["ci_high"],
            "value": r["value"],
            "reading": verdict_words(
                difference_verdict(r["ci_low"], r["ci_high"], n_items=n_items, smoke=smoke), above=up, below=down, items=unit
            ),
        }
        for r in top.to_dict("records")
    ]
    return {
        "metric": metric,
        "n_sentences": data.get("n_sentences", "?"),
        "n_windows": data.get("n_windows", "?"),
        "window": data.get("window", "?"),
        "text": data.get("text", "built-in evaluation text"),
        "unablated_value": info.get("unablated_value"),
        "rows": rows,
    }


def design_md(report: ReportView) -> dict[str, Any] | None:
    """What the design section of ``report.md`` shows (:func:`headlens.reports.render.design_tables.design_section_view`,
    rendered by the macro that writes the stage's ``summary.md`` too), or None when the stage has no tables."""
    if report.design is None:
        return None
    smoke = smoke_where(report, "design") if report.smoke_test("design") else None
    return design_section_view(
        report.design,
        heading=None,
        figure=quote("design/gqa_loss_vs_cache.png") if "gqa_summary" in report.design else None,
        n_items=data_items(report.stage("design").info)[0],
        smoke=smoke,
    )


def manifest_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest's reproducibility entries (:data:`MANIFEST_SUMMARY_KEYS`) and a ``--quick`` run's smoke-test note."""
    out = {k: manifest[k] for k in MANIFEST_SUMMARY_KEYS if k in manifest}
    smoke = (manifest.get("report") or {}).get("smoke_test")
    if smoke:
        out["smoke_test"] = smoke
    return out
