"""reports: the ``headlens`` CLI, tables, figures and the full report.

The public names below are imported lazily on first use, so ``import reports`` is cheap.
"""

from __future__ import annotations

from headlens.probes._lazy import lazy_exports

_EXPORTS = {
    "build_report": "headlens.reports.report",
    "load_report": "headlens.reports.report",
    "Report": "headlens.reports.report",
    "ReportSettings": "headlens.reports.report",
    "ReportProgress": "headlens.reports.report",
    "render_html": "headlens.reports.report_html",
    "render_markdown": "headlens.reports.report_md",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
