"""Words for a :class:`headlens.analyses.measure.verdicts.Verdict` (the rule is there; this only words it),
a rank correlation's permutation p-value, and the one smoke-test notice of the report's quick sections."""

from __future__ import annotations

import logging
from typing import Any

from headlens.analyses.measure.stats import CHANCE_P
from headlens.analyses.measure.verdicts import ABOVE, BELOW, FEW_ITEMS, MIN_ITEMS, NOT_DISTINGUISHABLE, SMOKE, Verdict

log = logging.getLogger(__name__)

__all__ = ["verdict_words", "rank_test_words", "SMOKE_LABEL", "smoke_sentence", "figure_smoke_note"]

#: How every quick (smoke-test) section, figure and manifest entry is marked.
SMOKE_LABEL = "smoke test"


def verdict_words(v: Verdict, *, above: str, below: str, versus: str = "0", items: str = "windows") -> str:
    """``above`` / ``below`` for a finding; otherwise why there is none, e.g. ``"not
    distinguishable from 0"`` or ``"no finding (smoke test: 2 windows)"``."""
    if v.kind == ABOVE:
        return above
    if v.kind == BELOW:
        return below
    if v.kind == NOT_DISTINGUISHABLE:
        return f"not distinguishable from {versus}"
    n = "" if v.n_items is None else f"{v.n_items} {items}"
    if v.why == SMOKE:
        return f"no finding ({SMOKE_LABEL}" + (f": {n})" if n else ")")
    if v.why == FEW_ITEMS:
        return f"no finding (only {n}; a finding needs at least {MIN_ITEMS})"
    return "no finding (no interval)"


def rank_test_words(p: float | None, *, units: str = "heads") -> str:
    """`` (permutation p = 0.028, two-sided)`` after a rank correlation (:func:`headlens.analyses.measure.stats.spearman_p`),
    or with a p of :data:`~headlens.analyses.measure.stats.CHANCE_P` or more `` (permutation p = 0.084: not distinguishable from
    no association at this number of heads)``; ``""`` where none was recorded (None or NaN)."""
    if p is None or p != p:
        return ""
    shown = "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
    if p >= CHANCE_P:
        return f" (permutation {shown}: not distinguishable from no association at this number of {units})"
    return f" (permutation {shown}, two-sided)"


def smoke_sentence(where: Any) -> str:
    """The notice on a section (or figure) that ``--quick`` ran: ``where`` says on what
    (e.g. ``"2 windows of 32 tokens"``)."""
    return (
        f"Smoke test (--quick, {where}): these numbers show that the stage runs; they state no finding."
        " Run the report without --quick for results."
    )


def figure_smoke_note(where: Any) -> str:
    """The line a smoke-test figure carries under its title."""
    return f"{SMOKE_LABEL.upper()} (--quick, {where}): no finding"
