"""What the HTML pages inline, made safe for the element it goes into: the package's static files
(``reports/render/page/static/``: style and scripts) and JSON data for ``<script type="application/json">``.

Used by the report page (:mod:`headlens.reports.render.page.html`) and the attention view
(:mod:`headlens.reports.render.page.attention_component`).
"""

from __future__ import annotations

import functools
import json
import logging
from importlib import resources
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["static_text", "json_for_script"]

_PACKAGE = "headlens.reports.render.page"


@functools.cache
def static_text(name: str) -> str:
    """A file of ``reports/render/page/static/`` (a style or a script), as shipped in the package."""
    text = resources.files(_PACKAGE).joinpath("static").joinpath(name).read_text(encoding="utf-8")
    closing = "</style" if name.endswith(".css") else "</script"
    if closing in text.lower():  # it is inlined into that element: it must not end it early
        raise ValueError(f"static/{name} contains {closing}")
    return text


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: it cannot close the
    element or open a comment, whatever the strings hold."""
    text = json.dumps(obj, ensure_ascii=True, sort_keys=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
