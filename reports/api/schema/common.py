"""Columns that many tables share, written once."""

from __future__ import annotations

from headlens.reports.api.schema.column import Column

__all__ = ["LAYER", "HEAD", "NAME", "BOS", "CI_LOW", "CI_HIGH", "interval", "SCORE_COLUMNS", "REFERENT_WHEN"]

LAYER = Column("layer", "int64", "layer index, from 0")
HEAD = Column("head", "int64", "head index within its layer, from 0")
NAME = Column("name", "str", 'the head as "layer.head" (e.g. "1.3"), kept as text')
BOS = Column("bos", "bool", "whether a BOS token was prepended to each sequence (the run's BOS setting)")
CI_LOW = Column("ci_low", "float64", "lower end of the 95% percentile-bootstrap interval")
CI_HIGH = Column("ci_high", "float64", "upper end of the 95% percentile-bootstrap interval")


def interval(prefix: str, what: str, when: str = "") -> tuple[Column, Column]:
    """``<prefix>_low`` / ``<prefix>_high``: the 95% bootstrap interval of ``what``."""
    return (
        Column(f"{prefix}_low", "float64", f"lower end of the 95% bootstrap interval of {what}", when),
        Column(f"{prefix}_high", "float64", f"upper end of the 95% bootstrap interval of {what}", when),
    )


REFERENT_WHEN = "with the referent detector (present when it runs)"

#: The census's scores table (``scores.csv``), also the projection study's ``census_scores``.
SCORE_COLUMNS: tuple[Column, ...] = (
    LAYER,
    HEAD,
    Column("detector", "str", "the detector (sink, previous_token, duplicate_token, induction, referent, ...)"),
    Column("score", "float64", "the detector's score: mean attention to its target, over prompts (NaN: not measurable here)"),
    Column("baseline", "float64", "the same score under uniform attention (the role needs ci_low >= baseline_factor x this)"),
    CI_LOW,
    CI_HIGH,
    Column("n", "int64", "prompts (or queries) the score averages"),
    Column(
        "accuracy",
        "float64",
        "referent: share of sentences where the pronoun attends more to the antecedent than the distractor (else NaN)",
    ),
    Column("distractor", "float64", "referent: mean attention from the pronoun to the distractor (NaN on other detectors)", REFERENT_WHEN),
    Column("pair_accuracy", "float64", "referent: share of minimal pairs the head wins in both sentences", REFERENT_WHEN),
    Column("diff_ci_low", "float64", "referent: lower end of the interval of accuracy minus distractor", REFERENT_WHEN),
    Column("diff_ci_high", "float64", "referent: upper end of the interval of accuracy minus distractor", REFERENT_WHEN),
    Column("p_value", "float64", "referent: Holm-corrected one-sided binomial p-value of accuracy over chance", REFERENT_WHEN),
    Column("heldout_accuracy", "float64", "referent: accuracy on the held-out half of the prompts (selection checked)", REFERENT_WHEN),
)
