"""Columns of ``headlens.sinks`` (attention sinks, Gu et al. 2024) and ``sinks(lengths=...)``."""

from __future__ import annotations

from headlens.reports.api.schema.column import Column, table
from headlens.reports.api.schema.common import BOS, HEAD, LAYER

__all__ = ["TABLES"]

_ALPHA = "alpha: attention of a query to the first token, averaged over queries"


def _skip(part: str) -> str:
    return f'unless skip= holds "{part}" (or the model cannot run it: see the manifest\'s skipped)'


def _target(group: str, what: str) -> tuple[Column, Column]:
    return (
        Column(group, "float64", f"share of attention on {what}"),
        Column(f"{group}_uniform", "float64", "that share under uniform attention"),
    )


def _layer_target(group: str, what: str) -> tuple[Column, ...]:
    return (
        Column(f"{group}_mean", "float64", f"share of attention on {what}, mean over the layer's heads"),
        Column(f"{group}_max", "float64", "its largest value over the layer's heads"),
        Column(f"{group}_max_head", "int64", "the head with that largest value"),
        Column(f"{group}_uniform", "float64", "the share under uniform attention"),
    )


_FIRST, _SUFFIX, _PUNCT = "the first token (position 0)", "the suffix ([SEP] on an encoder)", "punctuation tokens"
_SINK_ON = ("sink_on", "str", "the target whose share exceeds its uniform baseline the most (none when none does)")

