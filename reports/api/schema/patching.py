"""Columns of ``headlens.patch``, ``headlens.circuit`` and ``headlens.composition``.

Patching reads a clean/corrupted pair of prompts: the *gap* is the metric (logit difference) on the
clean prompt minus on the corrupted one; effects are shares of that gap.
"""

from __future__ import annotations

from headlens.reports.api.schema.column import Column, table
from headlens.reports.api.schema.common import CI_HIGH, CI_LOW, HEAD, LAYER, NAME, interval

__all__ = ["TABLES"]


def _effect(direction: str, what: str, when: str = "") -> tuple[Column, ...]:
    return (
        Column(direction, "float64", what, when),
        *interval(direction, direction, when),
        Column(f"{direction}_metric", "float64", f"the metric (logit difference) after the {direction} patch", when),
    )


_NOISING = 'with "noising" in directions'
_DENOISING = 'with "denoising" in directions'
_ATTRIBUTION = "with attribution=True"
_HELD_OUT = "with held_out > 0 and at least 8 pairs on each side"
_EXACT = "with confirm > 0: the confirmed edges have values, the others NaN"

TABLES = {
    "patching": {
        "patching": table(
            "patching",
            "patching.csv",
            "head",
            LAYER,
            HEAD,
            NAME,
            *_effect("denoising", "the head's clean output patched into the corrupted run: share of the gap restored", _DENOISING),
            *_effect("noising", "the head's corrupted output patched into the clean run: share of the gap removed", _NOISING),
            *_effect("attribution", "attribution patching: first-order (gradient) estimate of denoising", _ATTRIBUTION),
        ),
        "path_patching": table(
            "path_patching",
            "path_patching.csv",
            "(sender head, receiver input)",
            ("sender_layer", "int64", "the sender head's layer"),
            ("sender_head", "int64", "the sender head"),
            ("sender", "str", 'the sender as "layer.head"'),
            ("receiver", "str", 'the receiver head(s) as "layer.head" (joined when joint)'),
            ("receiver_input", "str", "which input of the receiver the path enters: q, k or v"),
            ("receiver_slot", "int64", "the receiver's slot of that input (its KV head under GQA)"),
            ("effect", "float64", "share of the gap the path restores"),
            *interval("effect", "effect"),
            ("metric", "float64", "the metric after patching the path"),
            when="with receivers=",
        ),
        "dla": table(
            "dla",
            "dla.csv",
            "component writing to the residual stream",
            ("component", "str", 'the component: "layer.head", an MLP, the embeddings or a bias'),
            ("kind", "str", "its kind: head, mlp, embed, bias, ..."),
            ("layer", "Int64", "its layer (missing for the embeddings)"),
            ("head", "Int64", "its head (missing for a non-head component)"),
            ("dla", "float64", "direct logit attribution: its direct contribution to the logit difference, mean over pairs"),
            ("dla_sd", "float64", "its standard deviation over pairs"),
            when="with dla=True",
        ),
    },
    "circuit": {
        "edges": table(
            "edges",
            "edges.csv",
            "edge of the model's graph (sender -> receiver input)",
            ("edge_id", "int64", "the edge's index in the graph"),
            ("sender", "str", 'the sender: "embed", "layer.head" or "mlpL"'),
            ("receiver", "str", 'the receiver: "layer.head", "mlpL" or "logits"'),
            ("input", "str", "the receiver's input the edge enters: q, k, v, mlp or logits"),
            ("sender_kind", "str", "the sender's kind: embed, head or mlp"),
            ("sender_layer", "int64", "the sender's layer (-1 for the embeddings)"),
            ("sender_head", "int64", "the sender's head (-1 for a non-head)"),
            ("receiver_layer", "int64", "the receiver's layer"),
            ("receiver_slot", "int64", "the receiver's head or KV slot (-1 for a non-head)"),
            ("score", "float64", "share of the clean-corrupt gap the edge carries (signed)"),
            CI_LOW,
            CI_HIGH,
            ("score_raw", "float64", "the score in metric units (not divided by the gap)"),
            ("stability", "float64", "share of bootstrap resamples that select the edge with this sign"),
            ("rank", "int64", "rank by |score|, from 1"),
            ("estimate", "bool", "the score is a gradient estimate (eap, eap-ig), not exact patching"),
            ("in_circuit", "bool", "the edge is in the circuit"),
            ("exact", "float64", "exact edge patching's share of the gap", _EXACT),
            ("exact_ci_low", "float64", "lower end of its 95% bootstrap interval", _EXACT),
            ("exact_ci_high", "float64", "upper end of its 95% bootstrap interval", _EXACT),
            ("disagree", "bool", "estimate and exact disagree (sign, or intervals apart)", _EXACT),
            ("estimate_over_exact", "float64", "score / exact (far from 1: the estimate is off); NaN where exact ~ 0", _EXACT),
            ("exact_near_zero", "bool", "exact is within what a float32 forward resolves (exact ~ 0): no ratio is taken", _EXACT),
            ("off_exact", "bool", "the estimate is more than 2x off exact, or exact ~ 0 under an estimate >= 0.01", _EXACT),
            ("confirmed", "str", 'how it was confirmed: "top" (of the ranking), "sample" (a random edge outside it) or ""', _EXACT),
        ),
        "faithfulness": table(
            "faithfulness",
            "faithfulness.csv",
            "circuit size measured on the faithfulness curve",
            ("n_edges", "int64", "edges kept (the top n by |score|)"),
            ("fraction", "float64", "n_edges over the graph's edges"),
            ("faithfulness", "float64", "share of the gap the kept edges recover, the rest patched to corrupted (pairs that chose them)"),
            CI_LOW,
            CI_HIGH,
            ("metric", "float64", "the metric with those edges kept"),
            ("held_out", "float64", "faithfulness of the same edges on the held-out pairs (that did not choose them)", _HELD_OUT),
            ("held_out_ci_low", "float64", "lower end of its 95% bootstrap interval", _HELD_OUT),
            ("held_out_ci_high", "float64", "upper end of its 95% bootstrap interval", _HELD_OUT),
        ),
        "against_exact": table(
            "against_exact",
            "against_exact.csv",
            "estimate judged by exact patching on the confirmed edges (analyses/circuits/against_exact.py)",
            ("method", "str", "the estimate: eap or eap-ig"),
            ("auc", "float64", "ROC AUC of |estimate| against the exact circuit (|exact| >= circuit_share), weighted for the sampling"),
            *interval("auc", "the AUC (pairs and random-stratum edges resampled)"),
            ("spearman", "float64", "weighted Spearman correlation of |estimate| and |exact| on the sampled edges"),
            *interval("spearman", "the Spearman correlation"),
            ("n_edges", "int64", "edges of the graph"),
            ("n_top", "int64", "the top stratum: the confirmed top of the ranking, every edge patched (weight 1)"),
            ("n_random", "int64", "edges drawn at random from the rest (weight n_rest / n_random)"),
            ("n_rest", "int64", "edges outside the top stratum"),
            ("n_positive", "int64", "sampled edges in the exact circuit"),
            ("est_circuit", "float64", "the exact circuit's size in the graph, estimated from the sample"),
            ("hidden_bound", "float64", "circuit edges of the rest the draw cannot rule out beyond its estimate (95%), in the AUC CI"),
            ("circuit_share", "float64", "the share of the gap an edge's |exact| must reach to be in the exact circuit"),
            ("interval", "str", "what the bootstrap resampled"),
            ("n_pairs", "int64", "pairs that scored the edges"),
            ("n_bootstrap", "int64", "bootstrap resamples"),
            ("seed", "int64", "seed of the bootstrap"),
            ("reason", "str", "why auc is NaN, where it is (empty otherwise)"),
            ("wide", "bool", "the AUC interval is wider than 0.2: too wide to read"),
            when="with confirm_sample > 0 and an estimate (eap, eap-ig)",
        ),
    },
    "composition": {
        "composition": table(
            "composition",
            "composition.csv",
            "(sender head, receiver head, input)",
            ("sender", "str", 'the earlier head as "layer.head"'),
            ("receiver", "str", 'the later head as "layer.head"'),
            ("input", "str", "Q, K or V composition (q, k, v)"),
            ("sender_layer", "int64", "the sender's layer"),
            ("sender_head", "int64", "the sender's head"),
            ("receiver_layer", "int64", "the receiver's layer"),
            ("receiver_head", "int64", "the receiver's head"),
            ("score", "float64", "composition score (Elhage et al. 2021): ||W_OV^s W^r|| / (||W_OV^s|| ||W^r||), weights only"),
            ("baseline_mean", "float64", "the score of random matrices of the same shapes: mean"),
            ("baseline_sd", "float64", "their standard deviation (the samples' spread, not an error bar)"),
            ("z", "float64", "(score - baseline_mean) / baseline_sd"),
            ("ratio", "float64", "score / baseline_mean"),
            ("above_baseline", "bool", "score > baseline_mean + BASELINE_Z x baseline_sd"),
        ),
        "baseline": table(
            "baseline",
            "baseline.csv",
            "input (q, k, v)",
            ("input", "str", "the composition: q, k or v"),
            ("mean", "float64", "the random baseline's mean score"),
            ("sd", "float64", "its standard deviation over samples"),
            ("p99", "float64", "its 99th percentile"),
            ("n_samples", "int64", "random samples drawn"),
            ("d_model", "int64", "the model width the samples have"),
            ("d_head", "int64", "the head width the samples have"),
        ),
        "copying": table(
            "copying",
            "copying.csv",
            "head",
            NAME,
            LAYER,
            HEAD,
            (
                "copying",
                "float64",
                "OV copying score (Elhage et al. 2021): sum of the eigenvalues' real parts over their absolute values, of W_U W_O W_V W_E",
            ),
            ("positive_share", "float64", "share of the eigenvalue mass with a positive real part"),
            ("diagonal", "float64", "share of sampled tokens whose own logit the head's OV circuit raises most (NaN with n_tokens=0)"),
            when="unless copying=False (or the model has no unembedding: an encoder, a new output head)",
        ),
    },
}
