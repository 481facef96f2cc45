"""A figure file (matplotlib SVG) inlined into the page: parsed, stripped to drawing elements.

The page's one chart, the pruning curve, is the figure the pruning stage saves
(``pruning/pruning_curve.svg``, :func:`headlens.reports.render.figures.ablation.pruning_curve`), not
a second drawing of the same data.  The file is read from the report folder, so it is parsed
and cleaned before it goes into the page: no ``<script>``, ``<foreignObject>``, event-handler
attribute or non-local link survives (the page's Content-Security-Policy would block them too).
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["inline_svg"]

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
_DROP = {"script", "foreignObject", "metadata", "iframe", "image", "a"}


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def inline_svg(path: Path, *, element_id: str, label: str) -> str | None:
    """The SVG at ``path`` as markup for an HTML page (``id`` and ``aria-label`` set), or None
    (logged) when the file is missing or not a readable SVG."""
    try:
        root = ET.fromstring(path.read_bytes())
    except (OSError, ET.ParseError) as exc:
        log.warning("figure %s not inlined into the page: %s", path, exc)
        return None
    if _local(root.tag) != "svg":
        log.warning("figure %s not inlined into the page: its root element is <%s>, not <svg>", path, _local(root.tag))
        return None
    for parent in list(root.iter()):
        for child in list(parent):
            if not isinstance(child.tag, str) or _local(child.tag) in _DROP:
                parent.remove(child)
    for el in root.iter():
        if not el.tag.startswith(f"{{{SVG_NS}}}"):
            log.warning("figure %s not inlined into the page: it holds a <%s> element outside SVG", path, el.tag)
            return None
        el.tag = _local(el.tag)  # plain names; the root's xmlns says SVG (the HTML parser knows <svg> anyway)
        for attr in list(el.attrib):
            name, value = _local(attr), el.attrib[attr]
            del el.attrib[attr]
            if name.lower().startswith("on") or (name == "href" and not value.startswith("#")) or "javascript:" in value.lower():
                continue
            el.set(name if attr.startswith(f"{{{XLINK_NS}}}") else attr, value)  # xlink:href -> href (SVG 2): no second namespace
    for el in root.iter("style"):  # an inline <svg>'s <style> applies to the whole page: scope it to the figure
        el.text = re.sub(
            r"(^|})\s*([^{}]+){",
            lambda m: m.group(1) + ", ".join(f"#{element_id} {sel.strip()}" for sel in m.group(2).split(",")) + "{",
            el.text or "",
        )
    root.attrib = {
        "xmlns": SVG_NS,
        "id": element_id,
        "role": "img",
        "aria-label": label,
        **{k: v for k, v in root.attrib.items() if k not in ("id", "xmlns")},
    }
    return ET.tostring(root, encoding="unicode")
