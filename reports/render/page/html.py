"""``report.html``: one self-contained page (inline CSS, inline script, inline SVG; no network).

Rendered with Jinja2 from ``reports/render/page/templates/`` (``report.html.j2`` and one template per
section); the style and the script are files (``reports/render/page/static/report.css``,
``report.js``, and the attention view's ``attention_view.css``/``.js``, the component the
example prompts use) inlined at render time (:mod:`headlens.reports.render.page.inline`).  What the
page shows is built as plain data by :mod:`headlens.reports.render.page.view`.

Safe by construction:

* autoescape is on: every string that came from the model, the user or the file system
  (tokens, prompts, model names, paths, errors) is escaped where a template writes it;
* the data the script needs is one ``<script type="application/json">`` block written by
  :func:`~headlens.reports.render.page.inline.json_for_script` (``<``, ``>``, ``&`` and line separators
  as ``\\uXXXX`` escapes, so no string can close the element), read with ``JSON.parse`` and put on the page with
  ``textContent`` only (the script never assigns ``innerHTML``);
* the one figure inlined (the pruning curve's SVG) is parsed and stripped of anything active
  (:mod:`headlens.reports.render.page.figure`);
* a Content-Security-Policy allows exactly one script (by its SHA-256), inline styles and
  ``data:`` images, and no connection anywhere: even markup that slipped through could not run.

Deterministic: the same report renders to the same bytes (fixed ids, fixed number formats, no
clock); the only timestamp is the manifest's own.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
from typing import TYPE_CHECKING

from markupsafe import Markup

from headlens.reports.render.page.inline import json_for_script, static_text
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.script_data import script_data
from headlens.reports.render.page.view import page_context

if TYPE_CHECKING:
    import jinja2

log = logging.getLogger(__name__)

__all__ = ["render_html", "environment", "page_script", "page_css"]

_PACKAGE = "headlens.reports.render.page"


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment of the page: the package's templates, autoescape on."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader(_PACKAGE, "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )


def page_script() -> str:
    """The page's one script: the attention view component, then the page's own."""
    return static_text("attention_view.js") + "\n" + static_text("report.js")


def page_css() -> str:
    """The page's style: its own, then the attention view's (scoped to ``.hl-av``)."""
    return static_text("report.css") + "\n" + static_text("attention_view.css")


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    )


def render_html(report: ReportView) -> str:
    """The whole page for a :class:`headlens.reports.runs.report.result.Report`."""
    script = page_script()
    context = page_context(report)
    if context["pruning"] is not None and context["pruning"]["figure"] is not None:
        context["pruning"]["figure"] = Markup(context["pruning"]["figure"])  # cleaned SVG (page/figure.py)
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            **context,
            csp=Markup(_csp(script)),  # our own constant and a base64 digest
            css=Markup(page_css()),
            script=Markup(script),
            data=Markup(json_for_script(script_data(report))),
        )
    )
