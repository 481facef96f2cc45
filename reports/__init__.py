"""reports: the ``headlens`` CLI, tables, figures and the full report.

The public names below are imported lazily on first use, so ``import reports`` is cheap.
"""

from __future__ import annotations

from headlens.probes._lazy import lazy_exports

_EXPORTS = {
    "build_report": "headlens.reports.report.build",
    "load_report": "headlens.reports.report.build",
    "Report": "headlens.reports.report.result",
    "ReportSettings": "headlens.reports.report.settings",
    "ReportProgress": "headlens.reports.report.build",
    "render_html": "headlens.reports.page.html",
    "render_markdown": "headlens.reports.page.markdown",
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll] - the lazy-export table is the one list of names
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
