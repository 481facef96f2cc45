"""reports: the ``headlens`` CLI, tables, figures and the full report.

The public names below are imported lazily on first use, so ``import reports`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
