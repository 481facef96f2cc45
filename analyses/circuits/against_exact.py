"""An estimate's edge ranking judged by exact patching on a sample of edges: ROC AUC and rank agreement, weighted.

Exact patching of every edge of a real model is a forward per edge (70,651 on SmolLM2), so the exact
values are taken on a sample (:class:`EdgeSample`): a *top* stratum patched whole (each estimate's top
``K`` by ``|score|``, their union; weight 1) and ``M`` edges drawn uniformly without replacement (seeded,
:func:`~headlens.analyses.circuits.confirm.sample_outside`) from the ``R`` others (weight ``R / M``, the
inverse of their inclusion probability).  Every edge of the graph is in exactly one stratum, so the
weighted sums are Horvitz-Thompson estimates of the graph's.

The *exact circuit* is the edges whose exact score (the share of the clean-corrupt gap,
:func:`~headlens.analyses.circuits.summary.edge_table`'s ``score``) is at least :data:`CIRCUIT_SHARE`
in absolute value.  :func:`against_exact` gives, per estimate,

* ``auc``: the weighted ROC AUC of ``|estimate|`` against that label (:func:`~headlens.analyses.circuits.roc.weighted_auc`):
  the chance that an edge of the exact circuit outranks one outside it, over the whole graph;
* ``spearman``: the weighted Spearman correlation of ``|estimate|`` and ``|exact|`` over the sample (each
  edge's weighted mid-rank, then the weighted Pearson correlation of the ranks), an estimate of the graph's;
* 95% percentile intervals over ``n_bootstrap`` resamples that redraw the pairs (both scores re-averaged on
  them, the label recomputed) and, at the same time, the random stratum's edges (with replacement, within
  the stratum; the top stratum is a census and is kept): the interval reflects both samples.  A random stratum
  pins down only roughly how many edges of the exact circuit the rest holds (none of 2,000 drawn, or one of 20,
  says little), and the bootstrap cannot place the ones it did not draw: the interval is widened by the edges the
  draw cannot rule out beyond its own estimate (:func:`hidden_bound`, the 95% Clopper-Pearson bound), placed at
  the bottom and at the top of the ranking.  When the
  estimate and the exact run did not score the same pairs, only the edges are redrawn (``interval`` says so).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.confirm import sample_outside
from headlens.analyses.circuits.roc import weighted_auc
from headlens.analyses.circuits.scores import PerPair
from headlens.analyses.circuits.summary import carried, gap_of
from headlens.probes.errors import InputError

__all__ = ["CIRCUIT_SHARE", "WIDE_INTERVAL", "AgainstExact", "EdgeSample", "against_exact", "against_exact_table", "edge_sample",
           "hidden_bound", "weighted_spearman"]  # fmt: skip

#: An edge is in the exact circuit when its exact score carries at least this share of the gap (in absolute value).
CIRCUIT_SHARE = 0.01
#: An AUC interval wider than this is too wide to read (:attr:`AgainstExact.wide`): it is said so, not read as a finding.
WIDE_INTERVAL = 0.2


@dataclass(frozen=True, kw_only=True)
class EdgeSample:
    """The edges patched exactly: ``top`` (every one, weight 1) and ``random`` (``len(random)`` of the ``n_rest``
    edges outside ``top``, drawn uniformly without replacement, seeded), of a graph of ``n_edges``."""

    n_edges: int
    top: np.ndarray
    random: np.ndarray
    seed: int

    @property
    def n_rest(self) -> int:
        return self.n_edges - len(self.top)

    @property
    def ids(self) -> np.ndarray:
        return np.concatenate([self.top, self.random]).astype(np.int64)

    @property
    def weights(self) -> np.ndarray:
        """Inverse inclusion probabilities, in the order of :attr:`ids`."""
        w_rest = self.n_rest / len(self.random) if len(self.random) else 0.0
        return np.concatenate([np.ones(len(self.top)), np.full(len(self.random), w_rest)])


def edge_sample(orders: list[np.ndarray], k: int, m: int, seed: int) -> EdgeSample:
    """The union of each ranking's top ``k`` (``orders``: edge ids, best first, each over the whole graph) and ``m``
    of the rest drawn by :func:`~headlens.analyses.circuits.confirm.sample_outside` (its seed stream)."""
    if not orders:
        raise InputError("edge_sample needs at least one ranking")
    n_edges = len(orders[0])
    top = np.unique(np.concatenate([np.asarray(o)[:k] for o in orders]).astype(np.int64))
    rest = np.setdiff1d(np.arange(n_edges), top)
    random = sample_outside(np.concatenate([top, rest]), len(top), m, seed)
    return EdgeSample(n_edges=n_edges, top=top, random=random, seed=int(seed))


def weighted_spearman(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """Weighted Spearman correlation: the weighted Pearson correlation of the weighted mid-ranks (the weight
    below a value plus half the weight tied with it); NaN values rank lowest; NaN when a rank is constant."""

    def ranks(x: np.ndarray) -> np.ndarray:
        x = np.where(np.isfinite(x), x, -np.inf)
        values, group = np.unique(x, return_inverse=True)
        per = np.bincount(group, weights=w, minlength=len(values))
        return (np.cumsum(per) - per / 2)[group]

    ra, rb = ranks(np.asarray(a, dtype=float)), ranks(np.asarray(b, dtype=float))
    wn = w / w.sum()
    da, db = ra - wn @ ra, rb - wn @ rb
    va, vb = wn @ (da * da), wn @ (db * db)
    if va <= 0 or vb <= 0:
        return float("nan")
    return float((wn @ (da * db)) / np.sqrt(va * vb))


@dataclass(frozen=True, kw_only=True)
class AgainstExact:
    """One estimate's ranking against exact patching on an :class:`EdgeSample` (module doc)."""

    method: str
    auc: float
    auc_low: float
    auc_high: float
    spearman: float
    spearman_low: float
    spearman_high: float
    n_edges: int
    n_top: int  # the top stratum (every edge patched)
    n_random: int  # drawn from the rest
    n_rest: int  # the edges outside the top stratum
    n_positive: int  # sampled edges in the exact circuit
    est_circuit: float  # the exact circuit's size in the graph, estimated (weighted)
    hidden_bound: float  # random stratum without an edge of the exact circuit: up to this many may be in the rest (95%)
    circuit_share: float
    interval: str  # what the bootstrap redraws
    n_pairs: int
    n_bootstrap: int
    seed: int
    reason: str | None = None  # why auc is NaN, when it is

    @property
    def wide(self) -> bool:
        return not (self.auc_high - self.auc_low <= WIDE_INTERVAL)

    def row(self) -> dict[str, Any]:
        """The fields as a table row (``reason`` "" where the AUC is defined) and ``wide``."""
        return asdict(self) | {"reason": self.reason or "", "wide": self.wide}


