"""reports: the ``headlens`` CLI, tables, figures and the full report.

The public names below are imported explicitly, so an IDE and a type checker see their real types.
"""

from __future__ import annotations

from headlens.reports.render.page.html import render_html
from headlens.reports.render.page.markdown import render_markdown
from headlens.reports.runs.report.build import ReportProgress, build_report, load_report
from headlens.reports.runs.report.result import Report
from headlens.reports.runs.report.settings import ReportSettings

__all__ = [
    "build_report",
    "load_report",
    "Report",
    "ReportSettings",
    "ReportProgress",
    "render_html",
    "render_markdown",
]
