"""Edge scores with intervals and stability, from each pair's metric change under each edge's patch.

``score`` is the share of the clean-corrupt gap an edge carries, a ratio of means over pairs:
noising (clean run, edge corrupted) ``mean(c - p) / mean(c - k)``, denoising (corrupted run,
edge restored) ``mean(p - k) / mean(c - k)``, both in the metric's good direction; > 0 when the
edge carries the behaviour.  Its 95% interval is the package's bootstrap over pairs of the
linearised ratio, exactly as :func:`headlens.analyses.patching.effects.normalised_effects`
does for head patches; undefined gaps give NaN scores (``score_raw``, the mean metric change,
stays).  ``stability`` is the fraction of ``n_bootstrap`` resamples of the pairs (seeded) in
which the edge is selected by the selection rule *and* keeps the sign it has on all pairs: the
``top_n`` edges by ``|score|`` or those with ``|score| >= threshold`` (by ``|score_raw|`` when the
gap is undefined).  Selection is by ``|score|``, so without the sign an edge whose sign the pairs
cannot settle (its interval spans 0) would read as stable; an edge whose score is 0 on all pairs
is never stable.  A circuit chosen as the smallest reaching a target faithfulness is resampled
as the ``top_n`` rule at the chosen size (the size is not searched again in each resample).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.scores import PerPair
from headlens.analyses.measure.evalset import METRICS
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.patching.effects import Gap, task_gap

__all__ = ["edge_table", "gap_of", "carried", "stability", "ranking"]


def gap_of(per_pair: PerPair, *, n_bootstrap: int = 1000, seed: int = 0) -> Gap:
    return task_gap(per_pair.metric, per_pair.clean, per_pair.corrupt, n_resamples=n_bootstrap, seed=seed)


def carried(per_pair: PerPair) -> tuple[np.ndarray, np.ndarray]:
    """``(x, g)``: each pair's gap share numerator ``[pair, edge]`` and gap ``[pair]``, in the good direction."""
    good = -float(METRICS[per_pair.metric])  # +1 when higher is better
    sign = -1.0 if per_pair.direction == "noising" else 1.0
    return sign * good * per_pair.values, good * (per_pair.clean - per_pair.corrupt)


def ranking(scores: np.ndarray) -> np.ndarray:
    """Edge order by ``|score|``, largest first (NaN last, ties in graph order)."""
    a = np.abs(np.asarray(scores, dtype=float))
    return np.argsort(-np.where(np.isfinite(a), a, -1.0), kind="stable")


def _select(means: np.ndarray, top_n: int | None, threshold: float | None) -> np.ndarray:
    """Boolean ``[resample, edge]`` of the selection rule applied to each row of ``means``."""
    a = np.abs(means)
    a = np.where(np.isfinite(a), a, -1.0)
    if threshold is not None:
        return a >= threshold
    k = int(top_n or 0)
    out = np.zeros(a.shape, dtype=bool)
    if k <= 0:
        return out
    if k >= a.shape[1]:
        out[:] = True
        return out
    idx = np.argpartition(-a, k - 1, axis=1)[:, :k]
    np.put_along_axis(out, idx, True, axis=1)
    return out


def stability(
    x: np.ndarray, g: np.ndarray, *, top_n: int | None, threshold: float | None, n_bootstrap: int = 1000, seed: int = 0, chunk: int = 100
) -> np.ndarray:
    """Fraction of bootstrap resamples of the pairs in which each edge is selected with its all-pairs sign (module doc)."""
    n, n_edges = x.shape
    if n_bootstrap <= 0 or (top_n is None and threshold is None):
        return np.full(n_edges, np.nan)
    rng = np.random.default_rng(seed)
    hits = np.zeros(n_edges)
    xs = np.where(np.isfinite(x), x, 0.0)
    sign = np.sign(xs.sum(0)) * np.sign(float(np.sum(g)))  # the sign of each edge's score on all pairs
    for b0 in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - b0)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64)  # [b, pair]
        gm = counts @ g / n
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (counts @ xs / n) / np.where(gm > 0, gm, np.nan)[:, None] if threshold is not None else counts @ xs
        same = (np.sign(counts @ xs) * np.sign(gm)[:, None] == sign[None, :]) & (sign != 0)[None, :]
        hits += (_select(means, top_n, threshold) & same).sum(0)
    return hits / n_bootstrap


def edge_table(
    graph: EdgeGraph,
    per_pair: PerPair,
    *,
    top_n: int | None = None,
    threshold: float | None = None,
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Graph columns of the scored edges plus ``score, ci_low, ci_high, score_raw, stability, rank, estimate``."""
    x, g = carried(per_pair)
    gap = gap_of(per_pair, n_bootstrap=n_bootstrap, seed=seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        g_mean = float(np.mean(g))
        r = x.mean(0) / g_mean
        lin = r[None, :] + (x - r[None, :] * g[:, None]) / g_mean
    if gap.defined:
        low, high = bootstrap_mean_ci(lin, n_resamples=n_bootstrap, seed=seed)
    else:
        r = np.full(x.shape[1], np.nan)
        low, high = r.copy(), r.copy()
    table = graph.edges.iloc[per_pair.edge_ids].reset_index(drop=False).rename(columns={"index": "edge_id"})
    table["score"] = r
    table["ci_low"] = low
    table["ci_high"] = high
    table["score_raw"] = per_pair.values.mean(0)
    if gap.defined:
        table["stability"] = stability(x, g, top_n=top_n, threshold=threshold, n_bootstrap=n_bootstrap, seed=seed)
    else:
        xs = per_pair.values
        table["stability"] = stability(xs, np.ones(len(g)), top_n=top_n, threshold=None, n_bootstrap=n_bootstrap, seed=seed)
    order = ranking(table["score"].to_numpy() if gap.defined else table["score_raw"].to_numpy())
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    table["rank"] = rank
    table["estimate"] = per_pair.estimate
    return table
