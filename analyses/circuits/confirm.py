"""Exact confirmation of an estimate: the top of its ranking, a random sample outside it, and how estimate and exact compare.

:func:`confirm_edges` patches exactly (:func:`~headlens.analyses.circuits.exact.exact_scores`, on
the pairs that scored the edges) the top ``confirm`` edges of the circuit and ``confirm_sample``
edges drawn at random (seeded) from the rest of the ranking: the top alone never checks an edge
the estimate ranks low.  A sampled edge whose ``|exact|`` exceeds the smallest ``|exact|`` of the
confirmed top and is not negligible (at least :data:`AGREE_FLOOR`, the floor below which two edges
agree) is *missed*: the ranking put it below edges that carry less.  Without the floor, a top that
reaches down to negligible edges (the smallest at 0.0002 of the gap) would call every sampled edge
of 0.0003 missed, while no edge of the exact circuit was.

Comparison (:func:`compare`), where both values are finite (NaN scores compare as nothing):

* an exact value within the resolution of a float32 forward (:func:`~headlens.analyses.circuits.resolution.share_resolution`)
  is ``exact ~ 0`` (``exact_near_zero``): no ratio is taken over it;
* ``disagree``: the signs differ or the 95% intervals do not overlap, unless both values are below
  :data:`AGREE_FLOOR` of the gap (two negligible edges agree, whatever their noise says);
* ``estimate_over_exact``: the ratio, NaN at ``exact ~ 0``; an edge is *off* when the ratio is
  beyond :data:`OFF_FACTOR` either way, or exact ~ 0 under an estimate of at least
  :data:`AGREE_FLOOR`, and not both below the floor.

Intervals and stability describe resampling of the pairs, not the estimator's bias: an estimate
can sit at stability 1.00 with a tight interval and the wrong sign (plain EAP on the planted
circuit).  :func:`confirmation_summary` records the comparison for the manifest.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.resolution import share_resolution
from headlens.analyses.circuits.scores import PerPair
from headlens.analyses.circuits.summary import carried, edge_table
from headlens.analyses.measure.stats import wilson
from headlens.analyses.patching.pairs import PairTask
from headlens.probes.loading import LoadedModel
from headlens.probes.progress import Progress, stage_step

log = logging.getLogger(__name__)

__all__ = ["AGREE_FLOOR", "OFF_FACTOR", "SAMPLE_STREAM", "compare", "confirm_edges", "confirmation_summary", "edge_name", "sample_outside"]

#: Both estimate and exact below this share of the gap (in absolute value): they agree, whatever their signs.
AGREE_FLOOR = 0.01
#: A confirmed estimate more than this factor off its exact value (either way) is called off.
OFF_FACTOR = 2.0
#: Second word of the random sample's seed (``default_rng([seed, SAMPLE_STREAM])``): a stream apart from the bootstrap's.
SAMPLE_STREAM = 46


def edge_name(row: Any) -> str:
    return f"{row['sender']} -> {row['receiver']} ({row['input']})"


def sample_outside(order: np.ndarray, n_top: int, n_sample: int, seed: int) -> np.ndarray:
    """``n_sample`` edge ids drawn without replacement from ``order[n_top:]`` (seeded), sorted."""
    rest = np.asarray(order)[n_top:]
    if n_sample <= 0 or not len(rest):
        return rest[:0]
    rng = np.random.default_rng([int(seed), SAMPLE_STREAM])
    return np.sort(rng.choice(rest, size=min(int(n_sample), len(rest)), replace=False))


def compare(est: np.ndarray, est_ci: tuple[np.ndarray, np.ndarray], ex: np.ndarray, ex_ci: tuple[np.ndarray, np.ndarray], floor: float):
    """``(disagree, ratio, near_zero, off)`` of estimates against exact values (module doc), elementwise."""
    est, ex = np.asarray(est, dtype=float), np.asarray(ex, dtype=float)
    finite = np.isfinite(est) & np.isfinite(ex)
    near_zero = finite & (np.abs(ex) <= floor)
    small = (np.abs(est) < AGREE_FLOOR) & (np.abs(ex) < AGREE_FLOOR)
    apart = (est_ci[1] < ex_ci[0]) | (ex_ci[1] < est_ci[0])
    ex_sign = np.where(near_zero, 0.0, np.sign(ex))
    disagree = finite & ~small & ((np.sign(est) != ex_sign) | apart)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(finite & ~near_zero, est / np.where(near_zero, 1.0, ex), np.nan)
    far = np.isfinite(ratio) & ((np.abs(ratio) > OFF_FACTOR) | (np.abs(ratio) < 1 / OFF_FACTOR))
    off = ~small & (far | (near_zero & (np.abs(est) >= AGREE_FLOOR)))
    return disagree, ratio, near_zero, off


def confirm_edges(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    table: pd.DataFrame,
    order: np.ndarray,
    n_top: int,
    config: CircuitConfig,
    progress: Progress | None = None,
) -> tuple[PerPair | None, np.ndarray]:
    """Patch the top ``n_top`` edges of ``order`` and a random sample of the rest exactly; fill ``table``'s
    exact columns, ``confirmed`` (``"top"``/``"sample"``), ``disagree``, ``estimate_over_exact``,
    ``exact_near_zero`` and ``off_exact``.  Returns the exact run (None when nothing was confirmed) and the sample's ids."""
    top = np.asarray(order)[:n_top]
    sample = sample_outside(order, n_top, config.confirm_sample, config.seed)
    ids = np.concatenate([top, sample]).astype(np.int64)
    if not len(ids):
        return None, sample
    step = stage_step(progress, "confirmation")  # exact patching's progress, under this stage's name
    ex = exact_scores(
        model, task, graph, ids, direction=config.direction, batch_size=config.batch_size, max_rows=config.max_rows,
        progress=None if step is None else lambda _stage, done, total: step(done, total),
    )  # fmt: skip
    et = edge_table(graph, ex, n_bootstrap=config.n_bootstrap, seed=config.seed)
    table.loc[ids, "exact"] = et["score"].to_numpy()
    table.loc[ids, "exact_ci_low"] = et["ci_low"].to_numpy()
    table.loc[ids, "exact_ci_high"] = et["ci_high"].to_numpy()
    table.loc[top, "confirmed"] = "top"
    table.loc[sample, "confirmed"] = "sample"
    _, g = carried(ex)
    floor = share_resolution(ex.clean, ex.corrupt, float(np.mean(g)) if len(g) else float("nan"))
    t = table.loc[ids]
    dis, ratio, near, off = compare(
        t["score"].to_numpy(dtype=float), (t["ci_low"].to_numpy(dtype=float), t["ci_high"].to_numpy(dtype=float)),
        t["exact"].to_numpy(dtype=float), (t["exact_ci_low"].to_numpy(dtype=float), t["exact_ci_high"].to_numpy(dtype=float)), floor,
    )  # fmt: skip
    table.loc[ids, "disagree"] = dis
    table.loc[ids, "estimate_over_exact"] = ratio
    table.loc[ids, "exact_near_zero"] = near
    table.loc[ids, "off_exact"] = off
    ex.info["share_resolution"] = floor
    return ex, sample


