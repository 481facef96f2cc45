"""``report.html``: one self-contained page (inline CSS, inline script, inline SVG; no network).

Rendered with Jinja2 from ``reports/page/templates/`` (``report.html.j2`` and one template per
section); the style and the script are files (``reports/page/static/report.css``,
``report.js``) inlined at render time.  What the page shows is built as plain data by
:mod:`headlens.reports.page.view`.

Safe by construction:

* autoescape is on: every string that came from the model, the user or the file system
  (tokens, prompts, model names, paths, errors) is escaped where a template writes it;
* the data the script needs is one ``<script type="application/json">`` block written by
  :func:`json_for_script` (``<``, ``>``, ``&`` and line separators as ``\\uXXXX`` escapes, so no
  string can close the element), read with ``JSON.parse`` and put on the page with
  ``textContent`` only (the script never assigns ``innerHTML``);
* the one figure inlined (the pruning curve's SVG) is parsed and stripped of anything active
  (:mod:`headlens.reports.page.figure`);
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
from importlib import resources
from typing import Any

from headlens.reports.page.script_data import json_for_script, script_data

log = logging.getLogger(__name__)

__all__ = ["render_html", "json_for_script", "static_text", "environment"]

_PACKAGE = "headlens.reports.page"


@functools.lru_cache(maxsize=None)
def static_text(name: str) -> str:
    """A file of ``reports/page/static/`` (the page's CSS or script), as shipped in the package."""
    text = resources.files(_PACKAGE).joinpath("static", name).read_text(encoding="utf-8")
    closing = "</style" if name.endswith(".css") else "</script"
    if closing in text.lower():  # it is inlined into that element: it must not end it early
        raise ValueError(f"static/{name} contains {closing}")
    return text


@functools.lru_cache(maxsize=1)
def environment() -> Any:
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


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render_html(report: Any) -> str:
    """The whole page for a :class:`headlens.reports.report.result.Report`."""
    from markupsafe import Markup

    from headlens.reports.page.view import page_context

    script = static_text("report.js")
    context = page_context(report)
    if context["pruning"] is not None and context["pruning"]["figure"] is not None:
        context["pruning"]["figure"] = Markup(context["pruning"]["figure"])  # cleaned SVG (page/figure.py)
    return environment().get_template("report.html.j2").render(
        **context,
        csp=Markup(_csp(script)),  # our own constant and a base64 digest
        css=Markup(static_text("report.css")),
        script=Markup(script),
        data=Markup(json_for_script(script_data(report))),
    )
