"""When a number may state a finding: the one rule every report applies to an estimate with its interval.

A difference (an ablation's change in loss, a GQA variant's loss change, similarity minus
adjacent grouping) states a finding only when all three hold:

* the run is not a smoke test (``headlens report --quick`` shrinks ablation, pruning, sinks and
  the design stage to a few windows: they show that the stage runs, nothing more);
* its interval comes from at least :data:`MIN_ITEMS` items (windows, sentences, prompts): a
  percentile bootstrap over fewer items takes only a handful of values (over 2 windows, 3:
  the two windows and their mean), so its "interval" says nothing about the spread;
* its interval excludes 0; for two estimates, their intervals do not overlap.

Otherwise the reports give the figure with its interval and no conclusion: "no finding (smoke
test)" on every estimate of a smoke test, whatever its interval (over a few windows "not
distinguishable" is as empty as a difference); else "not distinguishable" where the interval
includes 0 (the intervals overlap), or "no finding" with the reason.  The reports only word a
:class:`Verdict` (:mod:`headlens.reports.render.verdict_text`).

A *directed* test (a role's intervention predicts that its figure rises, or falls) is judged by
:func:`predicted_verdict`, the one rule for every role's evidence
(:mod:`headlens.analyses.patching.evidence`): the same finding as above, then its side: a
finding on the predicted side of 0 that clears the test's bar is ``as_predicted``; one on the
other side is ``opposite`` however large it is (an effect the role does not predict is no
support for it: ``|effect| >= bar`` is never the rule); one on the predicted side below the bar
is ``too_small``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MIN_ITEMS", "Verdict", "Prediction", "difference_verdict", "overlap_verdict", "predicted_verdict", "finite_float"]

#: The fewest items (windows, sentences, prompts) whose bootstrap interval may carry a finding.
MIN_ITEMS = 10

#: ``Verdict.kind`` values.
ABOVE, BELOW, NOT_DISTINGUISHABLE, NO_FINDING = "above", "below", "not_distinguishable", "no_finding"
#: ``Verdict.why`` values for ``no_finding``.
SMOKE, FEW_ITEMS, NO_INTERVAL = "smoke_test", "few_items", "no_interval"
#: ``Prediction.kind`` values besides ``not_distinguishable`` and ``no_finding``.
AS_PREDICTED, OPPOSITE, TOO_SMALL = "as_predicted", "opposite", "too_small"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What an estimate with its interval may say.

    ``kind``: ``above`` / ``below`` (a finding: the interval lies above / below 0, or the first
    estimate's above / below the second's), ``not_distinguishable`` (the interval includes 0, the
    intervals overlap), ``no_finding`` (``why``: ``smoke_test``, ``few_items``, ``no_interval``).
    ``n_items``: the items the interval came from, when known.
    """

    kind: str
    why: str = ""
    n_items: int | None = None

    @property
    def finding(self) -> bool:
        return self.kind in (ABOVE, BELOW)


