"""The normalised metric of a patch: 0 at the corrupted run, 1 at the clean run, with an interval over pairs.

For pair ``i`` with clean value ``c_i``, corrupted value ``k_i`` and patched value ``p_i``, the
effect of a patch is the ratio of means

    ``R = mean_i (p_i - k_i) / mean_i (c_i - k_i)``

(0: the patched run is the corrupted one on average; 1: it is the clean one).  A ratio of means,
not a mean of ratios: a pair whose clean and corrupted values are close would otherwise blow up
the average.  Its 95% interval is the one percentile bootstrap of the package
(:func:`headlens.analyses.measure.stats.bootstrap_mean_ci`, pairs resampled) of the mean of the
linearised values ``R + ((p_i - k_i) - R (c_i - k_i)) / mean(c - k)``, whose mean is ``R``: the
first-order (delta-method) form of the ratio, so the interval carries the spread of the
denominator too.  Pairs without a value (a position they do not have) are left out of that
patch's means, so such a patch is normalised by the gap of its own pairs only: that subset must
then stand on its own, with at least :data:`~headlens.analyses.measure.verdicts.MIN_ITEMS` pairs (the
package's rule for an interval to carry a finding) and a gap that meets the rule below; otherwise
that patch's effect is NaN and :func:`subset_counts` says why (two pairs whose gaps are 0.02 and
0.01 would otherwise give a position an effect of 33).

**When it is undefined.**  The normalisation needs the clean run to be better than the corrupted
one: ``gap = mean(c - k)`` in the metric's good direction (logit difference up, embedding
change down) must be positive and its own 95% interval must exclude 0.  Otherwise the model does
not do the task on the clean inputs, the ratio would divide by about 0, and every effect is NaN
with the reason in :attr:`Gap.reason` (the raw metric values are still reported).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headlens.analyses.measure.evalset import METRICS
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.measure.verdicts import MIN_ITEMS

__all__ = ["Gap", "task_gap", "normalised_effects", "subset_counts"]


@dataclass(frozen=True)
class Gap:
    """Clean minus corrupted, in the metric's good direction, and whether it can normalise."""

    metric: str
    clean: float  # mean metric on the clean inputs
    corrupt: float  # mean metric on the corrupted inputs
    gap: float  # (clean - corrupt) * direction: > 0 when the clean run does the task better
    low: float
    high: float
    n_pairs: int
    reason: str | None  # None: defined

    @property
    def defined(self) -> bool:
        return self.reason is None

    def describe(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "clean": self.clean,
            "corrupt": self.corrupt,
            "gap": self.gap,
            "gap_low": self.low,
            "gap_high": self.high,
            "n_pairs": self.n_pairs,
            "undefined_reason": self.reason,
        }


def _direction(metric: str) -> float:
    return -float(METRICS[metric])  # +1 when higher is better (logit-diff), -1 when lower is (loss, embedding)


def task_gap(metric: str, clean: np.ndarray, corrupt: np.ndarray, *, n_resamples: int = 1000, seed: int = 0) -> Gap:
    """The clean-corrupt gap and, when it cannot normalise, why (see the module doc)."""
    clean, corrupt = np.asarray(clean, np.float64), np.asarray(corrupt, np.float64)
    g = (clean - corrupt) * _direction(metric)
    low, high = bootstrap_mean_ci(g, n_resamples=n_resamples, seed=seed)
    gap = float(np.mean(g))
    reason = None
    if not np.isfinite(gap):
        reason = "the clean or corrupted metric is not finite"
    elif gap <= 0:
        reason = (
            f"the model does not do the task on the clean inputs: clean {_fmt(metric, clean)}"
            f" is not better than corrupted {_fmt(metric, corrupt)}"
        )
    elif np.isfinite(low) and low <= 0:
        reason = (
            f"the clean-corrupted gap {gap:.3g} is not distinguishable from 0 on these {len(g)} pairs (95% interval"
            f" {float(low):.3g} .. {float(high):.3g}): too few pairs to tell, or the model barely does the task"
        )
    elif not np.isfinite(low) and len(g) < 2:
        reason = "one pair: no interval for the clean-corrupted gap, so the normalisation cannot be trusted"
    return Gap(metric, float(np.mean(clean)), float(np.mean(corrupt)), gap, float(low), float(high), len(g), reason)


def _fmt(metric: str, values: np.ndarray) -> str:
    return f"{metric} {float(np.mean(values)):.3g}"


def normalised_effects(
    patched: np.ndarray, clean: np.ndarray, corrupt: np.ndarray, gap: Gap, *, n_resamples: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(effect, low, high)`` of each patch; ``patched`` is ``[patch, item]`` (NaN: no value).

    All NaN when ``gap`` is undefined."""
    patched = np.asarray(patched, np.float64)
    shape = patched.shape[:-1]
    nan = np.full(shape, np.nan)
    if not gap.defined:
        return nan, nan.copy(), nan.copy()
    d = patched.reshape(-1, patched.shape[-1]).T - np.asarray(corrupt, np.float64)[:, None]  # [item, patch]
    g = (np.asarray(clean, np.float64) - np.asarray(corrupt, np.float64))[:, None]
    ok = np.isfinite(d)
    n_ok = ok.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        g_mean = np.where(ok, g, 0.0).sum(0) / n_ok
        d_mean = np.where(ok, d, 0.0).sum(0) / n_ok
        r = d_mean / g_mean
        lin = r[None, :] + (d - r[None, :] * g) / g_mean[None, :]
    lin[~ok] = np.nan
    _, why = subset_counts(patched, clean, corrupt, gap, n_resamples=n_resamples, seed=seed)
    bad = np.array([bool(w) for w in why.reshape(-1)], dtype=bool)
    r[bad] = np.nan
    lin[:, bad] = np.nan
    low, high = bootstrap_mean_ci(lin, n_resamples=n_resamples, seed=seed)
    return r.reshape(shape), low.reshape(shape), high.reshape(shape)


def subset_counts(
    patched: np.ndarray, clean: np.ndarray, corrupt: np.ndarray, gap: Gap, *, n_resamples: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(n_pairs, why)`` per patch of ``patched`` (``[patch, item]``, NaN: no value): how many pairs
    it has and why its effect is undefined ("" when it is defined; see the module doc)."""
    patched = np.asarray(patched, np.float64)
    shape = patched.shape[:-1]
    flat = patched.reshape(-1, patched.shape[-1])
    ok = np.isfinite(flat)
    n_ok = ok.sum(1)
    clean, corrupt = np.asarray(clean, np.float64), np.asarray(corrupt, np.float64)
    total = flat.shape[-1]
    why = np.full(len(flat), "", dtype=object)
    for j, k in enumerate(n_ok):
        if not gap.defined:
            why[j] = gap.reason
        elif k == 0:
            why[j] = "no pair has this patch"
        elif k < total:
            if k < MIN_ITEMS:
                why[j] = f"only {k} of {total} pairs have this patch; normalising by their own gap needs {MIN_ITEMS}"
            else:
                sub = task_gap(gap.metric, clean[ok[j]], corrupt[ok[j]], n_resamples=n_resamples, seed=seed)
                why[j] = "" if sub.defined else f"the {k} pairs that have this patch: {sub.reason}"
    return n_ok.reshape(shape), why.reshape(shape)
