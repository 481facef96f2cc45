"""Columns of ``headlens.ioi``: per head, the IOI evidence with 95% intervals over pairs; per class, its heads."""

from __future__ import annotations

from headlens.reports.api.schema.column import Column, table
from headlens.reports.api.schema.common import HEAD, LAYER, NAME, interval
from headlens.reports.api.schema.patching import TABLES as PATCHING

__all__ = ["TABLES"]


def _figure(name: str, what: str, when: str = "") -> tuple[Column, ...]:
    return (Column(name, "float64", what, when), *interval(name, what, when))


_PATH_WHEN = "NaN for a head not path-patched (not an earlier head, or screened out)"
_PATHS = PATCHING["patching"]["path_patching"]

TABLES = {
    "ioi": {
        "heads": table(
            "heads",
            "heads.csv",
            "head",
            LAYER,
            HEAD,
            NAME,
            *_figure("attn_io", "the attention share from END to the indirect object"),
            *_figure("attn_s1", "the attention share from END to the subject's first mention"),
            *_figure("attn_s2", "the attention share from END to the subject's second mention"),
            *_figure("attn_dup", "the attention share from S2 to S1 (duplicate-token pattern)"),
            *_figure("attn_ind", "the attention share from S2 to the token after S1 (induction pattern)"),
            *_figure(
                "copying",
                "share of pairs whose IO name is in the top 5 logits of the head's OV output of the IO token (NaN: END->IO attention"
                " below the screen, not measured)",
            ),
            *_figure("negative_copying", "share of pairs whose IO name is in the bottom 5 logits of that OV output (NaN: not measured)"),
            *_figure("direct", "direct logit attribution on logit(IO) - logit(S) at END"),
            *_figure("sinh_path", f"share of the clean - ABC gap removed through the name movers' queries ({_PATH_WHEN})"),
            *_figure("feed_path", f"share of the clean - ABC gap removed through the S-inhibition heads' values ({_PATH_WHEN})"),
            ("classes", "str", "the IOI classes the head meets, joined by + (empty: none)"),
        ),
        "classes": table(
            "classes",
            "classes.csv",
            "IOI class",
            ("class", "str", "name mover, negative name mover, S-inhibition, induction or duplicate-token"),
            ("heads", "str", "the heads that meet the class's rule, space-separated (empty: none found)"),
            ("n_heads", "int64", "how many heads meet the rule"),
            ("rule", "str", "the evidence a head needs, with its thresholds"),
            ("reason", "str", "why no head meets the rule (empty when some do)"),
        ),
        "sinh_paths": table(
            "sinh_paths", "sinh_paths.csv", "(sender head, name movers' queries)", *_PATHS.columns, when="with a name mover"
        ),
        "feed_paths": table(
            "feed_paths", "feed_paths.csv", "(sender head, S-inhibition heads' values)", *_PATHS.columns, when="with an S-inhibition head"
        ),
    }
}
