"""A census scores table whose heads mostly sink, planted by hand (no model): 4 layers x 3 heads,
every head a sink but 0.0 and 0.1, head 2.1 an induction head as well (its sink score above its
induction score), head 0.0 a previous-token head.  What a Llama-family model's census looks like
(SmolLM2-135M: 211 of 270 heads sink), small enough to check by hand."""

from __future__ import annotations

import pandas as pd

N_LAYERS, N_HEADS = 4, 3
DETECTORS = ("previous_token", "duplicate_token", "induction", "sink")
#: the uniform baseline of each detector (the sink's per layer: a sliding window would change it)
BASELINES = {"previous_token": 0.05, "duplicate_token": 0.02, "induction": 0.02, "sink": 0.1}
#: (layer, head, detector) -> score of the planted heads; every other score sits at its baseline
PLANTED = {
    **{(layer, head, "sink"): 0.3 + 0.1 * layer + 0.05 * head for layer in range(N_LAYERS) for head in range(N_HEADS) if layer or head > 1},
    (0, 0, "previous_token"): 0.7,
    (2, 1, "induction"): 0.8,
    (2, 1, "sink"): 0.95,
}
NOT_SINKS = {(0, 0), (0, 1)}


def planted_sink_scores(not_sinks: set[tuple[int, int]] | None = None) -> pd.DataFrame:
    """The scores table (``headlens.analyses.heads.census.SCORE_COLUMNS``): planted heads with a tight
    interval around their score, the others at their baseline; ``not_sinks``: more heads whose sink
    score sits at the baseline."""
    rows = []
    for det in DETECTORS:
        for layer in range(N_LAYERS):
            for head in range(N_HEADS):
                base = BASELINES[det]
                planted = (layer, head, det) in PLANTED and (det != "sink" or (layer, head) not in (not_sinks or set()))
                score = PLANTED[(layer, head, det)] if planted else base
                half = 0.02 if planted else 0.005
                rows.append(
                    {
                        "layer": layer,
                        "head": head,
                        "detector": det,
                        "score": score,
                        "baseline": base,
                        "ci_low": score - half,
                        "ci_high": score + half,
                        "n": 20,
                        "accuracy": float("nan"),
                    }
                )
    return pd.DataFrame(rows)
