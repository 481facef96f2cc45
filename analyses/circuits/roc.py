"""Edge ROC AUC against a known edge set (every edge of the graph scored, as auto-circuit's ``measure_roc``)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from headlens.probes.errors import InputError

__all__ = ["edge_roc_auc"]


def edge_roc_auc(scores: pd.DataFrame, true_edges: Iterable[tuple[str, str, str]], *, column: str = "score") -> float:
    """Probability that a true edge outranks a false one by ``|scores[column]|`` (ties count half).

    ``scores`` has ``sender, receiver, input`` and ``column``; NaN scores rank lowest.  Every true
    edge must be in ``scores``; NaN when either class is empty."""
    from scipy.stats import rankdata  # deferred: scipy.stats is about 0.8 s of `import headlens`

    truth = {tuple(e) for e in true_edges}
    keys = list(zip(scores["sender"], scores["receiver"], scores["input"], strict=True))
    missing = truth - set(keys)
    if missing:
        raise InputError(f"true edge {sorted(missing)[0]} is not among the scored edges")
    label = np.array([k in truth for k in keys])
    a = np.abs(scores[column].to_numpy(dtype=float))
    a = np.where(np.isfinite(a), a, -1.0)
    n_pos, n_neg = int(label.sum()), int((~label).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(a)  # average ranks for ties
    return float((ranks[label].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
