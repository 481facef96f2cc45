"""MIB's circuit-localisation metrics, CPR and CMD, on MIB's grid of circuit sizes.

The Mechanistic Interpretability Benchmark (Mueller et al. 2025; its circuit track's
``evaluate_area_under_curve``) scores a ranking of edges by circuits of ``int(f * n_edges)`` edges
for ``f`` in :data:`MIB_FRACTIONS` (0.1% .. 100% of the edges: the fraction of edges is the x-axis,
linear, from 0.001 to 1; no point at 0).  At each size the circuit is the top ``n`` edges of a
ranking and every other edge is ablated (``ablation``: patched to its corrupted value, or its mean,
or zero: :mod:`~headlens.analyses.circuits.ablation_kinds`); its faithfulness is

    f(C) = (m(C) - m(empty)) / (m(full) - m(empty))

with ``m`` the task's metric averaged over the pairs first (a ratio of means), ``m(full)`` the
unablated model and ``m(empty)`` every edge ablated.  The areas are trapezoids between consecutive
grid points, ``sum_i (x_{i+1} - x_i) (g_i + g_{i+1}) / 2``:

* **CPR** (higher is better): ``g = f``, the edges ranked by **signed** score (largest positive
  first: the edges that push the metric towards the clean answer);
* **CMD** (lower is better): ``g = |1 - f|``, the edges ranked by **absolute** score.

headlens' score is oriented so that a positive score carries the clean behaviour
(:mod:`~headlens.analyses.circuits.summary`), the direction of MIB's signed ranking.  MIB also prunes
a circuit's dangling edges (``apply_topn(..., prune=True)``); headlens does not: under patching an
edge out of a node whose every input is patched already carries that node's corrupted output, and
an edge into a node that reaches no output changes nothing, so the metric is the same; under mean
or zero ablation the two can differ on such edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.summary import ranking
from headlens.analyses.patching.pairs import PairTask
from headlens.probes.loading import LoadedModel

__all__ = [
    "MIB_FRACTIONS",
    "NORMALISATION",
    "mib_areas",
    "mib_sizes",
    "signed_ranking",
    "mib_masks",
    "mib_from_values",
    "mib_intervals",
    "mib_metrics",
]

#: MIB's circuit sizes as fractions of the graph's edges.
MIB_FRACTIONS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: The normalisation, in words, for the manifest.
NORMALISATION = "(m(circuit) - m(empty)) / (m(full) - m(empty)), metric averaged over pairs first; empty: every edge ablated"


def mib_sizes(n_edges: int, fractions: Sequence[float] = MIB_FRACTIONS) -> list[int]:
    """Edges kept at each fraction: ``int(f * n_edges)`` (rounded down, as MIB)."""
    return [int(f * n_edges) for f in fractions]


def mib_areas(faithfulness: Sequence[float] | np.ndarray, fractions: Sequence[float] = MIB_FRACTIONS) -> tuple[float, float]:
    """``(area under f, area under |1 - f|)`` by the trapezoid rule over ``fractions`` (NaN if any ``f`` is)."""
    f = np.asarray(faithfulness, dtype=float)
    x = np.asarray(fractions, dtype=float)
    if len(f) != len(x):
        raise ValueError(f"{len(f)} faithfulness values for {len(x)} fractions")
    if not np.isfinite(f).all():
        return float("nan"), float("nan")
    dx = np.diff(x)
    under = float(np.sum(dx * (f[1:] + f[:-1]) / 2))
    d = np.abs(1.0 - f)
    return under, float(np.sum(dx * (d[1:] + d[:-1]) / 2))


def signed_ranking(scores: np.ndarray) -> np.ndarray:
    """Edge order by signed score, largest first (NaN last, ties in graph order)."""
    s = np.asarray(scores, dtype=float)
    return np.argsort(-np.where(np.isfinite(s), s, -np.inf), kind="stable")


def mib_masks(scores: np.ndarray, fractions: Sequence[float] = MIB_FRACTIONS) -> np.ndarray:
    """Boolean ``[2 + 2 * len(fractions), edge]``: nothing kept, everything kept, then the signed ranking's circuits
    at each size, then the absolute ranking's."""
    n = len(scores)
    sizes = mib_sizes(n, fractions)
    masks = np.zeros((2 + 2 * len(sizes), n), dtype=bool)
    masks[1] = True
    for j, order in enumerate((signed_ranking(scores), ranking(scores))):
        for i, k in enumerate(sizes):
            masks[2 + j * len(sizes) + i, order[:k]] = True
    return masks


