"""The one GitHub-Markdown table writer of headlens.

It lives in the bottom layer (``headlens.probes``) because both the library
(``headlens.reports.render.sinks_tables``: the sinks summary) and the reports (``report.md``, the
census summary, the demo model card) write Markdown tables, and the library never imports
``headlens.reports``.

Cells are escaped by default: ``|`` becomes ``\\|`` and line breaks become a literal ``\\n``
(a cell is one line); floats are formatted with ``floatfmt``.  Pass ``escape=False`` for cells
that are already Markdown (bold, code spans, text escaped by ``report_md.md_text``).
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["markdown_table", "markdown_cell"]


def markdown_cell(value: Any, *, floatfmt: str = ".3f", escape: bool = True) -> str:
    """One table cell: floats through ``floatfmt``, ``None`` as empty, the rest ``str``; then escaped."""
    if value is None:
        text = ""
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, numbers.Integral)):
        text = format(float(value), floatfmt)
    else:
        text = str(value)
    if escape:
        text = text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r").replace("|", "\\|")
    return text


def markdown_table(
    rows: Any,
    header: Sequence[Any] | None = None,
    *,
    floatfmt: str = ".3f",
    escape: bool = True,
) -> str:
    """A GitHub Markdown table, lines joined by ``\\n`` (no trailing newline).

    ``rows`` is a :class:`pandas.DataFrame` (its columns are the header unless ``header`` is
    given; the index is left out) or an iterable of row sequences with ``header``.  Every row
    has as many cells as the header.  A header cell may be empty (``"| | |"``).
    """
    if header is None:
        columns = getattr(rows, "columns", None)
        if columns is None:
            raise TypeError("markdown_table: pass header= with rows that are not a DataFrame")
        header = list(columns)
    if hasattr(rows, "itertuples"):
        body: Iterable[Sequence[Any]] = rows.itertuples(index=False, name=None)
    else:
        body = rows
    head = [markdown_cell(h, floatfmt=floatfmt, escape=escape) for h in header]
    lines = [_line(head), "|" + "|".join("---" for _ in head) + "|"]
    for row in body:
        cells = [markdown_cell(v, floatfmt=floatfmt, escape=escape) for v in row]
        if len(cells) != len(head):
            raise ValueError(f"markdown_table: a row has {len(cells)} cells, the header {len(head)}")
        lines.append(_line(cells))
    return "\n".join(lines)


def _line(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"
