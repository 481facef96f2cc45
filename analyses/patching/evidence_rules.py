"""The role tests' predictions and the one rule that judges them (see
:mod:`headlens.analyses.patching.evidence` for each test): thresholds, each role's predicted
direction and bar (:data:`ROLE_RULES`), :func:`judge`, and the verdict words.

Every role's figure is oriented so that the role predicts it above 0; :func:`judge` applies
:func:`headlens.analyses.measure.verdicts.predicted_verdict`: an effect on the other side of 0 is "not
supported" however large, and its reason says so in words.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from headlens.analyses.measure.verdicts import FEW_ITEMS, MIN_ITEMS, NOT_DISTINGUISHABLE, OPPOSITE, TOO_SMALL, predicted_verdict

log = logging.getLogger(__name__)

__all__ = [
    "evidence_rule",
    "judge",
    "unreadable",
    "shared_keys",
    "induction_checks",
    "RoleRule",
    "ROLE_RULES",
    "EVIDENCE_COLUMNS",
    "MIN_EFFECT",
    "MIN_LOSS",
    "COPY_RATIO",
    "MIN_T",
    "SUPPORTED",
    "NOT_SUPPORTED",
    "NOT_TESTABLE",
    "NO_FINDING",
    "NOT_TESTED",
    "SINK_SAMPLE",
    "UNITS",
]

EVIDENCE_COLUMNS = ["layer", "head", "name", "role", "evidence", "figure", "figure_low", "figure_high", "unit", "n_items", "test", "detail"]
#: Normalised patching effect a role needs (10% of the clean-corrupted gap).
MIN_EFFECT = 0.1
#: Second-copy loss rise (nats) an induction head's ablation needs ...
MIN_LOSS = 0.01
#: ... and how many times the first-copy rise it must be.
COPY_RATIO = 2.0
#: Random tokens per copy the induction tests need (the built-in induction task's minimum).
MIN_T = 4
SUPPORTED, NOT_SUPPORTED, NOT_TESTABLE = "supported", "not supported", "not testable here"
#: A (head, role) the run did not test: its sink role sampled out of a population, or its role not chosen (``roles=``).
NOT_TESTED = "not tested"
#: Sink-only heads whose sink role is tested, a seeded random sample, when sinks are a population
#: (:attr:`headlens.analyses.heads.sink_population.SinkPopulation.is_population`); the rest are not tested, said so.
SINK_SAMPLE = 12
#: The evidence of a smoke-test run (``smoke=True``): the figures, no verdict.
NO_FINDING = "no finding"
#: What each role's figure measures.
UNITS = {
    "induction": "nats: second-copy minus first-copy loss rise under ablation",
    "previous_token": "share of the induction logit difference restored through the induction heads' keys",
    "duplicate_token": "nats: KL of the predictions at repeats, earlier occurrence masked minus its neighbour masked",
    "referent": "share of the referent pairs' logit-difference gap restored",
    "sink": "nats: loss change without attention to the first token",
}


@dataclass(frozen=True, kw_only=True)
class RoleRule:
    """What a role's test predicts: its figure above 0 by at least ``bar`` (on the figure, or on
    its interval's low end: ``bar_on="low"``), and the words of each way it can fail."""

    predicts: str  # the direction, in words
    bar: float
    bar_on: str = "estimate"
    bar_text: str
    opposite: str  # the figure is on the other side of 0
    too_small: str  # the predicted side, below the bar


