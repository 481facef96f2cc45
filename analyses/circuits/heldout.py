"""Choosing a circuit on some pairs and measuring it on the others.

A circuit's faithfulness measured on the pairs that scored its edges and picked its size is
in-sample: the choice fits those pairs' noise, and the bootstrap interval over them holds the
circuit fixed, so it does not cover the choice.  :func:`split_pairs` splits the pairs once, by a
seeded permutation: ``held_out`` of them (rounded) are set aside, the rest choose the circuit
(edge scores, ranking, size, stability, exact confirmation), and the held-out pairs measure the
chosen circuit's faithfulness curve.  Both sides need :data:`MIN_SPLIT_PAIRS` pairs; with fewer
(or ``held_out=0``) every pair chooses and measures, and :attr:`PairSplit.reason` says why (the
run logs it and keeps it in its notes and manifest).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.faithfulness import faithfulness_curve
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.patching.pairs import PairTask
from headlens.probes.loading import LoadedModel
from headlens.probes.progress import Progress

log = logging.getLogger(__name__)

__all__ = [
    "HELD_OUT_COLUMNS",
    "MIN_SPLIT_PAIRS",
    "READABLE_SIZES",
    "PairSplit",
    "faithfulness_at",
    "split_sizes",
    "held_out_curve",
    "readable_at",
    "split_pairs",
    "subset",
]

#: Fewest pairs on either side of a split: below it the held-out interval (or the choice) rests on too few pairs.
MIN_SPLIT_PAIRS = 8
#: Columns the held-out pairs add to the faithfulness curve (NaN without a split).
HELD_OUT_COLUMNS = ["held_out", "held_out_ci_low", "held_out_ci_high"]
#: Circuit sizes a person can read, always measured on the curve: the faithfulness of the top n edges is reported
#: beside the size that reaches the target (:func:`readable_at`), which on a real model is thousands of edges.
READABLE_SIZES: tuple[int, ...] = (10, 20, 50, 100, 200)


@dataclass(frozen=True)
class PairSplit:
    """``choose``: the pairs that score the edges and pick the circuit; ``held_out``: those that measure it
    (empty when there is no split, ``reason`` then says why)."""

    n_pairs: int
    share: float
    seed: int
    choose: np.ndarray
    held_out: np.ndarray
    reason: str | None = None

    @property
    def held(self) -> bool:
        return len(self.held_out) > 0

    def describe(self) -> dict[str, Any]:
        """For the manifest: the rule, its seed and sizes, and the pairs on each side (indices into the task)."""
        out: dict[str, Any] = {
            "rule": "seeded permutation of the pairs (numpy default_rng(seed)); the first n_held_out are held out",
            "share": self.share,
            "seed": self.seed,
            "n_pairs": self.n_pairs,
            "n_choose": len(self.choose),
            "n_held_out": len(self.held_out),
            "choose": [int(i) for i in self.choose],
            "held_out": [int(i) for i in self.held_out],
            "in_sample": not self.held,
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def split_sizes(n_pairs: int, share: float) -> tuple[int, int]:
    """``(choosing, held out)`` pair counts of :func:`split_pairs`'s rule (without drawing the split, and without its note)."""
    n_held = round(float(share) * n_pairs)
    if share <= 0 or min(n_held, n_pairs - n_held) < MIN_SPLIT_PAIRS:
        return n_pairs, 0
    return n_pairs - n_held, n_held


def split_pairs(n_pairs: int, share: float, seed: int) -> PairSplit:
    """Split ``n_pairs`` pairs: ``round(share * n_pairs)`` held out, at random (``seed``); no split (every pair
    chooses and measures) when ``share`` is 0 or either side would hold fewer than :data:`MIN_SPLIT_PAIRS`."""
    every = np.arange(n_pairs)
    _, n_held = split_sizes(n_pairs, share)
    reason = None
    if share <= 0:
        reason = "held_out=0: faithfulness measured in-sample, on the pairs that chose the circuit"
    elif n_held == 0:
        need = int(np.ceil(MIN_SPLIT_PAIRS / min(float(share), 1 - float(share))))
        reason = (
            f"{n_pairs} pairs are too few to hold out {share:g} of them (each side needs {MIN_SPLIT_PAIRS}): faithfulness "
            f"measured in-sample, on the pairs that chose the circuit (give at least {need} pairs for a held-out figure)"
        )
    if reason is not None:
        log.warning("%s", reason)
        return PairSplit(n_pairs, float(share), int(seed), every, every[:0], reason)
    perm = np.random.default_rng(seed).permutation(n_pairs)
    return PairSplit(n_pairs, float(share), int(seed), np.sort(perm[n_held:]), np.sort(perm[:n_held]))


