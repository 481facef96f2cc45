"""Words for the census's role evidence (the table of
:func:`headlens.analyses.patching.evidence.role_evidence`; the rules are there, this only words
them): the per-head evidence column, the terminal lines, the Markdown section."""

from __future__ import annotations

import logging
import math
from typing import Any

import pandas as pd

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.evidence import COPY_RATIO, MIN_EFFECT, MIN_LOSS
from headlens.reports.render.markdown import markdown_table

log = logging.getLogger(__name__)

__all__ = ["EVIDENCE_FILE", "evidence_joined", "figure_text", "evidence_lines", "evidence_view", "evidence_rule_text"]

EVIDENCE_FILE = "evidence.csv"


def evidence_rule_text() -> str:
    """One paragraph: each role's test, the direction it predicts, when it is supported (the thresholds are the analysis's)."""
    return (
        "Each role is tested by the intervention it predicts, in the direction it predicts: an effect the other way is not support, "
        "however large, and says so. "
        "Induction: with the head zero-ablated, the loss rises on the second copy of repeated random tokens more than on the first "
        f"(interval above 0), the second-copy rise is itself a finding (interval above 0) of at least {MIN_LOSS:g} nats and "
        f"{COPY_RATIO:g}x the size of the first copy's change (a first copy that gets better does not count), and the effect goes "
        "through its own induction attention: masking only its attention from each second-copy token to the token after the "
        f"earlier occurrence raises the second-copy loss by at least {MIN_LOSS:g} nats (interval above 0; a head upstream of the "
        "induction heads passes the ablation but not this). "
        "Previous-token: path patching it into the key input of the induction heads, all at once, restores at least "
        f"{MIN_EFFECT:.0%} of the induction behaviour (interval's low end). "
        "Duplicate-token: masking its attention from each repeated token to the earlier occurrence moves the predictions (KL) "
        f"by at least {MIN_LOSS:g} nats more than masking the token after it (interval above 0). "
        "Referent: patching the head's output from the pair's other sentence moves the preference toward the antecedent by at "
        f"least {MIN_EFFECT:.0%} of the gap (interval above 0). "
        f"Sink: removing its attention to the first token (renormalised) costs at least {MIN_LOSS:g} nats of loss "
        f"(interval above 0); when more than half the heads sink, on a seeded random sample of the sink-only heads (the rest "
        f"'not tested', counted) and on every head with another role. Every verdict needs at least {MIN_ITEMS} items; "
        "'not testable here' gives the reason."
    )


def _fmt(x: Any, digits: int = 3) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if not math.isfinite(v) else f"{v:.{digits}f}"


def figure_text(row: Any) -> str:
    """``"1.218 [1.110, 1.350]"``, or ``"n/a"`` without a figure."""
    if _fmt(row.figure) == "n/a":
        return "n/a"
    return f"{_fmt(row.figure)} [{_fmt(row.figure_low)}, {_fmt(row.figure_high)}]"


def evidence_joined(evidence: pd.DataFrame, heads: pd.DataFrame, sep: str = "; ") -> list[str]:
    """For each row of ``heads`` (``layer, head``): ``"induction: supported; sink: not testable here"``, ``""`` without a role."""
    by_head: dict[tuple[int, int], list[str]] = {}
    for r in evidence.sort_values(["layer", "head", "role"]).itertuples():
        by_head.setdefault((int(r.layer), int(r.head)), []).append(f"{r.role}: {r.evidence}")
    return [sep.join(by_head.get((int(a), int(b)), ())) for a, b in zip(heads["layer"], heads["head"], strict=True)]


def evidence_lines(evidence: pd.DataFrame) -> list[str]:
    """One terminal line per (head, role)."""
    return [f"  {r.name:>6}  {r.role:<16} {r.evidence:<18} {figure_text(r)}  {r.detail}" for r in evidence.itertuples()]


def evidence_view(evidence: pd.DataFrame, *, smoke_note: str | None = None, lead: list[str] | None = None) -> dict[str, Any]:
    """The parts of an evidence section (``summaries/evidence.md.j2``: a ``##`` heading, the rule,
    ``lead`` as bullets, e.g. the sink population's verdict, the table; None when nothing was tested)."""
    rows = [[r.name, r.role, r.evidence, figure_text(r), r.unit, r.detail] for r in evidence.itertuples()]
    header = ["head", "role", "evidence", "figure [95% CI]", "figure measures", "why"]
    return {
        "smoke_note": smoke_note,
        "rule": evidence_rule_text(),
        "lead": lead or [],
        "table": None if evidence.empty else markdown_table(rows, header),
    }
