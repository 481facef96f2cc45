"""Edge ROC AUC: against a known edge set (every edge of the graph scored, as auto-circuit's ``measure_roc``),
and weighted, for a sample of edges drawn with known inclusion probabilities (:func:`weighted_auc`)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from headlens.probes.errors import InputError

__all__ = ["edge_roc_auc", "weighted_auc"]


def weighted_auc(scores: np.ndarray, label: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Weighted probability that a positive outranks a negative by ``scores`` (ties count half).

    ``sum_{i pos, j neg} w_i w_j [s_i > s_j] + w_i w_j [s_i = s_j] / 2`` over ``sum_pos w * sum_neg w``; with
    ``weights`` the inverse inclusion probabilities of a sample, it estimates the AUC of the population the
    sample was drawn from (a ratio of Horvitz-Thompson sums).  NaN scores rank lowest; NaN when either class
    has no weight.  One sort: O(n log n)."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(label, dtype=bool)
    w = np.ones(len(s)) if weights is None else np.asarray(weights, dtype=float)
    if not (len(s) == len(y) == len(w)):
        raise InputError(f"scores, labels and weights differ in length ({len(s)}, {len(y)}, {len(w)})")
    s = np.where(np.isfinite(s), s, -np.inf)
    w_pos, w_neg = np.where(y, w, 0.0), np.where(y, 0.0, w)
    total_pos, total_neg = float(w_pos.sum()), float(w_neg.sum())
    if total_pos <= 0 or total_neg <= 0:
        return float("nan")
    values, group = np.unique(s, return_inverse=True)  # tie groups, in increasing score
    pos_g = np.bincount(group, weights=w_pos, minlength=len(values))
    neg_g = np.bincount(group, weights=w_neg, minlength=len(values))
    neg_below = np.cumsum(neg_g) - neg_g  # negative weight strictly below each group
    return float((pos_g * (neg_below + neg_g / 2)).sum() / (total_pos * total_neg))


def edge_roc_auc(scores: pd.DataFrame, true_edges: Iterable[tuple[str, str, str]], *, column: str = "score") -> float:
    """Probability that a true edge outranks a false one by ``|scores[column]|`` (ties count half).

    ``scores`` has ``sender, receiver, input`` and ``column``; NaN scores rank lowest.  Every true
    edge must be in ``scores``; NaN when either class is empty."""
    truth = {tuple(e) for e in true_edges}
    keys = list(zip(scores["sender"], scores["receiver"], scores["input"], strict=True))
    missing = truth - set(keys)
    if missing:
        raise InputError(f"true edge {sorted(missing)[0]} is not among the scored edges")
    label = np.array([k in truth for k in keys], dtype=bool)
    return weighted_auc(np.abs(scores[column].to_numpy(dtype=float)), label)
