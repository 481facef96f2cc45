"""Columns of ``headlens.verify`` and ``headlens.capture(verify=True)``, and of ``sinks --text``'s seed table."""

from __future__ import annotations

from headlens.reports.api.schema.column import table
from headlens.reports.api.schema.common import BOS, HEAD, LAYER

__all__ = ["TABLES"]

_VERIFY = (
    LAYER,
    ("max_err_pattern", "float64", "largest difference between the captured pattern and one recomputed from Q and K"),
    ("max_err_z", "float64", "largest difference between the captured z and pattern @ V"),
    ("max_outside_mask", "float64", "largest attention weight outside the causal (or window) mask"),
    ("max_row_sum_err", "float64", "largest distance of a pattern row's sum from 1"),
    ("tolerance", "float64", "the tolerance the errors are held to"),
    ("ok", "bool", "every error within tolerance"),
    ("applied", "str", "the attention rules applied when recomputing (scaling, softcap, window, ...)"),
)

TABLES = {
    "verify": {"verify": table("verify", "verify.csv", "layer", *_VERIFY)},
    "capture": {"verify": table("verify", "verify.csv", "layer", *_VERIFY, when="with verify=True")},
    "sink_seed_text": {
        "seed_text": table(
            "seed_text",
            "seed_text.csv",
            "(BOS setting, head)",
            BOS,
            LAYER,
            HEAD,
            ("n_tokens", "int64", "tokens of the text"),
            ("first_token", "str", "the first token, decoded"),
            ("last_token", "str", "the last token, decoded"),
            ("attn_last_to_first", "float64", "attention of the last token to the first"),
            ("uniform", "float64", "that attention under uniform attention: 1/n_tokens"),
            ("ratio", "float64", "attn_last_to_first / uniform"),
        ),
    },
}
