"""The statistics every analysis shares: one percentile bootstrap of a mean, and Spearman's rho.

One semantics for every interval the package reports (census scores, referent differences,
ablation deltas): a percentile bootstrap of the mean over *items* (prompts, units, windows),
with the resamples drawn from a seeded :class:`numpy.random.Generator`.

* Every statistic (column) shares the same resamples of the items, and each column's means are
  computed on their own, so a statistic's interval is bit-identical whichever other statistics
  were computed alongside it.
* NaN cells are ignored: a resample's mean is over the finite cells it drew.
* An interval needs at least two measured items and at least one resample; otherwise it is NaN
  (not a zero-width interval at the point estimate).

``scipy.stats.bootstrap(method="percentile")`` was measured as a replacement: on a GPT-2-sized
census (200 prompts x 864 statistics, 1000 resamples) it took 4.8 s against 0.27 s here, and it
does not skip NaN cells, so the seeded multinomial resampling below stays.  Spearman's rho is
:func:`scipy.stats.spearmanr`.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

__all__ = ["bootstrap_mean_ci", "spearman"]

logger = logging.getLogger(__name__)


def bootstrap_mean_ci(
    values: Any,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    chunk: int = 200,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval (``level``) of the mean over axis 0 (the items) of ``values`` ``[item, ...]``.

    Returns ``(low, high)`` shaped ``values.shape[1:]``.  A statistic with fewer than two finite
    items, or ``n_resamples == 0``, gets NaN for both ends.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    shape = values.shape[1:]
    flat = values.reshape(n, -1)
    finite = np.isfinite(flat)
    low = np.full(flat.shape[1], np.nan)
    high = np.full(flat.shape[1], np.nan)
    cols = np.flatnonzero(finite.sum(0) >= 2)
    if n_resamples <= 0 or n < 2 or not len(cols):
        return low.reshape(shape), high.reshape(shape)
    filled = np.where(finite, flat, 0.0)
    present = finite.astype(np.float64)
    rng = np.random.default_rng(seed)
    means = np.empty((len(cols), n_resamples))
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=stop - start).astype(np.float64)  # [b, item]
        with np.errstate(invalid="ignore", divide="ignore"):
            for k, c in enumerate(cols):  # column by column: bit-identical whatever the other columns
                means[k, start:stop] = (counts @ np.ascontiguousarray(filled[:, c])) / (counts @ np.ascontiguousarray(present[:, c]))
    alpha = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample that drew no finite cell is NaN
        lo, hi = np.nanquantile(means, [alpha, 1 - alpha], axis=1)
    low[cols], high[cols] = lo, hi
    return low.reshape(shape), high.reshape(shape)


def spearman(a: Any, b: Any) -> float:
    """Spearman rank correlation (average ranks for ties) of two equal-length vectors.

    Pairs with a NaN are dropped; fewer than two pairs, or a constant side, give NaN.
    """
    from scipy.stats import spearmanr

    x = np.asarray(a, dtype=np.float64).ravel()
    y = np.asarray(b, dtype=np.float64).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)