#: The one table of the roles' predictions (every figure is oriented so that the role predicts it above 0).
ROLE_RULES: dict[str, RoleRule] = {
    "induction": RoleRule(
        predicts=(
            "ablating it raises the loss on the second copy of repeated tokens more than on the first, and masking only its"
            " attention to the token after the earlier occurrence raises the second-copy loss"
        ),
        bar=0.0,
        bar_text="0 nats",
        opposite="ablating it raises the loss on the first copy more than on the second: it does not act on repeats",
        too_small="",
    ),
    "previous_token": RoleRule(
        predicts="patching it into the induction heads' keys restores the induction logit difference",
        bar=MIN_EFFECT,
        bar_on="low",
        bar_text=f"{MIN_EFFECT:.0%} of the induction behaviour at the interval's low end",
        opposite="patching it through the induction heads' keys lowers the induction logit difference: it works against them",
        too_small="it feeds no induction head through the key",
    ),
    "duplicate_token": RoleRule(
        predicts="masking its attention to a token's earlier occurrence moves the predictions more than masking the token after it",
        bar=MIN_LOSS,
        bar_text=f"{MIN_LOSS:g} nats",
        opposite=(
            "masking the token after the earlier occurrence moves the predictions more than masking the earlier occurrence:"
            " the head reads the neighbour (as an induction head does), not the duplicate"
        ),
        too_small="the predictions barely depend on its attention to the earlier occurrence",
    ),
    "referent": RoleRule(
        predicts="patching its output from the clean sentence moves the preference toward the antecedent",
        bar=MIN_EFFECT,
        bar_text=f"{MIN_EFFECT:.0%} of the gap",
        opposite="patching it moves the preference away from the antecedent, toward the distractor: it works against the role",
        too_small="it restores too little of the preference for the antecedent",
    ),
    "sink": RoleRule(
        predicts="removing its attention to the first token raises the loss",
        bar=MIN_LOSS,
        bar_text=f"{MIN_LOSS:g} nats",
        opposite="removing it lowers the loss: its attention to the first token hurts the predictions",
        too_small="the loss barely depends on its attention to the first token",
    ),
}


def judge(role: str, figure: Any, low: Any, high: Any, *, n_items: int, min_items: int = MIN_ITEMS) -> tuple[str, str]:
    """``(verdict, reason)`` of ``role``'s figure with its interval over ``n_items`` items: the one
    place a role's prediction (:data:`ROLE_RULES`) is applied (``reason`` is ``""`` when supported)."""
    rule = ROLE_RULES[role]
    got = predicted_verdict(figure, low, high, predicts=1, bar=rule.bar, bar_on=rule.bar_on, n_items=n_items, min_items=min_items)
    if got.holds:
        return SUPPORTED, ""
    if got.kind == OPPOSITE:
        return NOT_SUPPORTED, rule.opposite
    if got.kind == TOO_SMALL:
        return NOT_SUPPORTED, f"{rule.too_small} (below the {rule.bar_text} a role needs)" if rule.too_small else f"below {rule.bar_text}"
    if got.kind == NOT_DISTINGUISHABLE:
        return NOT_SUPPORTED, "not distinguishable from 0"
    if got.verdict.why == FEW_ITEMS:
        return NOT_TESTABLE, f"only {n_items} items; a verdict needs {MIN_ITEMS}"
    return NOT_TESTABLE, "no interval"


def unreadable(model: Any, what: str) -> str | None:
    """Why ``model``'s output cannot carry ``what`` (an encoder, a new output head), or None."""
    if model.is_encoder:
        return f"an encoder sees every token it would predict, so it has no next-token {what}"
    if model.head_is_new:
        return f"the model's output head is newly initialised, so its {what} means nothing"
    return None


