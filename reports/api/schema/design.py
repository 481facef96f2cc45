"""Columns of ``headlens.kv``, ``headlens.gqa`` and ``headlens.projections`` (design what-ifs)."""

from __future__ import annotations

from headlens.reports.api.schema.column import table
from headlens.reports.api.schema.common import CI_HIGH, CI_LOW, HEAD, LAYER, SCORE_COLUMNS

__all__ = ["TABLES"]

_KV = table(
    "kv",
    "kv.csv (or the --out FILE)",
    "variant of the KV cache (the model's own, MQA, GQA group sizes, removed heads)",
    ("variant", "str", "the cache variant: the model's own, MQA, a GQA group size, or with heads removed"),
    ("kv_heads", "str", 'key/value heads per layer, joined with "," (one number when every layer has the same)'),
    ("kv_heads_total", "int64", "key/value heads over all layers"),
    ("bytes_per_token", "int64", "cache bytes per token"),
    ("tokens", "int64", "tokens the cache holds"),
    ("batch", "int64", "sequences in the batch"),
    ("bytes", "int64", "the cache's bytes: bytes_per_token x tokens x batch"),
    ("saved", "float64", "share of the model's own cache saved"),
    ("formula", "str", "how bytes was computed, in words"),
)

_GROUPING = ("grouping", "str", "how query heads were grouped to share a KV head: adjacent or similar")
_G = ("g", "int64", "query heads per KV head (the group size)")

TABLES = {
    "kv": {"kv": _KV},
    "gqa": {
        "summary": table(
            "summary",
            "summary.csv",
            "(grouping, group size)",
            _GROUPING,
            _G,
            ("kv_heads", "int64", "KV heads after pooling"),
            ("kv_bytes_per_token", "int64", "cache bytes per token after pooling"),
            ("kv_saved", "float64", "share of the cache saved"),
            ("loss", "float64", "next-token loss (nats) with the heads' keys and values pooled per group"),
            ("loss_change", "float64", "loss minus the unablated loss"),
            ("change_ci_low", "float64", "lower end of loss_change's 95% bootstrap interval"),
            ("change_ci_high", "float64", "upper end of loss_change's 95% bootstrap interval"),
            ("mean_js", "float64", "Jensen-Shannon divergence of each head's attention from the pooled one, mean over heads"),
            ("max_js", "float64", "its largest value over heads"),
            ("scatter", "float64", "within-group scatter of the heads' keys and values (what similar grouping minimises)"),
        ),
        "heads": table(
            "heads", "heads.csv", "(grouping, group size, head)", _GROUPING, _G, LAYER, HEAD, ("js", "float64", "the head's JS divergence")
        ),
        "groups": table(
            "groups",
            "groups.csv",
            "(grouping, group size, layer)",
            _GROUPING,
            _G,
            LAYER,
            ("kv_heads", "str", "the groups of query heads, joined"),
        ),
        "comparison": table(
            "comparison",
            "comparison.csv",
            "group size",
            _G,
            ("similar_minus_adjacent", "float64", "loss change of similar grouping minus that of adjacent grouping"),
            CI_LOW,
            CI_HIGH,
            ("same_groups", "bool", "both groupings chose the same groups"),
            when="with both groupings",
        ),
        "kv": _KV,
        "task": table(
            "task",
            "task.csv",
            "(grouping, group size); the first row is the original model (grouping original, g 1)",
            _GROUPING,
            _G,
            ("logit-diff", "float64", "the task's logit difference (correct minus incorrect), mean over its prompts"),
            ("change", "float64", "logit_diff minus the original's"),
            when="with task=",
        ),
    },
    "projections": {
        "losses": table(
            "losses",
            "losses.csv",
            "knockout (a layer, or with per_head=True one head; the first row is the model unchanged)",
            ("layer", "int64", "the layer knocked out (-1: the row of the model unchanged)"),
            ("head", "int64", "the head knocked out (-1: all the layer's heads, or the row of the model unchanged)"),
            ("kind", "str", 'the knockout: projections tied together ("q=k", "v=k", "q=k=v"; "none" for the model unchanged)'),
            ("loss", "float64", "next-token loss (nats) with it knocked out"),
            ("loss_change", "float64", "loss minus the unablated loss"),
            ("relative_change", "float64", "loss_change over the unablated loss"),
        ),
        "role_changes": table(
            "role_changes",
            "role_changes.csv",
            "(knockout, head) whose roles changed",
            ("knocked_layer", "int64", "the layer knocked out"),
            ("kind", "str", "the knockout (q=k, v=k, q=k=v)"),
            LAYER,
            HEAD,
            ("roles_before", "str", "the head's roles in the unablated model"),
            ("roles_after", "str", "its roles with the knockout"),
            ("lost", "str", "roles the knockout took away"),
            ("gained", "str", "roles the knockout gave"),
            when="unless roles=False (--no-roles)",
        ),
        "census_scores": table(
            "census_scores",
            "census_scores.csv",
            "(knockout, head, detector)",
            *SCORE_COLUMNS,
            ("knocked_layer", "int64", "the layer knocked out"),
            ("kind", "str", "the knockout (q=k, v=k, q=k=v)"),
            when="unless roles=False (--no-roles)",
        ),
    },
}