def confirmation_summary(table: pd.DataFrame, n_top: int, sample: np.ndarray, floor: float | None, seed: int) -> dict[str, Any]:
    """For the manifest: the confirmed top's disagreements and edges off exact (each named, with its ratio or
    ``exact ~ 0``), and the random sample outside the top with the edges it found missed."""
    top = table[table["confirmed"] == "top"].sort_values("rank")

    def named(rows: pd.DataFrame) -> list[dict[str, Any]]:
        return [
            {
                "edge": edge_name(r),
                "rank": int(r["rank"]),
                "estimate": float(r["score"]),
                "exact": float(r["exact"]),
                "ratio": None if bool(r["exact_near_zero"]) else float(r["estimate_over_exact"]),
                "exact_near_zero": bool(r["exact_near_zero"]),
                "stability": float(r["stability"]),
            }
            for r in rows.to_dict("records")
        ]

    out: dict[str, Any] = {
        "n_top": int(n_top),
        "agree_floor": AGREE_FLOOR,
        "off_factor": OFF_FACTOR,
        "share_resolution": floor,
        "disagree": named(top[top["disagree"].astype(bool)]),
        "off": named(top[top["off_exact"].astype(bool)]),
        "exact_near_zero": int(top["exact_near_zero"].astype(bool).sum()),
    }
    smp = table.loc[np.asarray(sample, dtype=np.int64)]
    top_exact = np.abs(top["exact"].to_numpy(dtype=float))
    smallest = float(np.nanmin(top_exact)) if np.isfinite(top_exact).any() else float("nan")  # all NaN: no gap to share
    size = np.abs(smp["exact"].to_numpy(dtype=float))
    above = (size > smallest) & (size >= AGREE_FLOOR) & ~smp["exact_near_zero"].to_numpy(dtype=bool)
    missed = smp[above] if np.isfinite(smallest) else smp.iloc[:0]
    n_rest = len(table) - int(n_top)
    out["sample"] = {
        "n": len(smp),
        "outside": n_rest,
        "seed": int(seed),
        "seed_stream": SAMPLE_STREAM,
        "smallest_top_exact": smallest,
        "missed_floor": AGREE_FLOOR,  # a missed edge carries at least this much (and more than the smallest top edge)
        "n_missed": len(missed),
        "missed": named(missed.sort_values("exact", key=np.abs, ascending=False)),
        "estimated_missed": float(len(missed) / len(smp) * n_rest) if len(smp) else None,
    }
    low, high = wilson(len(missed), len(smp))  # the rate's 95% interval: the count outside the top is a range
    out["sample"]["missed_rate_ci"] = [low, high]
    out["sample"]["estimated_missed_range"] = [low * n_rest, high * n_rest] if len(smp) else None
    return out
