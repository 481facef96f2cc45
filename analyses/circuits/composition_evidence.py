"""The census's data-free line of evidence: each previous-token head's K-composition into the
induction heads after it, against the random baseline of :mod:`headlens.analyses.circuits.composition`
(computed for those pairs only, one line per previous-token head)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import pandas as pd

from headlens.analyses.circuits.composition import (
    BASELINE_Z,
    COMPOSITION_COLUMNS,
    CompositionRun,
    mode_baseline,
    pair_scores,
    right_factors,
)
from headlens.analyses.circuits.weights import head_weights
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["composition_note", "composition_evidence"]


def composition_note(run: CompositionRun, roles: Mapping[str, Iterable[str]]) -> list[str]:
    """The census's data-free evidence lines: each previous-token head's K-composition into the
    induction heads after it, against the baseline.  ``roles``: head name ("0.0") -> its roles
    (names as the census gives them: ``previous_token``, ``induction``).  One line per
    previous-token head that has an induction head after it (its receivers' range, how many are
    above the baseline, the strongest), so a real model's 4 x 8 pairs read as 4 lines; empty when
    there is no such pair."""
    prev = {h for h, rs in roles.items() if "previous_token" in set(rs)}
    ind = {h for h, rs in roles.items() if "induction" in set(rs)}
    n_k = run.baseline.set_index("input")["n_samples"].get("k") if "input" in run.baseline else None
    samples = f" over {int(n_k)} random samples" if n_k is not None else ""
    k = run.scores[(run.scores["input"] == "k") & run.scores["sender"].isin(prev) & run.scores["receiver"].isin(ind)]
    k = k.sort_values(["sender_layer", "sender_head", "receiver_layer", "receiver_head"])
    lines = []
    for sender, rows in k.groupby("sender", sort=False):
        first, best = rows.iloc[0], rows.loc[rows["score"].idxmax()]
        baseline = f"its random baseline {first.baseline_mean:.3f} (sd {first.baseline_sd:.3f}{samples})"
        head = f"composition (weights, no data): previous-token head {sender} K-composes into"
        if len(rows) == 1:
            verdict = "above" if first.above_baseline else "not above"
            lines.append(
                f"{head} induction head {first.receiver} at {first.score:.3f}, {verdict} {baseline} ({first.ratio:.1f}x, z = {first.z:.1f})"
            )
            continue
        lines.append(
            f"{head} {len(rows)} induction heads ({', '.join(rows['receiver'])}) at {rows['score'].min():.3f} to {rows['score'].max():.3f},"
            f" above {baseline} for {int(rows['above_baseline'].sum())} of {len(rows)}"
            f" (z = {rows['z'].min():.1f} to {rows['z'].max():.1f});"
            f" strongest {best.receiver} at {best.score:.3f} ({best.ratio:.1f}x)"
        )
    return lines


def composition_evidence(model: LoadedModel, roles: pd.DataFrame, *, n_baseline: int = 200, seed: int = 0) -> list[str]:
    """The census's data-free line for its roles table (``name``, ``layer``, ``role`` per row): each
    previous-token head's K-composition into each later induction head against the random baseline
    (:func:`composition_note`), computed for those pairs only; empty when no such pair exists."""
    if roles.empty or not {"name", "role", "layer"} <= set(roles.columns):
        return []
    layer_of = {str(n): int(la) for n, la in zip(roles["name"], roles["layer"], strict=True)}
    prev = sorted({str(n) for n, r in zip(roles["name"], roles["role"], strict=True) if r == "previous_token"})
    ind = sorted({str(n) for n, r in zip(roles["name"], roles["role"], strict=True) if r == "induction"})
    pairs = [(a, b) for a in prev for b in ind if layer_of[a] < layer_of[b]]
    if not pairs:
        return []
    w = head_weights(model, fold_ln=True)
    _, _, d_model, d_head = w.shape
    kb = mode_baseline(d_model, d_head, "k", n=n_baseline, seed=seed)
    mean, sd = kb["mean"], kb["sd"]
    X, Y = right_factors(w, "k")
    rows = []
    for a, b in pairs:
        (la, ha), (lb, hb) = (tuple(int(x) for x in h.split(".")) for h in (a, b))
        score = float(pair_scores(w.W_V[la, ha : ha + 1], w.W_O[la, ha : ha + 1], X[lb, hb : hb + 1], Y[lb, hb : hb + 1])[0, 0])
        z = (score - mean) / sd if sd > 0 else float("nan")
        rows.append(
            {"sender": a, "receiver": b, "input": "k", "sender_layer": la, "sender_head": ha, "receiver_layer": lb, "receiver_head": hb,
             "score": score, "baseline_mean": mean, "baseline_sd": sd, "z": z, "ratio": score / mean if mean > 0 else float("nan"),
             "above_baseline": score > mean + BASELINE_Z * sd}
        )  # fmt: skip
    run = CompositionRun(scores=pd.DataFrame(rows, columns=COMPOSITION_COLUMNS), baseline=pd.DataFrame([kb]), copying=None, summary={})
    return composition_note(
        run, {h: ["previous_token"] for h in prev} | {h: [*(["previous_token"] if h in prev else []), "induction"] for h in ind}
    )
