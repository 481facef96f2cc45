"""The page's 'Design questions' section as plain data (template: ``sections/design.html.j2``).

Numbers are formatted here; every string goes through the template's autoescape.  The
loss-vs-cache figure is the SVG the design stage saved (``design/gqa_loss_vs_cache.svg``),
inlined after :func:`headlens.reports.render.page.figure.inline_svg` cleans it.
"""

from __future__ import annotations

import logging
from typing import Any

from markupsafe import Markup

from headlens.reports.render.design_tables import gqa_reading, knockout_reading
from headlens.reports.render.page.figure import inline_svg
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.smoke import data_items
from headlens.reports.render.page.values import finite, num, signed

log = logging.getLogger(__name__)

__all__ = ["design_view", "FIGURE_FILE"]

FIGURE_FILE = "design/gqa_loss_vs_cache.svg"
_PARTS = {"kv": "KV cache", "gqa": "GQA what-if", "projections": "projection knockouts", "roles": "role changes under knockout"}


def _pct(v: Any) -> str:
    return "n/a" if finite(v) is None else f"{100 * float(v):.0f}%"


def _bytes(v: Any) -> str:
    return "n/a" if finite(v) is None else f"{int(float(v)):,}"


def _kv(t: Any) -> list[dict[str, str]]:
    return [
        {
            "variant": str(d["variant"]),
            "kv_heads": str(d["kv_heads"]),
            "per_token": _bytes(d["bytes_per_token"]),
            "total": _bytes(d["bytes"]),
            "saved": _pct(d["saved"]),
            "formula": str(d["formula"]),
        }
        for d in t.to_dict("records")
    ]


def _gqa(t: Any) -> list[dict[str, str]]:
    rows = []
    for d in t.to_dict("records"):
        original = str(d["grouping"]) == "original"
        rows.append(
            {
                "grouping": str(d["grouping"]),
                "g": str(int(d["g"])),
                "kv_heads": str(int(d["kv_heads"])),
                "per_token": _bytes(d["kv_bytes_per_token"]),
                "saved": _pct(d["kv_saved"]),
                "loss": num(d["loss"], 4),
                "change": "" if original else signed(d["loss_change"], 4),
                "ci": "" if original else f"[{signed(d['change_ci_low'], 4)}, {signed(d['change_ci_high'], 4)}]",
                "mean_js": "" if original else num(d["mean_js"], 4),
                "max_js": "" if original else num(d["max_js"], 4),
            }
        )
    return rows


def _knockouts(losses: Any, roles: Any) -> list[dict[str, str]]:
    whole = losses[(losses["head"] == -1) & (losses["kind"] != "none")]
    rows = []
    for d in whole.to_dict("records"):
        row = {
            "layer": str(int(d["layer"])),
            "kind": str(d["kind"]),
            "loss": num(d["loss"], 4),
            "change": signed(d["loss_change"], 4),
            "relative": "n/a" if finite(d["relative_change"]) is None else f"{100 * float(d['relative_change']):+.1f}%",
        }
        if roles is not None:
            ch = roles[(roles["knocked_layer"] == d["layer"]) & (roles["kind"] == d["kind"])]
            row["lost"] = ", ".join(f"{int(x['layer'])}.{int(x['head'])} {x['lost']}" for x in ch.to_dict("records") if x["lost"]) or "none"
            row["gained"] = (
                ", ".join(f"{int(x['layer'])}.{int(x['head'])} {x['gained']}" for x in ch.to_dict("records") if x["gained"]) or "none"
            )
        rows.append(row)
    return rows


def design_view(report: ReportView) -> dict[str, Any] | None:
    """What the design section shows, or None when the stage did not run (its banner says why)."""
    tables = report.design
    if tables is None:
        return None
    info = report.stage("design").info
    data = info.get("data") or {}
    out: dict[str, Any] = {
        "where": f"{data.get('n_windows', '?')} windows of {data.get('window', '?')} tokens of the evaluation text",
        "kv": _kv(tables["kv"]) if "kv" in tables else [],
        "notes": [
            {"part": _PARTS.get(str(d["part"]), str(d["part"])), "reason": str(d["reason"])} for d in tables["skipped"].to_dict("records")
        ]
        if "skipped" in tables
        else [],
        "gqa": None,
        "knockouts": None,
    }
    if "gqa_summary" in tables:
        s = tables["gqa_summary"]
        figure = None
        if report.out_dir is not None:
            svg = inline_svg(
                report.out_dir / FIGURE_FILE,
                element_id="design-gqa-svg",
                label="GQA what-if: loss against KV cache per token, adjacent and similarity grouping",
            )
            figure = None if svg is None else Markup(svg)  # cleaned by inline_svg: no script, handler or outside link
        out["gqa"] = {
            "rows": _gqa(s),
            "reading": [
                line.removeprefix("- ")
                for line in gqa_reading(s, tables.get("gqa_comparison"), n_items=data_items(info)[0], smoke=report.smoke_test("design"))
            ],
            "figure": figure,
            "figure_file": FIGURE_FILE,
        }
    if "knockout_losses" in tables:
        roles = tables.get("knockout_roles")
        base = tables["knockout_losses"]
        base_loss = base[base["kind"] == "none"]["loss"]
        out["knockouts"] = {
            "rows": _knockouts(base, roles),
            "roles": roles is not None,
            "base": num(base_loss.iloc[0], 4) if len(base_loss) else "n/a",
            "reading": [
                line.removeprefix("- ") for line in knockout_reading(base, roles) if not line.startswith("- layer ")
            ],  # the per-layer lines are the table
        }
    return out
