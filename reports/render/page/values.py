"""Number formats shared by the page's views (stable text: fixed digits, ``n/a`` for missing)."""

from __future__ import annotations

import math
from typing import Any

from headlens.analyses.measure.evalset import METRIC_LABELS

__all__ = ["finite", "num", "signed", "sortval", "metric_label"]


def finite(x: Any) -> float | None:
    """A finite float rounded to 6 significant digits (stable output), or None."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


def num(x: Any, digits: int = 3) -> str:
    v = finite(x)
    return "n/a" if v is None else f"{v:.{digits}f}"


def signed(x: Any, digits: int = 3) -> str:
    v = finite(x)
    return "n/a" if v is None else f"{v:+.{digits}f}"


def sortval(x: Any) -> str:
    v = finite(x)
    return "" if v is None else repr(v)


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(str(metric), str(metric))
