"""Referent heads (pronoun -> antecedent): attention from the pronoun to its antecedent.

Stimulus: minimal pairs of sentences (:mod:`headlens.analyses.stimuli.referent`) with a pronoun, its
antecedent and a distractor that agreement (gender or number) rules out; the two items of a
pair differ only in the pronoun, so the antecedent of one is the distractor of the other at
the same position.  Per sentence and head: score = ``A[pronoun, antecedent]``, ``distractor``
= ``A[pronoun, distractor]``, ``accuracy`` = whether the antecedent gets more attention than
the distractor (Clark et al. 2019 scored BERT heads this way).  Uniform baseline:
``1/(pronoun + 1)``, or ``1/n`` on a bidirectional layer (an encoder's prompt of ``n`` real
tokens); for accuracy, a uniform head ties, which does not count as a win.

**Role rule** (:func:`referent_passes`, applied by :func:`headlens.analyses.heads.classify.classify_heads`).
A head is a referent head when all of these hold:

1. *It picks the agreeing candidate more often than chance*: an exact one-sided sign test
   over units, a unit being a minimal pair (an item without a partner is a unit on its own).
   A unit is a win when the head prefers the antecedent in more of its items than it prefers
   the distractor (``sum sign(A[p, a] - A[p, d]) > 0``), a loss when fewer, a tie otherwise;
   ties drop out and ``p = P(X >= wins)`` for ``X ~ Binomial(wins + losses, 1/2)``, computed
   exactly with integer binomial coefficients (scipy is not a dependency).  A head that
   attends by position, or by anything but agreement, picks the same candidate in both items
   of a pair: every pair is a tie, accuracy is exactly 50% and ``p = 1``.  Pairs are the unit
   because the two items of a pair are not independent.  The p-values are Holm-corrected
   over every head tested (the ``p_value`` column; ``p_raw`` in :func:`referent_statistics`),
   and the test passes when ``p_value <= alpha`` (the detector's threshold, 0.05:
   ``--threshold referent=0.01`` makes it stricter).
2. *It resolves most pairs*: it prefers the antecedent in both items of more than half the
   pairs (``pair_accuracy > MIN_PAIR_ACCURACY = 0.5``; an item without a partner counts on its
   own).  Significance alone is not enough: on a real model, heads that attend mostly by
   position but are nudged a little by agreement win a few pairs and lose none, so their sign
   test is significant at item accuracies near 0.6.  This is the effect-size floor.
3. *It attends more to the antecedent than to the distractor*: the lower end of the 95%
   percentile bootstrap interval (over units) of ``mean(A[p, a] - A[p, d])`` is above 0
   (``diff_ci_low > 0``).
4. The rule every detector shares: the lower end of the antecedent score's interval is at
   least ``baseline_factor`` x the uniform baseline (a head that gives the antecedent
   less than twice what uniform attention would is not attending to it, however reliably
   it ranks the two).  Attention mass (the old 0.3 threshold) no longer decides.

*Held-out accuracy*: the sentence frames are split in two halves by a fixed seed
(:func:`split_frames`, stratified by kind); the rule is computed again on the selection half
only (``select_*`` columns) and ``heldout_accuracy`` is the head's accuracy on the other half.

Where the numbers live: the census adds :data:`REFERENT_COLUMNS` to the scores table (NaN on
other detectors' rows, absent when the referent detector did not run) and keeps the full
per-head table (:data:`REFERENT_TABLE_COLUMNS`) as ``CensusRun.referent``.  That table's
``ci_low`` resamples pairs; the scores table's ``ci_low``/``ci_high`` resample sentences, as
for every detector, and ``classify_heads`` uses those.

In a sliding-window layer the baseline is ``1/min(pronoun + 1, window)``; a sentence whose
antecedent lies outside the pronoun's window is not measurable (NaN score, baseline and
accuracy), and accuracy and ``distractor`` are NaN too where only the distractor lies outside
it (the head cannot attend to the distractor, so winning against it says nothing).  A unit
counts in the sign test and the interval only when all its items are measurable.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Sequence
from functools import lru_cache
from typing import cast

import numpy as np
import pandas as pd
import torch

from headlens.analyses.heads.detectors.base import BatchContext, Detector, DetectorOutput, uniform_weight
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.probes.attention import visible
from headlens.probes.engine import Sums

__all__ = [
    "DETECTOR",
    "DEFAULT_ALPHA",
    "MIN_PAIR_ACCURACY",
    "min_referent_prompts",
    "SPLIT_SEED",
    "REFERENT_COLUMNS",
    "REFERENT_TABLE_COLUMNS",
    "binomial_tail",
    "holm",
    "split_frames",
    "referent_statistics",
    "referent_passes",
    "referent_ratio",
    "chosen_on_selection",
]

#: Family-wise error rate of the sign test (Holm over heads); the detector's threshold.
DEFAULT_ALPHA = 0.05
#: Seed of the selection / held-out split of the sentence frames.
SPLIT_SEED = 0
#: Columns the census adds to the scores table when the referent detector runs (NaN on the
#: rows of other detectors).
REFERENT_COLUMNS = ["distractor", "pair_accuracy", "diff_ci_low", "diff_ci_high", "p_value", "heldout_accuracy"]
#: A referent head prefers the antecedent in both items of MORE than this share of the pairs.
MIN_PAIR_ACCURACY = 0.5


def min_referent_prompts(n_heads: int, alpha: float = DEFAULT_ALPHA) -> int:
    """The fewest sentences (2 per pair) with which a head could pass the sign test at all:
    with k pairs the smallest p is ``2**-k``, and Holm multiplies it by the number of heads
    tested, so ``k = ceil(log2(n_heads / alpha))`` (8 pairs for 8 heads, 12 for GPT-2's 144).
    The census never uses fewer referent sentences than this, whatever ``n_prompts`` says."""
    return 2 * max(1, math.ceil(math.log2(max(n_heads, 1) / alpha)))


#: Columns of the per-head referent table (``CensusRun.referent``).
REFERENT_TABLE_COLUMNS = [
    "layer", "head", "n_units", "wins", "losses", "ties", "accuracy", "pair_accuracy", "antecedent",
    "distractor", "baseline", "ci_low", "diff", "diff_ci_low", "diff_ci_high", "p_raw", "p_value",
    "select_n_units", "select_accuracy", "select_pair_accuracy", "select_ci_low", "select_diff_ci_low",
    "select_p_value", "heldout_accuracy", "heldout_n",
]  # fmt: skip


def partial(rows, ctx: BatchContext, q_offset: int) -> Sums:
    """``A[pronoun, antecedent]``, ``A[pronoun, distractor]`` and the win of each prompt whose
    pronoun lies in this block of queries (``count`` 1 there, else 0)."""
    if ctx.pronoun is None or ctx.antecedent is None or ctx.distractor is None:
        raise ValueError("the referent detector needs pronoun, antecedent and distractor positions")
    dev = rows.device
    n_rows = rows.shape[2]
    b_idx = torch.arange(rows.shape[0], device=dev)[:, None]
    heads = torch.arange(rows.shape[1], device=dev)[None, :]
    p, a, d = (t.to(dev)[:, None] for t in (ctx.pronoun, ctx.antecedent, ctx.distractor))
    here = (p >= q_offset) & (p < q_offset + n_rows)  # [batch, 1]
    local = (p - q_offset).clamp(0, n_rows - 1)
    pat = rows.float()
    to_ante = pat[b_idx, heads, local, a] * here
    to_dist = pat[b_idx, heads, local, d] * here
    return {"ante": to_ante, "dist": to_dist, "win": (to_ante > to_dist).float() * here, "count": here[:, 0].float()}


def finish(sums: Sums, ctx: BatchContext) -> DetectorOutput:
    dev = sums["ante"].device
    assert ctx.pronoun is not None and ctx.antecedent is not None and ctx.distractor is not None  # referent stimuli carry all three
    p, a, d = (t.to(dev)[:, None] for t in (ctx.pronoun, ctx.antecedent, ctx.distractor))
    count = sums["count"].clamp(min=1)[:, None]
    to_ante, to_dist, accuracy = ((sums[k] / count).float() for k in ("ante", "dist", "win"))
    causal = getattr(ctx, "causal", True)
    if causal:
        baseline = uniform_weight(p[:, 0], ctx.window)
    else:  # bidirectional (encoders): a uniform head gives 1/n to each of the prompt's n real keys
        baseline = uniform_weight(p[:, 0], None, causal=False, n_keys=ctx.lengths.to(dev))
    if causal and ctx.window is not None:
        seen = visible(p[:, 0], a[:, 0], window=ctx.window)  # [batch]
        both = seen & visible(p[:, 0], d[:, 0], window=ctx.window)
        nan = torch.tensor(float("nan"), device=dev)
        to_ante = torch.where(seen[:, None], to_ante, nan)
        baseline = torch.where(seen, baseline, nan)
        accuracy = torch.where(both[:, None], accuracy, nan)
        to_dist = torch.where(both[:, None], to_dist, nan)
    return DetectorOutput(to_ante, baseline, extra={"accuracy": accuracy, "distractor": to_dist})


DETECTOR = Detector(
    name="referent",
    stimulus="referent",
    threshold=DEFAULT_ALPHA,
    summary=(
        "A[pronoun, antecedent] on minimal pairs of pronoun sentences; accuracy = antecedent beats distractor; "
        "role: one-sided sign test over pairs with Holm-corrected p <= threshold, antecedent preferred in both items "
        "of more than half the pairs, antecedent - distractor CI above 0, and ci_low >= baseline factor x baseline"
    ),
    partial=partial,
    finish=finish,
    window_rule="a sentence counts only when its antecedent is inside the pronoun's window (accuracy: the distractor too)",
)


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def binomial_tail(k: int, n: int) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, 1/2)``, exactly (integer coefficients, one rounding)."""
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return sum(math.comb(n, j) for j in range(k, n + 1)) / 2**n


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (step-down, monotone, capped at 1) over every finite entry of
    ``p`` (any shape); NaN entries are not tested and stay NaN.  ``adjusted <= alpha`` is
    exactly Holm's rejection at family-wise level ``alpha``."""
    p = np.asarray(p, dtype=np.float64)
    flat = p.reshape(-1)
    out = np.full(flat.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(flat))
    m = len(idx)
    if m:
        order = idx[np.argsort(flat[idx], kind="stable")]
        scaled = flat[order] * (m - np.arange(m))
        out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out.reshape(p.shape)


def split_frames(frames: Sequence[str], kinds: Sequence[str] | None = None, seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """Split the distinct ``frames`` into ``(selection, heldout)``: within each kind (when
    ``kinds``, one per entry of ``frames``, is given), the sorted frames are shuffled with
    ``seed`` and every other one goes to the selection half (which gets the odd one)."""
    kind_of: dict[str, str] = {}
    for i, frame in enumerate(frames):
        kind_of.setdefault(frame, kinds[i] if kinds is not None else "")
    selection: list[str] = []
    heldout: list[str] = []
    for kind in sorted(set(kind_of.values())):
        group = sorted(f for f, k in kind_of.items() if k == kind)
        random.Random(f"{seed}:{kind}").shuffle(group)
        selection += group[0::2]
        heldout += group[1::2]
    return sorted(selection), sorted(heldout)


def _unit_index(units: Sequence[str]) -> np.ndarray:
    """``units[i]`` (a pair id, or "" for an item on its own) -> a unit number per item."""
    ids: dict[str, int] = {}
    out = np.empty(len(units), dtype=np.int64)
    for i, unit in enumerate(units):
        key = unit if unit else f"\0{i}"
        out[i] = ids.setdefault(key, len(ids))
    return out


def _by_unit(values: np.ndarray, unit: np.ndarray, n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum over each unit's items of ``values`` ``[item, ...]``, and whether all of them are finite."""
    total = np.zeros((n_units, *values.shape[1:]))
    missing = np.zeros((n_units, *values.shape[1:]))
    np.add.at(total, unit, np.nan_to_num(values, nan=0.0))
    np.add.at(missing, unit, np.isnan(values).astype(np.float64))
    return total, missing == 0


def _rule_stats(to_ante: np.ndarray, to_dist: np.ndarray, unit: np.ndarray, *, n_bootstrap: int, seed: int) -> dict[str, np.ndarray]:
    """Sign test, antecedent interval and difference interval over the units of these items."""
    _, unit = np.unique(unit, return_inverse=True)
    n_units = int(unit.max()) + 1 if len(unit) else 0
    shape = to_ante.shape[1:]
    if n_units == 0:
        nan = np.full(shape, np.nan)
        zero = np.zeros(shape, dtype=np.int64)
        return {"n_units": zero, "wins": zero, "losses": zero, "ties": zero, "pair_accuracy": nan, "p_raw": nan,
                "p_value": nan, "ci_low": nan, "diff": nan, "diff_ci_low": nan, "diff_ci_high": nan}  # fmt: skip
    diff = to_ante - to_dist
    signs, complete = _by_unit(np.sign(diff), unit, n_units)
    wins = ((signs > 0) & complete).sum(0)
    losses = ((signs < 0) & complete).sum(0)
    ties = ((signs == 0) & complete).sum(0)
    measured = complete.sum(0)
    p_raw = np.full(shape, np.nan)
    for cell in np.ndindex(*shape):
        if measured[cell]:
            p_raw[cell] = binomial_tail(int(wins[cell]), int(wins[cell] + losses[cell]))
    counts = np.bincount(unit, minlength=n_units).reshape(n_units, *([1] * len(shape)))
    diff_sum, _ = _by_unit(diff, unit, n_units)
    unit_diff = np.where(complete, diff_sum / counts, np.nan)
    ante_sum, ante_ok = _by_unit(to_ante, unit, n_units)
    unit_ante = np.where(ante_ok, ante_sum / counts, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN cell's interval and mean are NaN
        # one draw of resamples for both (each column's interval is its own, bit for bit)
        (diff_low, ante_low), (diff_high, _) = bootstrap_mean_ci(
            np.stack([unit_diff, unit_ante], axis=1), n_resamples=n_bootstrap, seed=seed
        )
        mean_diff = np.nanmean(unit_diff, axis=0)
    return {
        "n_units": measured,
        "wins": wins,
        "losses": losses,
        "ties": ties,
        "pair_accuracy": np.where(measured > 0, wins / np.maximum(measured, 1), np.nan),
        "p_raw": p_raw,
        "p_value": holm(p_raw),
        "ci_low": ante_low,
        "diff": mean_diff,
        "diff_ci_low": diff_low,
        "diff_ci_high": diff_high,
    }


def _nanmean0(values: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=0) if len(values) else np.full(values.shape[1:], np.nan)


def referent_statistics(
    to_ante: np.ndarray,
    to_dist: np.ndarray,
    accuracy: np.ndarray,
    baseline: np.ndarray,
    units: Sequence[str],
    frames: Sequence[str],
    kinds: Sequence[str] | None = None,
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    split_seed: int = SPLIT_SEED,
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The referent table (:data:`REFERENT_TABLE_COLUMNS`, one row per head) and the frame split.

    ``to_ante``, ``to_dist`` and ``accuracy`` are ``[item, layer, head]`` (NaN: not measurable),
    ``baseline`` ``[item, layer]``; ``units[i]`` is item i's pair id ("" when it has none) and
    ``frames[i]`` its frame ("" when unknown: the item is then a frame of its own).  The Holm
    correction runs over every head with a measured unit; bootstrap resamples units.
    """
    to_ante, to_dist, accuracy = (np.asarray(x, dtype=np.float64) for x in (to_ante, to_dist, accuracy))
    n, L, H = to_ante.shape
    if not (len(units) == len(frames) == n):
        raise ValueError(f"{n} items but {len(units)} unit ids and {len(frames)} frames")
    unit = _unit_index(units)
    frames = [f if f else f"\0{u}" for f, u in zip(frames, unit, strict=True)]  # no frame: the unit is its own frame
    full = _rule_stats(to_ante, to_dist, unit, n_bootstrap=n_bootstrap, seed=seed)
    selection, heldout = split_frames(frames, kinds, split_seed)
    in_sel = np.isin(np.asarray(frames, dtype=object), np.asarray(selection, dtype=object))
    sel = _rule_stats(to_ante[in_sel], to_dist[in_sel], unit[in_sel], n_bootstrap=n_bootstrap, seed=seed)
    held_acc = accuracy[~in_sel]
    columns = {
        "n_units": full["n_units"],
        "wins": full["wins"],
        "losses": full["losses"],
        "ties": full["ties"],
        "accuracy": _nanmean0(accuracy),
        "pair_accuracy": full["pair_accuracy"],
        "antecedent": _nanmean0(to_ante),
        "distractor": _nanmean0(to_dist),
        "baseline": np.broadcast_to(_nanmean0(np.asarray(baseline, dtype=np.float64))[:, None], (L, H)),
        "ci_low": full["ci_low"],
        "diff": full["diff"],
        "diff_ci_low": full["diff_ci_low"],
        "diff_ci_high": full["diff_ci_high"],
        "p_raw": full["p_raw"],
        "p_value": full["p_value"],
        "select_n_units": sel["n_units"],
        "select_accuracy": _nanmean0(accuracy[in_sel]),
        "select_pair_accuracy": sel["pair_accuracy"],
        "select_ci_low": sel["ci_low"],
        "select_diff_ci_low": sel["diff_ci_low"],
        "select_p_value": sel["p_value"],
        "heldout_accuracy": _nanmean0(held_acc),
        "heldout_n": np.isfinite(held_acc).sum(0),
    }
    layer, head = np.meshgrid(np.arange(L), np.arange(H), indexing="ij")
    table = pd.DataFrame({"layer": layer.ravel(), "head": head.ravel(), **{k: np.asarray(v).ravel() for k, v in columns.items()}})
    for col in ("n_units", "wins", "losses", "ties", "select_n_units", "heldout_n"):
        table[col] = table[col].astype(int)
    return table[REFERENT_TABLE_COLUMNS], {
        "selection": [f for f in selection if not f.startswith("\0")],
        "heldout": [f for f in heldout if not f.startswith("\0")],
    }


def referent_passes(
    rows: pd.DataFrame, alpha: float | pd.Series = DEFAULT_ALPHA, baseline_factor: float = 2.0, *, on: str = "full"
) -> pd.Series:
    """Whether each row (of the scores table or the referent table) meets the referent rule:
    ``p_value <= alpha``, ``pair_accuracy > MIN_PAIR_ACCURACY``, ``diff_ci_low > 0`` and
    ``ci_low >= baseline_factor * baseline`` (``on="selection"``: the ``select_*`` columns of
    the referent table).  ``alpha`` is a number or a per-row Series.  A missing column or NaN
    never passes."""
    prefix = "select_" if on == "selection" else ""
    need = [prefix + "p_value", prefix + "pair_accuracy", prefix + "diff_ci_low", prefix + "ci_low", "baseline"]
    if any(col not in rows for col in need):
        return pd.Series(False, index=rows.index)
    p, pair_acc, diff_low, low, base = (rows[col].astype(float) for col in need)
    ok = p.notna() & pair_acc.notna() & diff_low.notna() & low.notna() & base.notna()
    return ok & (p <= alpha) & (pair_acc > MIN_PAIR_ACCURACY) & (diff_low > 0) & (low >= baseline_factor * base)


def referent_ratio(rows: pd.DataFrame, alpha: float | pd.Series = DEFAULT_ALPHA, baseline_factor: float = 2.0) -> pd.Series:
    """How close each row is to the referent rule, as a fraction that reaches 1 where the
    weakest criterion just passes: the minimum of ``log p / log alpha``,
    ``pair_accuracy / MIN_PAIR_ACCURACY`` and ``ci_low / (baseline_factor * baseline)``
    (NaN where a column is missing).  ``classify_heads`` ranks a head's strongest detector by it."""
    need = ["p_value", "pair_accuracy", "ci_low", "baseline"]
    if any(col not in rows for col in need):
        return pd.Series(np.nan, index=rows.index)
    p, pair_acc, low, base = (rows[col].astype(float) for col in need)
    with np.errstate(divide="ignore", invalid="ignore"):
        parts = pd.concat(
            [cast(pd.Series, np.log(p)) / np.log(alpha), pair_acc / MIN_PAIR_ACCURACY, low / (baseline_factor * base)], axis=1
        )
    return parts.min(axis=1, skipna=False)


def chosen_on_selection(table: pd.DataFrame, alpha: float = DEFAULT_ALPHA, baseline_factor: float = 2.0) -> pd.DataFrame:
    """Heads the rule picks on the selection half of the frames, with their accuracy on the
    held-out half: ``name, select_accuracy, select_pair_accuracy, select_p_value, heldout_accuracy,
    heldout_n``."""
    chosen = table[referent_passes(table, alpha, baseline_factor, on="selection")]
    out = chosen.assign(name=[f"{layer}.{head}" for layer, head in zip(chosen["layer"], chosen["head"], strict=True)])
    cols = ["name", "select_accuracy", "select_pair_accuracy", "select_p_value", "heldout_accuracy", "heldout_n"]
    return out[cols].reset_index(drop=True)
