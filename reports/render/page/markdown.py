"""``report.md``: the report's tables as GitHub Markdown, with links to the figure files.

Rendered with Jinja2 from ``reports/render/page/templates/`` (``report.md.j2`` and one
``sections/*.md.j2`` per section) over the context ``report.html`` is rendered from
(:func:`headlens.reports.render.page.view.page_context`): what both pages show is computed once
there, and each template only words and formats it.

Markdown is not HTML, so autoescape is off: strings from the model or the user go through the
``md`` filter (:func:`~headlens.reports.render.page.md_templates.md_text`): HTML special characters are escaped (a renderer that allows raw
HTML still shows ``<script>`` as text) and so are the characters Markdown gives meaning to
(``|`` would break a table).  Table lines are written by :func:`headlens.reports.render.markdown.markdown_row`.
"""

from __future__ import annotations

import logging

from headlens.reports.render.page.md_templates import md_environment
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.view import page_context

log = logging.getLogger(__name__)

__all__ = ["render_markdown"]


def render_markdown(report: ReportView) -> str:
    """``report.md`` for a :class:`headlens.reports.runs.report.result.Report`."""
    return md_environment().get_template("report.md.j2").render(**page_context(report))