def finite_float(x: Any) -> float | None:
    """``float(x)`` when it is a finite number, else None (NaN, inf, None, text)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _gate(n_items: int | None, smoke: bool, min_items: int) -> Verdict | None:
    n = None if n_items is None else int(n_items)
    if smoke:
        return Verdict(kind=NO_FINDING, why=SMOKE, n_items=n)
    if n is not None and n < min_items:
        return Verdict(kind=NO_FINDING, why=FEW_ITEMS, n_items=n)
    return None


def difference_verdict(low: Any, high: Any, *, n_items: int | None = None, smoke: bool = False, min_items: int = MIN_ITEMS) -> Verdict:
    """The verdict on a difference whose interval is ``[low, high]``, over ``n_items`` items
    (``None``: unknown, the item count is not checked); ``smoke``: a smoke-test run.

    A smoke test states no finding whatever the interval (``no_finding``, ``smoke_test``); else an
    interval that includes 0 is ``not_distinguishable`` (that says no more than the numbers), and
    one that excludes 0 is a finding only past the item check.
    """
    lo, hi = finite_float(low), finite_float(high)
    if lo is None or hi is None:
        return Verdict(kind=NO_FINDING, why=NO_INTERVAL, n_items=n_items)
    if smoke:  # before the interval's reading: a smoke test states none
        return _gate(n_items, True, min_items) or Verdict(kind=NO_FINDING, why=SMOKE, n_items=n_items)
    if lo <= 0.0 <= hi:
        return Verdict(kind=NOT_DISTINGUISHABLE, n_items=n_items)
    gated = _gate(n_items, smoke, min_items)
    if gated is not None:
        return gated
    return Verdict(kind=ABOVE if lo > 0 else BELOW, n_items=n_items)


def overlap_verdict(
    a: tuple[Any, Any], b: tuple[Any, Any], *, n_items: int | None = None, smoke: bool = False, min_items: int = MIN_ITEMS
) -> Verdict:
    """Two estimates, each with its interval ``(low, high)``: ``above`` when ``a``'s interval lies
    wholly above ``b``'s, ``below`` when wholly below, ``not_distinguishable`` when they overlap
    (same checks as :func:`difference_verdict`)."""
    a_lo, a_hi, b_lo, b_hi = (finite_float(x) for x in (*a, *b))
    if None in (a_lo, a_hi, b_lo, b_hi):
        return Verdict(kind=NO_FINDING, why=NO_INTERVAL, n_items=n_items)
    if smoke:  # before the interval's reading: a smoke test states none
        return _gate(n_items, True, min_items) or Verdict(kind=NO_FINDING, why=SMOKE, n_items=n_items)
    if a_lo <= b_hi and b_lo <= a_hi:  # type: ignore[operator]
        return Verdict(kind=NOT_DISTINGUISHABLE, n_items=n_items)
    gated = _gate(n_items, smoke, min_items)
    if gated is not None:
        return gated
    return Verdict(kind=ABOVE if a_lo > b_hi else BELOW, n_items=n_items)  # type: ignore[operator]


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What a directed test's figure says about its prediction (:func:`predicted_verdict`).

    ``kind``: ``as_predicted``, ``opposite`` (a finding on the other side of 0), ``too_small``
    (the predicted side, below the bar), ``not_distinguishable`` or ``no_finding`` (``verdict.why``).
    ``verdict``: the undirected :class:`Verdict` it starts from.
    """

    kind: str
    verdict: Verdict

    @property
    def holds(self) -> bool:
        return self.kind == AS_PREDICTED


def predicted_verdict(
    estimate: Any,
    low: Any,
    high: Any,
    *,
    predicts: int = 1,
    bar: float = 0.0,
    bar_on: str = "estimate",
    n_items: int | None = None,
    smoke: bool = False,
    min_items: int = MIN_ITEMS,
) -> Prediction:
    """The verdict on a test that predicts its figure lies above 0 (``predicts=1``) or below
    (``predicts=-1``) by at least ``bar``: ``estimate`` with its interval ``[low, high]`` over
    ``n_items`` items (see the module doc).  ``bar_on``: ``"estimate"`` (the estimate must clear
    the bar) or ``"low"`` (the interval's end nearer 0 must: its low end for a predicted rise)."""
    if predicts not in (1, -1):
        raise ValueError(f"predicts must be 1 (the figure rises) or -1 (it falls), got {predicts!r}")
    if bar_on not in ("estimate", "low"):
        raise ValueError(f"bar_on must be 'estimate' or 'low', got {bar_on!r}")
    v = difference_verdict(low, high, n_items=n_items, smoke=smoke, min_items=min_items)
    if not v.finding:
        return Prediction(kind=v.kind, verdict=v)
    if (v.kind == ABOVE) != (predicts > 0):
        return Prediction(kind=OPPOSITE, verdict=v)
    near = low if predicts > 0 else high
    size = finite_float(estimate if bar_on == "estimate" else near)
    if size is None or size * predicts < bar:
        return Prediction(kind=TOO_SMALL, verdict=v)
    return Prediction(kind=AS_PREDICTED, verdict=v)