def subset(task: PairTask, rows: np.ndarray) -> PairTask:
    """The pairs ``rows`` of ``task`` (same width and framing; the source records the rows)."""
    idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
    return replace(
        task,
        clean=task.clean[idx],
        corrupt=task.corrupt[idx],
        lengths=task.lengths[idx],
        correct=task.correct[idx],
        incorrect=task.incorrect[idx],
        source={**task.source, "rows": [int(i) for i in rows]},
    )


def held_out_curve(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    order: np.ndarray,
    curve: pd.DataFrame,
    config: CircuitConfig,
    ablation: Any = None,
    progress: Progress | None = None,
) -> pd.DataFrame:
    """``curve`` (measured on the pairs that chose the ranking) with the same sizes measured on the held-out ``task``
    (``ablation``: what the edges outside carry, :mod:`~headlens.analyses.circuits.ablation_kinds`; ``progress``: its
    steps as ``"held-out faithfulness"``)."""
    sizes = [int(n) for n in curve["n_edges"]]
    step = None if progress is None else lambda _stage, done, total: progress("held-out faithfulness", done, total)
    held, _, _ = faithfulness_curve(model, task, graph, order, sizes, batch_size=config.batch_size, n_bootstrap=config.n_bootstrap,
                                    seed=config.seed, ablation=ablation, progress=step)  # fmt: skip
    out = curve.copy()
    out["held_out"] = held["faithfulness"].to_numpy()
    out["held_out_ci_low"] = held["ci_low"].to_numpy()
    out["held_out_ci_high"] = held["ci_high"].to_numpy()
    return out


def faithfulness_at(curve: pd.DataFrame, n: int, split: PairSplit) -> dict[str, Any]:
    """The summary's faithfulness of the ``n``-edge circuit: ``circuit_faithfulness`` (held-out where the pairs were
    split, else in-sample), ``faithfulness_measured_on``, ``held_out`` and ``in_sample`` (each with its interval and
    pair count; ``held_out`` None without a split) and ``split`` (:meth:`PairSplit.describe`)."""
    row = curve[curve["n_edges"] == n]
    r = row.iloc[0] if len(row) else None

    def at(col: str, low: str, high: str, n_pairs: int) -> dict[str, Any]:
        get = lambda c: float(r[c]) if r is not None and c in r else float("nan")  # noqa: E731
        return {"faithfulness": get(col), "ci_low": get(low), "ci_high": get(high), "n_pairs": n_pairs}

    inside = at("faithfulness", "ci_low", "ci_high", len(split.choose))
    held = at("held_out", "held_out_ci_low", "held_out_ci_high", len(split.held_out)) if split.held else None
    return {
        "circuit_faithfulness": (held or inside)["faithfulness"],
        "faithfulness_measured_on": "held-out pairs" if held else "the pairs that chose the circuit (in-sample)",
        "held_out": held,
        "in_sample": inside,
        "split": split.describe(),
    }


def readable_at(curve: pd.DataFrame, split: PairSplit, sizes: tuple[int, ...] = READABLE_SIZES) -> list[dict[str, Any]]:
    """The faithfulness of the top ``n`` edges for each ``n`` of ``sizes`` on the curve (sizes above the graph left
    out): ``faithfulness`` with its interval in-sample, ``held_out`` with its interval (None without a split)."""
    c = curve.drop_duplicates("n_edges").set_index("n_edges")
    out: list[dict[str, Any]] = []
    for n in sizes:
        if n not in c.index:
            continue
        r = c.loc[n]
        row: dict[str, Any] = {"n_edges": int(n), **{k: float(r[k]) for k in ("faithfulness", "ci_low", "ci_high")}}
        held = split.held and "held_out" in r
        row["held_out"] = (
            {k: float(r[f"held_out{s}"]) for k, s in (("faithfulness", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))}
            if held
            else None
        )
        out.append(row)
    return out
