"""reports: the ``headlens`` CLI, tables, figures and the full report.

The public names below are imported lazily on first use, so ``import reports`` is cheap.
"""

from __future__ import annotations

from probes._lazy import lazy_exports

_EXPORTS = {
    "build_report": "reports.report",
    "load_report": "reports.report",
    "Report": "reports.report",
    "ReportSettings": "reports.report",
    "ReportProgress": "reports.report",
    "render_html": "reports.report_html",
    "render_markdown": "reports.report_md",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
