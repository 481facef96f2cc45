"""The one GitHub-Markdown table writer of headlens.

It lives in the rendering floor (``headlens.reports.render``), below everything that writes
Markdown tables: the studies' summaries (the sinks summary, the census summary, the design
tables), ``report.md`` (its template writes each row with :func:`markdown_row`) and the demo
model card.

Cells are escaped by default: ``|`` becomes ``\\|`` and line breaks become a literal ``\\n``
(a cell is one line); floats are formatted with ``floatfmt``.  Pass ``escape=False`` for cells
that are already Markdown (bold, code spans, text escaped by
:func:`headlens.reports.render.page.md_templates.md_text`).
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["markdown_table", "markdown_cell", "markdown_row", "markdown_header"]


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
    lines = [markdown_header(header, floatfmt=floatfmt, escape=escape)]
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"markdown_table: a row has {len(row)} cells, the header {len(header)}")
        lines.append(markdown_row(row, floatfmt=floatfmt, escape=escape))
    return "\n".join(lines)


def markdown_header(header: Sequence[Any], *, floatfmt: str = ".3f", escape: bool = True) -> str:
    """A table's header line and its ``|---|`` rule, joined by ``\\n``."""
    return markdown_row(header, floatfmt=floatfmt, escape=escape) + "\n|" + "|".join("---" for _ in header) + "|"


def markdown_row(cells: Sequence[Any], *, floatfmt: str = ".3f", escape: bool = True) -> str:
    """One table line (``| a | b |``; an empty cell is ``| |``), cells as :func:`markdown_cell` writes them."""
    return "|" + "|".join(f" {c} " if c else " " for c in (markdown_cell(v, floatfmt=floatfmt, escape=escape) for v in cells)) + "|"