def mib_from_values(values: np.ndarray, n_edges: int, fractions: Sequence[float] = MIB_FRACTIONS) -> dict[str, Any]:
    """CPR and CMD from the metric ``[circuit, pair]`` of :func:`mib_masks`' circuits (any metric: the ratio does not
    depend on its direction)."""
    m = np.asarray(values, dtype=float).mean(axis=1)
    empty, full = m[0], m[1]
    k = len(fractions)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = (m[2:] - empty) / (full - empty) if full != empty else np.full(2 * k, np.nan)
    signed, absolute = f[:k], f[k:]
    cpr, _ = mib_areas(signed, fractions)
    _, cmd = mib_areas(absolute, fractions)
    return {
        "cpr": cpr,
        "cmd": cmd,
        "fractions": [float(x) for x in fractions],
        "n_edges": mib_sizes(n_edges, fractions),
        "faithfulness_signed": [float(x) for x in signed],
        "faithfulness_absolute": [float(x) for x in absolute],
        "metric_full": float(full),
        "metric_empty": float(empty),
        "normalisation": NORMALISATION,
        "rule": "trapezoids over the fraction of edges (0.001 .. 1, linear); CPR: area under f, edges by signed score; "
        "CMD: area under |1 - f|, edges by absolute score",
    }


def mib_intervals(
    values: np.ndarray, fractions: Sequence[float] = MIB_FRACTIONS, *, n_resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> dict[str, list[float]]:  # fmt: skip
    """Percentile intervals (``level``) of CPR and CMD over the pairs: the columns of ``values`` ``[circuit, pair]``
    resampled with replacement (seeded multinomial counts, as :func:`~headlens.analyses.measure.stats.bootstrap_mean_ci`), each
    resample's CPR and CMD from its circuit means.  NaN ends for fewer than 2 pairs or a resample without a gap."""
    v = np.asarray(values, dtype=float)
    n = v.shape[1]
    if n < 2 or n_resamples <= 0:
        return {"cpr_ci": [float("nan")] * 2, "cmd_ci": [float("nan")] * 2}
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(float)  # [b, pair]
    m = counts @ v.T / n  # [b, circuit]
    k, x = len(fractions), np.asarray(fractions, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = (m[:, 2:] - m[:, :1]) / np.where(m[:, 1:2] != m[:, :1], m[:, 1:2] - m[:, :1], np.nan)
    dx = np.diff(x)
    cpr = np.sum(dx * (f[:, 1:k] + f[:, : k - 1]) / 2, axis=1)
    d = np.abs(1.0 - f[:, k:])
    cmd = np.sum(dx * (d[:, 1:] + d[:, :-1]) / 2, axis=1)
    alpha = (1 - level) / 2

    def ends(a: np.ndarray) -> list[float]:
        a = a[np.isfinite(a)]
        return [float(q) for q in np.quantile(a, [alpha, 1 - alpha])] if len(a) else [float("nan")] * 2

    return {"cpr_ci": ends(cpr), "cmd_ci": ends(cmd)}


def mib_metrics(
    model: LoadedModel, task: PairTask, graph: EdgeGraph, scores: np.ndarray, *, batch_size: int = 8, ablation: Any = None,
    measured_on: str = "", n_bootstrap: int = 1000, seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """CPR and CMD of the ranking ``scores`` (one per edge of ``graph``, oriented: > 0 carries the clean behaviour) on
    ``task``'s pairs, every edge outside a circuit ablated as ``ablation`` says (None: patched to its corrupted value),
    with their intervals over the pairs (:func:`mib_intervals`, ``n_bootstrap`` resamples, ``seed``)."""
    masks = mib_masks(np.asarray(scores, dtype=float))
    values = circuit_values(model, task, graph, masks, batch_size=batch_size, ablation=ablation)
    out = mib_from_values(values, len(graph.edges))
    out |= mib_intervals(values, n_resamples=n_bootstrap, seed=seed)
    out["ablation"] = getattr(ablation, "kind", "corrupted")
    out["n_pairs"] = len(task)
    if measured_on:
        out["measured_on"] = measured_on
    return out
