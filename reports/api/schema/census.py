"""Columns of ``headlens.census`` (and ``headlens classify`` / ``detect``)."""

from __future__ import annotations

from headlens.reports.api.schema.column import table
from headlens.reports.api.schema.common import HEAD, LAYER, NAME, SCORE_COLUMNS

__all__ = ["TABLES"]

_EVIDENCE = "with evidence (headlens.evidence, census(evidence=...), classify --evidence)"

_SCORES = table("scores", "scores.csv", "(head, detector)", *SCORE_COLUMNS)

TABLES = {
    "census": {
        "scores": _SCORES,
        "roles": table(
            "roles",
            "roles.csv",
            "(head, role); a head without a role has no row",
            LAYER,
            HEAD,
            NAME,
            ("role", "str", "the role: its detector's score cleared the threshold and ci_low >= baseline_factor x baseline"),
        ),
        "heads": table(
            "heads",
            "heads.csv",
            "head",
            LAYER,
            HEAD,
            NAME,
            ("roles", "str", 'the head\'s roles joined with ";" for reading ("" for none)'),
            (
                "strongest_detector",
                "str",
                "the head's role with the highest score, other than sink where it has another role; without a role,"
                " the detector with the largest score/threshold"
                ' among those whose 95% interval lies above the uniform baseline ("" where none does)',
            ),
            ("strongest_score", "float64", "that detector's score (NaN where none is)"),
            ("evidence", "str", 'each role\'s verdict, "role: verdict" joined with ";"', _EVIDENCE),
        ),
        "evidence": table(
            "evidence",
            "evidence.csv",
            "(head, role) tested by the intervention the role predicts",
            LAYER,
            HEAD,
            NAME,
            ("role", "str", "the role tested"),
            ("evidence", "str", '"supported", "not supported", "not testable here" or "no finding" (a smoke run)'),
            ("figure", "float64", "the test's measured effect (see unit and test)"),
            ("figure_low", "float64", "lower end of the effect's 95% bootstrap interval"),
            ("figure_high", "float64", "upper end of the effect's 95% bootstrap interval"),
            ("unit", "str", "the effect's unit (nats, share of the gap, ...)"),
            ("n_items", "int64", "pairs, sequences or windows the test measured"),
            ("test", "str", "the intervention, in words (and the text it read)"),
            ("detail", "str", "why the verdict: the bar it was held to, or why it is not testable here"),
            when=_EVIDENCE,
        ),
    },
    "detect": {"scores": _SCORES},
}
