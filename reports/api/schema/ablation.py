"""Columns of ``headlens.ablate`` and ``headlens.prune``: values of the metric with heads removed.

Vocabulary: the *unablated* value is the model's as loaded; the *masked* value is the model's with a
mask's heads removed (``ablate(mask=...)``; equal to the unablated value without a mask).
"""

from __future__ import annotations

from headlens.reports.api.schema.column import table
from headlens.reports.api.schema.common import CI_HIGH, CI_LOW, HEAD, LAYER, NAME

__all__ = ["TABLES"]

_RANDOM = "with random_seeds > 0"

TABLES = {
    "ablation": {
        "ablation": table(
            "ablation",
            "ablation.csv (or the --out FILE: .csv, .parquet, .json)",
            "head (each ablated alone)",
            LAYER,
            HEAD,
            NAME,
            ("method", "str", "how the head was removed: zero, mean or resample"),
            ("metric", "str", "the metric: loss, logit-diff or embedding"),
            ("value", "float64", "the metric with this head removed (from the masked model when a mask is given)"),
            ("delta", "float64", "value minus the masked value (the unablated value without a mask): the head's effect"),
            CI_LOW,
            CI_HIGH,
            ("n", "int64", "items (windows, prompts, sentences) the value averages"),
            ("attribution", "float64", "first-order (gradient) estimate of delta; NaN with attribution=False or the embedding metric"),
        ),
    },
    "pruning": {
        "curve": table(
            "curve",
            "curve.csv",
            "pruning step (step 0: nothing removed)",
            ("step", "int64", "the step, from 0"),
            ("n_removed", "int64", "heads removed so far"),
            ("fraction_removed", "float64", "n_removed over the model's heads"),
            ("value", "float64", "the metric with those heads removed"),
            ("relative_change", "float64", "value against the unablated value (step 0), relative; absolute for the embedding change"),
            ("within_max_increase", "bool", "relative_change <= max_increase"),
            ("kv_heads_removed", "int64", "key/value heads freed (a KV head goes when every query head sharing it is removed)"),
            ("kv_bytes_saved_per_1k_tokens", "int64", "KV-cache bytes saved per 1,000 tokens"),
            ("random_mean", "float64", "the same number of heads removed in random order: mean value over seeds", _RANDOM),
            ("random_std", "float64", "its standard deviation over seeds", _RANDOM),
            ("random_min", "float64", "its smallest value over seeds", _RANDOM),
            ("random_max", "float64", "its largest value over seeds", _RANDOM),
            ("removed_this_step", "str", 'heads removed at this step as "layer.head", joined'),
        ),
        "random_orders": table(
            "random_orders",
            "random_orders.csv",
            "(seed, step) of a random removal order",
            ("seed", "int64", "the random order's seed"),
            ("step", "int64", "the pruning step it reached"),
            ("n_removed", "int64", "heads removed so far"),
            ("value", "float64", "the metric with them removed"),
        ),
        "importance": table(
            "importance",
            "importance.csv",
            "head",
            LAYER,
            HEAD,
            ("importance", "float64", "the head's importance at step 0, normalised per layer (what ranks the removal)"),
            ("importance_raw", "float64", "the same before normalisation (gradient, or exact delta for the embedding change)"),
        ),
    },
}
