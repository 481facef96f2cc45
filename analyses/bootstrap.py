"""Percentile bootstrap of a mean over prompts, for many statistics at once."""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap_mean_ci"]


def bootstrap_mean_ci(
    values: np.ndarray,
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    chunk: int = 200,
) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile interval of the mean over axis 0 of ``values`` ``[n, ...]``.

    All statistics share the same resamples (prompts are resampled, not cells).  With
    one prompt the interval collapses to the value itself.  NaN cells are ignored.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    flat = values.reshape(n, -1)
    if n <= 1:
        v = flat.mean(0) if n else np.full(flat.shape[1], np.nan)
        return v.reshape(values.shape[1:]), v.reshape(values.shape[1:])
    finite = np.isfinite(flat)
    filled = np.where(finite, flat, 0.0)
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, flat.shape[1]))
    for start in range(0, n_resamples, chunk):
        stop = min(start + chunk, n_resamples)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=stop - start).astype(np.float64)  # [b, n]
        num = counts @ filled
        den = counts @ finite.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[start:stop] = num / den
    alpha = (1 - level) / 2
    low = np.nanquantile(means, alpha, axis=0)
    high = np.nanquantile(means, 1 - alpha, axis=0)
    return low.reshape(values.shape[1:]), high.reshape(values.shape[1:])