TABLES = {
    "sinks": {
        "census": table(
            "census",
            "census.csv",
            "(BOS setting, head)",
            BOS,
            LAYER,
            HEAD,
            ("alpha_mean", "float64", f"Gu et al.'s {_ALPHA} and sequences"),
            ("alpha_std", "float64", "standard deviation of alpha over sequences"),
            ("sink_rate", "float64", "share of sequences whose alpha exceeds eps"),
            ("uniform_alpha", "float64", "alpha under uniform attention (the baseline)"),
            ("alpha_over_uniform", "float64", "alpha_mean / uniform_alpha"),
            ("is_sink", "bool", "a sink head: alpha_mean > eps"),
        ),
        "sink_rates": table(
            "sink_rates",
            "sink_rates.csv",
            "BOS setting",
            BOS,
            ("eps", "float64", "the alpha threshold of a sink"),
            ("n_sequences", "int64", "sequences measured"),
            ("tokens_per_sequence", "float64", "tokens per sequence (mean)"),
            ("sink_rate", "float64", "share of (head, sequence) pairs whose alpha exceeds eps"),
            ("uniform_sink_rate", "float64", "the same under uniform attention"),
            ("mean_alpha", "float64", "alpha averaged over heads and sequences"),
            ("uniform_alpha", "float64", "alpha under uniform attention"),
            ("n_sink_heads", "int64", "heads with is_sink"),
            ("n_heads", "int64", "heads of the model"),
        ),
        "sink_rate_by_layer": table(
            "sink_rate_by_layer",
            "sink_rate_by_layer.csv",
            "(BOS setting, layer)",
            BOS,
            LAYER,
            ("sink_rate", "float64", "share of the layer's (head, sequence) pairs whose alpha exceeds eps"),
            ("mean_alpha", "float64", "alpha averaged over the layer's heads"),
            ("max_alpha", "float64", "the largest head's alpha_mean in the layer"),
            ("uniform_sink_rate", "float64", "sink_rate under uniform attention"),
            ("uniform_alpha", "float64", "alpha under uniform attention"),
        ),
        "sink_targets": table(
            "sink_targets",
            "sink_targets.csv",
            "(BOS setting, head)",
            BOS,
            LAYER,
            HEAD,
            *_target("first", _FIRST),
            *_target("suffix", _SUFFIX),
            *_target("punctuation", _PUNCT),
            _SINK_ON,
        ),
        "sink_targets_by_layer": table(
            "sink_targets_by_layer",
            "sink_targets_by_layer.csv",
            "(BOS setting, layer)",
            BOS,
            LAYER,
            *_layer_target("first", _FIRST),
            *_layer_target("suffix", _SUFFIX),
            *_layer_target("punctuation", _PUNCT),
            _SINK_ON,
        ),
        "secondary_positions": table(
            "secondary_positions",
            "secondary_positions.csv",
            "(BOS setting, head, key position)",
            BOS,
            LAYER,
            HEAD,
            ("position", "int64", "the key position, from 0"),
            ("excess", "float64", "attention the position receives above uniform, mean over the queries that see it"),
            ("n_queries", "int64", "queries averaged"),
            when=_skip("secondary"),
        ),
        "secondary_tokens": table(
            "secondary_tokens",
            "secondary_tokens.csv",
            "(BOS setting, head, token): the top_k tokens of each head",
            BOS,
            LAYER,
            HEAD,
            ("rank", "int64", "the token's rank for this head, from 1"),
            ("token", "str", "the token, decoded"),
            ("token_id", "int64", "the token's id in the vocabulary"),
            ("occurrences", "int64", "times it occurs in the evaluation text"),
            ("excess", "float64", "attention it receives above uniform, mean over its occurrences"),
            when=_skip("secondary"),
        ),
        "secondary_tokens_overall": table(
            "secondary_tokens_overall",
            "secondary_tokens_overall.csv",
            "(BOS setting, token)",
            BOS,
            ("token", "str", "the token, decoded"),
            ("token_id", "int64", "the token's id in the vocabulary"),
            ("occurrences", "int64", "times it occurs in the evaluation text"),
            ("mean_excess", "float64", "excess attention it receives, mean over every head"),
            ("max_excess", "float64", "its largest excess over heads"),
            ("heads_in_top_k", "int64", "heads that have it among their top_k tokens"),
            when=_skip("secondary"),
        ),
        "value_norm": table(
            "value_norm",
            "value_norm.csv",
            "(BOS setting, head)",
            BOS,
            LAYER,
            HEAD,
            ("attn_share", "float64", "share of attention on the sink (the first token)"),
            ("value_norm_share", "float64", "the sink's share of the attention-weighted value norms: what it writes"),
            ("share_ratio", "float64", "value_norm_share / attn_share (below 1: the sink is attended but writes little)"),
            ("sink_value_norm", "float64", "the sink's value-vector norm (mean)"),
            ("other_value_norm", "float64", "the other tokens' value-vector norm (mean)"),
            ("norm_ratio", "float64", "sink_value_norm / other_value_norm"),
            when=_skip("value_norm"),
        ),
        "content": table(
            "content",
            "content.csv",
            "(first-token variant, head)",
            ("variant", "category", "what stands at position 0 (BOS, another token, a shifted text, ...)"),
            LAYER,
            HEAD,
            ("alpha_first", "float64", "alpha on position 0"),
            ("alpha_second", "float64", "alpha on position 1"),
            ("sink_rate", "float64", "share of sequences whose alpha_first exceeds eps"),
            ("uniform_alpha", "float64", "alpha under uniform attention"),
            ("uniform_alpha_second", "float64", "alpha on position 1 under uniform attention"),
            when=_skip("content"),
        ),
        "content_verdicts": table(
            "content_verdicts",
            "content_verdicts.csv",
            "head",
            LAYER,
            HEAD,
            ("variants_sinking", "int64", "variants in which the head sinks on position 0"),
            ("variants", "int64", "variants measured"),
            ("sinks_in", "str", 'those variants, joined with ","'),
            ("follows_bos_to_position_1", "bool", "whether the sink moves to position 1 with the BOS token"),
            ("verdict", "str", "what the sink follows: the position, the BOS token, the first token, or none"),
            when=_skip("content"),
        ),
        "removal": table(
            "removal",
            "removal.csv",
            "(BOS setting, intervention)",
            BOS,
            ("removed", "str", "what was removed (none, the sink heads' attention to the sink, ...)"),
            ("n_heads", "int64", "heads the intervention touches"),
            ("heads", "str", 'those heads as "layer.head", joined'),
            ("loss", "float64", "next-token loss (nats) with it removed"),
            ("delta_loss", "float64", "loss minus the unablated loss"),
            ("n_tokens", "int64", "tokens the loss averages"),
            when=_skip("removal") + "; not on an encoder",
        ),
        "windowed": table(
            "windowed",
            "windowed.csv",
            "(BOS setting, window, keep_first)",
            BOS,
            ("window", "int64", "keys each query sees (a sliding window)"),
            ("keep_first", "int64", "first tokens kept visible besides the window (0: none)"),
            ("full_attention", "bool", "the reference row: attention not restricted"),
            ("loss", "float64", "next-token loss (nats)"),
            ("delta_loss", "float64", "loss minus the full-attention loss"),
            ("seq_tokens", "int64", "tokens per sequence"),
            ("n_tokens", "int64", "tokens the loss averages"),
            when=_skip("windowed") + "; not on an encoder",
        ),
    },
    "sink_lengths": {
        "sink_lengths": table(
            "sink_lengths",
            "sink_lengths.csv",
            "(context length, head, BOS setting)",
            ("length", "int64", "context length (tokens per sequence)"),
            LAYER,
            HEAD,
            ("window", "object", "the layer's sliding window in effect at this length (empty: none)"),
            ("queries", "str", 'which queries the unsuffixed columns average: "visible" or "all" (manifest: query_conventions)'),
            ("n_queries", "int64", "queries averaged"),
            ("alpha", "float64", _ALPHA),
            ("sink_rate", "float64", "share of sequences whose alpha exceeds eps"),
            ("first_share", "float64", "share of attention on the first token, queries after it"),
            ("value_norm_share", "float64", "the first token's share of the attention-weighted value norms"),
            ("uniform_alpha", "float64", "alpha under uniform attention"),
            ("n_queries_all", "int64", "queries averaged by the *_all columns (every query)"),
            ("alpha_all", "float64", "alpha over every query (Gu et al.'s definition)"),
            ("sink_rate_all", "float64", "sink_rate over every query"),
            ("first_share_all", "float64", "first_share over every query"),
            ("value_norm_share_all", "float64", "value_norm_share over every query"),
            ("uniform_alpha_all", "float64", "uniform_alpha over every query"),
            ("n_sequences", "int64", "sequences measured"),
            ("attention", "str", "how attention was computed: eager or streaming"),
            BOS,
        ),
    },
}
