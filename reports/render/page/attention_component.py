"""The attention view as HTML: one prompt's tokens, hover or focus a token to see where it attends.

One component (``static/attention_view.js`` and ``static/attention_view.css``) used by the report
page's example prompts and by :class:`headlens.reports.api.attention_view.AttentionView` in a notebook.
This module builds what it reads and the HTML around it:

* :func:`view_data`: tokens and patterns ``[layer, head, q, k]`` as the JSON the script reads
  (weights as base64 float32, exact, or one byte each for the report page, whose many heads and
  prompts would otherwise weigh megabytes);
* :func:`fragment_html`: a ``<div>`` plus its data, style and script, for ``_repr_html_``; every
  element id carries a fresh random suffix, so several views live in one notebook;
* :func:`standalone_html`: a whole page (``AttentionView.save``) with a Content-Security-Policy
  that allows its one script and no connection.

Nothing is loaded from the network: the script and style are inlined, the data is JSON made safe
for a ``<script>`` element by :func:`headlens.reports.render.page.inline.json_for_script`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np

from headlens.probes.errors import InputError
from headlens.reports.render.page.inline import json_for_script, static_text

log = logging.getLogger(__name__)

__all__ = [
    "token_label",
    "WHITESPACE_GLYPHS",
    "view_data",
    "fragment_html",
    "standalone_html",
    "new_element_id",
    "is_causal",
    "embedded_bytes",
    "ENCODINGS",
    "NOSCRIPT",
    "MAX_VIEW_BYTES",
]

#: How weights travel: ``f32`` exact (little-endian float32), ``u8`` ``round(255 * w)`` (within 0.2%).
ENCODINGS = ("f32", "u8")
#: Shown where no script runs (an untrusted notebook, a static render); the script replaces it.
NOSCRIPT = "headlens attention view: this needs JavaScript (in Jupyter, a trusted notebook)."


#: How a whitespace character of a token is shown (the view's token boxes and the figures' tick labels):
#: a line break, a tab or a carriage return always; a space only in a token of whitespace alone
#: (" " or an indentation run would otherwise be a blank box; in " b" the space shows as a gap).
WHITESPACE_GLYPHS = {"\n": "\u21b5", "\t": "\u21e5", "\r": "\u240d"}
#: A space in a whitespace-only token.
SPACE_GLYPH = "\u2423"
#: An empty token.
EMPTY_GLYPH = "\u2205"


def token_label(token: str) -> str:
    """How a token is shown: ``"\\n"`` -> ``"↵"``, ``"\\t"`` -> ``"⇥"``, ``" "`` -> ``"␣"``, ``"    "`` ->
    ``"␣␣␣␣"``, ``""`` -> ``"∅"``; ``" b"`` stays ``" b"`` and ``"a\\n"`` is ``"a↵"``.  The one rule: the
    attention view receives these labels as data (``labels``) and the figures draw them."""
    text = str(token)
    if not text:
        return EMPTY_GLYPH
    shown = "".join(WHITESPACE_GLYPHS.get(c, c) for c in text)
    if text.isspace():
        shown = shown.replace(" ", SPACE_GLYPH).replace("\u00a0", SPACE_GLYPH)
    return shown


#: The most weight bytes one view embeds (before base64's 4/3): a notebook output or a page
#: much larger than this stalls the browser.  A longer prompt needs fewer layers or heads.
MAX_VIEW_BYTES = 32 * 2**20


def embedded_bytes(n_layers: int, n_heads: int, n_tokens: int, *, causal: bool, encoding: str = "f32") -> int:
    """How many bytes of weights a view of these many heads and tokens embeds (:func:`view_data`)."""
    per_head = n_tokens * (n_tokens + 1) // 2 if causal else n_tokens * n_tokens
    return n_layers * n_heads * per_head * (4 if encoding == "f32" else 1)


def is_causal(patterns: np.ndarray) -> bool:
    """True when no query attends to a later key: every weight above the diagonal is exactly 0
    (a decoder; an encoder attends both ways).  What the view shades as "later token"."""
    return not bool(np.triu(patterns, k=1).any())


def _encode(patterns: np.ndarray, *, tri: bool, encoding: str) -> str:
    """``patterns [layer, head, q, k]`` flattened (the lower triangle only when ``tri``), base64."""
    n = patterns.shape[-1]
    flat = patterns[..., np.tril_indices(n)[0], np.tril_indices(n)[1]] if tri else patterns.reshape(*patterns.shape[:2], n * n)
    if encoding == "f32":
        raw = np.ascontiguousarray(flat, dtype="<f4").tobytes()
    else:
        raw = np.clip(np.rint(flat * 255.0), 0, 255).astype(np.uint8).tobytes()
    return base64.b64encode(raw).decode("ascii")


def view_data(
    tokens: Sequence[str],
    patterns: Any,
    *,
    layers: Sequence[int],
    heads: Sequence[int],
    causal: bool | None = None,
    encoding: str = "f32",
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    title: str | None = None,
) -> dict[str, Any]:
    """The JSON the script reads.

    ``patterns[i, j]`` is the ``[q, k]`` pattern of head ``heads[j]`` in layer ``layers[i]`` on
    ``tokens``.  ``causal=None`` reads it from the weights (:func:`is_causal`).  ``layer``/``head``
    (model indices) are shown first (default: the first of each); ``query`` is the token whose
    attention is shown before any is hovered (default: the last).
    """
    p = np.asarray(patterns, dtype=np.float32)
    n = len(tokens)
    if p.ndim != 4 or p.shape != (len(layers), len(heads), n, n):
        raise InputError(
            f"patterns has shape {p.shape}; expected [layers, heads, q, k] = {(len(layers), len(heads), n, n)}", patterns=p.shape
        )
    if n == 0:
        raise InputError("tokens is empty: nothing to show", tokens=n)
    if encoding not in ENCODINGS:
        raise InputError(f"encoding {encoding!r} is not one of {', '.join(ENCODINGS)}", encoding=encoding)
    if not np.isfinite(p).all():
        raise InputError("patterns holds NaN or infinite weights", patterns=p.shape)
    causal = is_causal(p) if causal is None else bool(causal)
    layers, heads = [int(x) for x in layers], [int(x) for x in heads]
    return {
        "tokens": [str(t) for t in tokens],
        "labels": [token_label(str(t)) for t in tokens],  # what the script shows (token_label: whitespace as glyphs)
        "layers": layers,
        "heads": heads,
        "layer": layers[0] if layer is None else int(layer),
        "head": heads[0] if head is None else int(head),
        "query": n - 1 if query is None else int(query),
        "causal": causal,
        "tri": causal,  # a causal pattern's upper triangle is 0 by construction: not sent
        "enc": encoding,
        "att": _encode(p, tri=causal, encoding=encoding),
        "title": title,
    }


def new_element_id() -> str:
    """A fresh id for one view (``hl-av-`` and 12 random hex digits)."""
    return f"hl-av-{secrets.token_hex(6)}"


def _mount_script(element_id: str) -> str:
    return (
        static_text("attention_view.js")
        + f'headlensAttention.mountId("{element_id}", document.currentScript && document.currentScript.parentNode);\n'
    )


def fragment_html(data: dict[str, Any], *, element_id: str | None = None) -> str:
    """One view as an HTML fragment (a notebook's ``_repr_html_``): its root, data, style and script."""
    eid = element_id or new_element_id()
    if not eid.replace("-", "").isalnum():
        raise InputError(f"element_id {eid!r}: letters, digits and '-' only", element_id=eid)
    return (
        f'<div class="hl-av-wrap">'
        f'<div class="hl-av" id="{eid}"><p class="hl-av-nojs">{html.escape(NOSCRIPT)}</p></div>'
        f'<script type="application/json" id="{eid}-data">{json_for_script(data)}</script>'
        f"<style>{static_text('attention_view.css')}</style>"
        f"<script>{_mount_script(eid)}</script>"
        f"</div>"
    )


def standalone_html(data: dict[str, Any], *, title: str, element_id: str = "hl-av-main") -> str:
    """A whole page holding one view: opens offline in any browser; its Content-Security-Policy
    allows its one script (by SHA-256), inline styles, and nothing from anywhere."""
    script = _mount_script(element_id)
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    csp = f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="generator" content="headlens">\n<link rel="icon" href="data:,">\n'
        f"<title>{html.escape(title)}</title>\n"
        f"<style>{static_text('attention_view.css')}</style>\n"
        "</head><body>\n"
        f'<h1 style="font:600 16px system-ui,sans-serif">{html.escape(title)}</h1>\n'
        f'<div class="hl-av" id="{element_id}"><p class="hl-av-nojs">{html.escape(NOSCRIPT)}</p></div>\n'
        f'<script type="application/json" id="{element_id}-data">{json_for_script(data)}</script>\n'
        f"<script>{script}</script>\n"
        "</body></html>\n"
    )