def _carried_at(pp: PerPair, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~headlens.analyses.circuits.summary.carried` of the edges ``ids`` (each must have been scored)."""
    col = {int(e): i for i, e in enumerate(pp.edge_ids)}
    missing = [int(e) for e in ids if int(e) not in col]
    if missing:
        raise InputError(f"edge {missing[0]} was not scored ({pp.method})", edge=missing[0])
    x, g = carried(pp)
    return x[:, [col[int(e)] for e in ids]], g


def _shares(x: np.ndarray, g: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    """Each edge's share of the gap, on the pairs weighted by ``counts`` (None: each once)."""
    c = np.ones(len(g)) if counts is None else counts
    with np.errstate(invalid="ignore", divide="ignore"):
        return (c @ x) / float(c @ g)


def _measure(est: np.ndarray, ex: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    label = np.abs(ex) >= CIRCUIT_SHARE
    return weighted_auc(np.abs(est), label, w), weighted_spearman(np.abs(est), np.abs(ex), w)


def against_exact(estimate: PerPair, exact: PerPair, sample: EdgeSample, *, n_bootstrap: int = 1000, seed: int = 0) -> AgainstExact:
    """``estimate``'s ranking against ``exact``'s values on ``sample`` (module doc): ``exact`` scored every edge of
    ``sample.ids``, ``estimate`` those edges at least (usually every edge)."""
    ids, w = sample.ids, sample.weights
    same_pairs = len(estimate.clean) == len(exact.clean) and np.allclose(estimate.clean, exact.clean, rtol=1e-4, atol=1e-4)
    xe, ge = _carried_at(estimate, ids)
    xx, gx = _carried_at(exact, ids)
    est, ex = _shares(xe, ge, None), _shares(xx, gx, None)
    auc, rho = _measure(est, ex, w)
    n_top = len(sample.top)
    base = {"method": estimate.method, "n_edges": sample.n_edges, "n_top": n_top, "n_random": len(sample.random),
            "n_rest": sample.n_rest, "n_positive": int((np.abs(ex) >= CIRCUIT_SHARE).sum()),
            "est_circuit": float(w @ (np.abs(ex) >= CIRCUIT_SHARE)), "circuit_share": CIRCUIT_SHARE,
            "hidden_bound": hidden_bound(ex[len(sample.top):], sample),
            "interval": "pairs and random-stratum edges" if same_pairs else "random-stratum edges (the runs scored different pairs)",
            "n_pairs": len(exact.clean), "n_bootstrap": int(n_bootstrap), "seed": int(seed)}  # fmt: skip
    gap = gap_of(exact, n_bootstrap=n_bootstrap, seed=seed)
    if not gap.defined:
        nan = float("nan")
        return AgainstExact(**base, auc=nan, auc_low=nan, auc_high=nan, spearman=rho, spearman_low=nan, spearman_high=nan,
                            reason=f"the exact circuit is not defined: {gap.reason}")  # fmt: skip
    rng = np.random.default_rng([int(seed), 49])
    n_pairs = len(exact.clean)
    boot = np.full((n_bootstrap, 2), np.nan)
    for b in range(n_bootstrap):
        counts = rng.multinomial(n_pairs, np.full(n_pairs, 1.0 / n_pairs)).astype(float) if same_pairs else None
        pick = np.concatenate([np.arange(n_top), n_top + rng.integers(0, len(sample.random), len(sample.random))])
        e_b, x_b = _shares(xe, ge, counts), _shares(xx, gx, counts)
        boot[b] = _measure(e_b[pick], x_b[pick], w[pick])
    lo, hi = np.nanpercentile(boot, [2.5, 97.5], axis=0) if np.isfinite(boot).any() else (np.full(2, np.nan),) * 2
    lo[0], hi[0] = _widened(float(lo[0]), float(hi[0]), base["est_circuit"], base["hidden_bound"])
    reason = None if np.isfinite(auc) else "no sampled edge is in the exact circuit, or every one is"
    return AgainstExact(**base, auc=auc, auc_low=float(lo[0]), auc_high=float(hi[0]), spearman=rho, spearman_low=float(lo[1]),
                        spearman_high=float(hi[1]), reason=reason)  # fmt: skip


def hidden_bound(random_exact: np.ndarray, sample: EdgeSample) -> float:
    """The edges of the exact circuit among the ``R`` outside the top that the random draw cannot rule out beyond its
    own estimate ``R k / M`` (``k`` of its ``M`` edges in the circuit): ``R (u - k / M)``, ``u`` the one-sided 95%
    Clopper-Pearson upper bound of ``k`` of ``M`` (``1 - 0.05 ** (1 / M)`` at ``k = 0``).  The bootstrap redraws the
    stratum but cannot place edges it never drew: one circuit edge in 20 drawn from 70,641 bounds the rest's at
    15,000, not 3,500.  0 when the stratum is the whole rest; the whole rest when it is empty."""
    from scipy.stats import beta

    m = len(sample.random)
    if m >= sample.n_rest:
        return 0.0
    if not m:
        return float(sample.n_rest)
    k = int((np.abs(random_exact) >= CIRCUIT_SHARE).sum())
    upper = 1.0 if k >= m else float(beta.ppf(0.95, k + 1, m - k))
    return float(sample.n_rest * max(upper - k / m, 0.0))


def _widened(lo: float, hi: float, positives: float, hidden: float) -> tuple[float, float]:
    """The AUC interval with ``hidden`` more edges of the exact circuit placed below every other edge (the low end) or
    above (the high end): ``lo * P / (P + U)`` and ``(hi * P + U) / (P + U)``."""
    if hidden <= 0 or positives + hidden <= 0:
        return lo, hi
    return lo * positives / (positives + hidden), (hi * positives + hidden) / (positives + hidden)


def against_exact_table(results: list[AgainstExact]) -> pd.DataFrame:
    """One row per estimate (``against_exact.csv``)."""
    return pd.DataFrame([r.row() for r in results])