def shared_keys(n_heads: int, n_kv_heads: int, receivers: list[tuple[int, int]], *, inputs: str = "key", named: bool = False) -> str:
    """Under grouped-query attention, what a path patch into ``receivers``' keys (``inputs="value"``: values) replaces:
    their key-value heads, each shared by a group of query heads, and the query heads it also reaches (``""`` without
    GQA; ``named``: each key-value head with the query heads it serves).  Path patching patches the key-value head's
    slot (:mod:`headlens.analyses.patching.path`)."""
    if not n_kv_heads or n_kv_heads >= n_heads:
        return ""
    g = n_heads // n_kv_heads
    groups = sorted({(layer, head // g) for layer, head in receivers})
    also = [f"{layer}.{h}" for layer, k in groups for h in range(k * g, (k + 1) * g) if (layer, h) not in receivers]
    said = f"under GQA a {inputs} is shared by {g} query heads: {len(groups)} key-value heads patched"
    if named:
        said += " (" + ", ".join(f"{layer}:kv{k}, query heads {layer}.{k * g}-{layer}.{(k + 1) * g - 1}" for layer, k in groups) + ")"
    return said + (f", so the {inputs}s of {', '.join(also)} too" if also else "")


def evidence_rule() -> dict[str, Any]:
    """The thresholds the verdicts use, and each role's predicted direction and bar (for manifests)."""
    return {
        "min_effect": MIN_EFFECT,
        "min_loss": MIN_LOSS,
        "copy_ratio": COPY_RATIO,
        "min_items": MIN_ITEMS,
        "predicted": {
            role: {"predicts": r.predicts, "figure": "above 0", "bar": r.bar, "bar_on": r.bar_on} for role, r in ROLE_RULES.items()
        },
    }


def induction_checks(m1: float, m2: float, knock: tuple[float, float, float] | None, *, m2_low: float, m2_high: float) -> str:
    """Why an induction head whose second-copy excess is above 0 is still not supported ("" when
    it is): ``m1``, ``m2`` the first- and second-copy loss rises under ablation (means over
    sequences), ``m2_low``, ``m2_high`` the 95% interval of ``m2`` over sequences, ``knock`` the
    second-copy loss rise when only its attention to the token after each earlier occurrence is
    masked, with its 95% interval (:mod:`headlens.analyses.patching.induction_knockout`; None: not
    computed, not checked).

    The role predicts the second-copy rise, so that rise must be a finding on its own (interval
    above 0) of at least :data:`MIN_LOSS`, and at least :data:`COPY_RATIO` times the size of the
    first-copy change either way: a first copy that gets better under ablation inflates the
    excess without any effect on repeats, so it counts against support, never toward it.  And
    the effect must go through the head's own induction attention: the knockout's rise a finding
    (interval above 0) of at least :data:`MIN_LOSS` (an upstream head, e.g. the previous-token
    head whose output an induction head's key reads, passes the ablation test but does not attend
    there)."""
    change = f"{m2:+.3f} nats [{m2_low:+.3f}, {m2_high:+.3f}]"
    rise = f"the second-copy rise is {change}"
    if not (math.isfinite(m2_low) and math.isfinite(m2_high)):
        return f"the second-copy rise is {m2:+.3f} nats with no interval"
    if m2 < 0:
        return f"ablating it lowers the loss on the second copy ({change})"
    if m2_low <= 0:
        return f"{rise}: not distinguishable from 0"
    if m2 < MIN_LOSS:
        return f"{rise}: too small (below the {MIN_LOSS:g} nats a role needs)"
    if m2 < COPY_RATIO * abs(m1):
        if m1 < 0:
            return (
                f"{rise}: less than {COPY_RATIO:g}x the first copy's fall ({m1:+.3f}): the excess comes from the first copy"
                " getting better, not from repeats"
            )
        return f"{rise}: less than {COPY_RATIO:g}x the first copy's rise ({m1:+.3f}): it is not specific to repeats"
    return "" if knock is None else _knockout_check(*knock)


def _knockout_check(k: float, low: float, high: float) -> str:
    """Why the knockout of the head's induction attention (rise ``k`` nats, interval ``[low, high]``) fails ("" when it holds)."""
    upstream = "the effect does not go through its own attention to the copied token (an upstream head's ablation passes the loss test)"
    masking = "masking its attention to the token after the earlier occurrence"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{masking} gives no interval"
    if k < 0 or low <= 0:
        return f"{masking} moves the loss by {k:+.3f} nats [{low:+.3f}, {high:+.3f}]: {upstream}"
    if k < MIN_LOSS:
        return f"{masking} raises the loss by only {k:+.3f} nats (below the {MIN_LOSS:g} a role needs): {upstream}"
    return ""
