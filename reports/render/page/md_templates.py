"""The Jinja2 environment of every Markdown file headlens writes: ``report.md`` (:mod:`headlens.reports.render.page.markdown`)
and each study's ``summary.md`` (``templates/summaries/*.md.j2``), with the filters their templates format values with.

Markdown is not HTML, so autoescape is off: strings from the model or the user go through the
``md`` filter (:func:`md_text`) where a template says so.  Apart from ``markdown.py`` because that
one needs the report page's context (:mod:`headlens.reports.render.page.view`), which imports the
summaries' renderers.
"""

from __future__ import annotations

import functools
import html
import json
import logging
from typing import TYPE_CHECKING, Any

from headlens.analyses.measure.verdicts import finite_float
from headlens.reports.render.markdown import markdown_header, markdown_row

if TYPE_CHECKING:
    import jinja2

log = logging.getLogger(__name__)

__all__ = ["md_text", "md_environment"]

_PACKAGE = "headlens.reports.render.page"


def md_text(value: Any) -> str:
    """Plain text for a Markdown table cell or paragraph, whatever it holds."""
    s = str(value).replace("\\", "\\\\")
    for ch in "`*_[]|#":
        s = s.replace(ch, "\\" + ch)
    return " ".join(html.escape(s, quote=False).splitlines())


def _num(x: Any, digits: int = 3, signed: bool = False) -> str:
    """A number with ``digits`` decimals (``signed``: with its sign), ``n/a`` when it is not a finite number."""
    v = finite_float(x)
    if v is None:
        return "n/a"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _pct(x: Any) -> str:
    """A fraction as a whole percentage (``25%``), ``n/a`` when it is not a finite number."""
    v = finite_float(x)
    return "n/a" if v is None else f"{100 * v:.0f}%"


def _fmt(x: Any, spec: str, scale: float = 1) -> str:
    """``format(scale * float(x), spec)``: the number exactly as the f-string ``f"{scale * x:spec}"`` writes it."""
    return format(scale * float(x), spec)


def _json(value: Any) -> str:
    """JSON for a fenced block: ``<``, ``>`` and backticks as ``\\uXXXX`` (no tag, no closing fence)."""
    return json.dumps(value, indent=2, default=str).replace("<", "\\u003c").replace(">", "\\u003e").replace("`", "\\u0060")


@functools.lru_cache(maxsize=1)
def md_environment() -> jinja2.Environment:
    """The Jinja2 environment of ``report.md``: the page's templates folder, no autoescape (the ``md`` filter escapes)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(_PACKAGE, "templates"),
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(md=md_text, num=_num, pct=_pct, fmt=_fmt, md_json=_json)
    # cells are Markdown already (escaped by the md filter where they hold text)
    env.filters.update(md_row=lambda cells: markdown_row(cells, escape=False), md_header=lambda cells: markdown_header(cells, escape=False))
    return env
