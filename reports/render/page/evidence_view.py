"""The report's evidence section (the ``evidence`` stage's table), for the page and the Markdown
alike: one row per (head, role) with its verdict, the figure with its interval and the reason;
a smoke-test run (``--quick``) is marked and states no finding."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pandas as pd

from headlens.reports.render.evidence_text import evidence_rule_text, figure_text
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.sink_lines import sink_evidence_line, specific_first
from headlens.reports.render.verdict_text import smoke_sentence

log = logging.getLogger(__name__)

__all__ = ["evidence_view", "evidence_md"]


def _text(x: Any) -> str:
    return "" if x is None or (isinstance(x, float) and pd.isna(x)) else str(x)


def evidence_view(report: ReportView) -> dict[str, Any]:
    """``{"banners", "smoke", "rule", "rows", "counts"}`` (``rows`` None when the stage has no table)."""
    s = report.stage("evidence")
    banners = [{"status": s.status, "name": s.name, "title": s.title, "error": s.error or ""}] if s.status in ("failed", "skipped") else []
    table = getattr(report, "evidence", None)
    smoke = smoke_sentence(f"{s.info.get('n_items', '?')} items per test") if report.smoke_test("evidence") else None
    if table is None or not s.ok:
        return {"banners": banners, "smoke": smoke, "rule": evidence_rule_text(), "rows": None, "counts": ""}
    rows = [
        {
            "name": _text(r.name),
            "role": _text(r.role),
            "evidence": _text(r.evidence),
            "cls": _text(r.evidence).replace(" ", "-"),
            "figure": figure_text(r),
            "unit": _text(r.unit),
            "detail": _text(r.detail),
        }
        for r in specific_first(table).itertuples()  # the sink rows last: in a Llama-family model most heads sink
    ]
    counts = ", ".join(f"{v} {k}" for k, v in table["evidence"].value_counts().items())
    roles = getattr(report, "roles", None)
    if roles is not None and "sink_sample" in s.info:  # the sink role on a random sample: the population's verdict
        counts += "".join(f". {line.strip()}" for line in sink_evidence_line(table, roles, s.info["sink_sample"].get("seed")))
    return {"banners": banners, "smoke": smoke, "rule": evidence_rule_text(), "rows": rows, "counts": counts}


def evidence_md(report: ReportView, esc: Callable[[Any], str], table: Callable[[list[str], list[list[str]]], list[str]]) -> list[str]:
    """The Markdown section; ``esc`` escapes a cell, ``table`` writes a table of escaped cells."""
    v = evidence_view(report)
    lines = ["## Evidence for the roles", ""]
    for b in v["banners"]:
        lines += [
            f"**FAILED**: stage `{b['name']}`: {esc(b['error'])}" if b["status"] == "failed" else f"Stage `{b['name']}` was skipped.",
            "",
        ]
    if v["smoke"]:
        lines += [f"**{esc(v['smoke'])}**", ""]
    lines += [esc(v["rule"]), ""]
    if v["rows"] is None:
        return lines
    if not v["rows"]:
        return [*lines, "No head has a role, so nothing was tested.", ""]
    rows = [[esc(r["name"]), esc(r["role"]), esc(r["evidence"]), esc(r["figure"]), esc(r["unit"]), esc(r["detail"])] for r in v["rows"]]
    lines += [esc(v["counts"]) + ".", ""] if v["counts"] else []
    return lines + table(["head", "role", "evidence", "figure [95% CI]", "figure measures", "why"], rows) + [""]
