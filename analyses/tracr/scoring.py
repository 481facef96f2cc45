"""Circuit discovery scored against a tracr model's compiled edges: clean/corrupt pairs from the program's
input space, every edge scored by each method, edge ROC AUC against ``ground_truth.json``.

Pairs (:func:`tracr_pairs`): every input of the program's full length and every one-token substitution of
it whose last-position RASP output is defined on both sides and differs; ``n_pairs`` of them drawn with a
seeded generator.  The answers are the two RASP output words, so the metric (logit difference at the last
position) is the program's own decision.  An edge's score is the mean over pairs of its metric change
(:func:`headlens.analyses.circuits.run.score_edges`); the AUC ranks ``|score|``
(:func:`headlens.analyses.circuits.roc.edge_roc_auc`).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.roc import edge_roc_auc
from headlens.analyses.circuits.run import score_edges
from headlens.analyses.patching.pairs import PairItem, PairTask, tokenize_pairs
from headlens.analyses.tracr.convert import word_of
from headlens.analyses.tracr.ground_truth import true_edges, varying_edges
from headlens.analyses.tracr.programs import ProgramSpec, rasp_outputs
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

__all__ = ["tracr_pairs", "tracr_task", "edge_scores", "auc_interval", "score_methods"]


def tracr_pairs(
    spec: ProgramSpec, program: Any, *, numerical: bool, n_pairs: int = 32, seed: int = 0, every_length: bool = False
) -> list[PairItem]:
    """Clean/corrupt pairs of full-length inputs (``every_length``: of every length 1 .. max_seq_len) differing in one
    token, whose last outputs differ (see the module doc)."""
    n = spec.max_seq_len
    lengths = range(1, n + 1) if every_length else [n]
    last = {x: rasp_outputs(program, spec, x)[-1] for k in lengths for x in itertools.product(spec.vocab, repeat=k)}
    candidates: list[PairItem] = []
    for x, out in last.items():
        if out is None:
            continue
        for i in range(len(x)):
            for w in spec.vocab:
                if w == x[i]:
                    continue
                y = (*x[:i], w, *x[i + 1 :])
                alt = last[y]
                a, b = word_of(out, numerical=numerical), None if alt is None else word_of(alt, numerical=numerical)
                if b is not None and a != b:
                    candidates.append(PairItem(" ".join(map(str, x)), " ".join(map(str, y)), a, b, where=f"substitution {i}"))
    if not candidates:
        raise InputError(f"program {spec.name!r} has no pair of inputs whose last outputs differ")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(candidates), size=min(n_pairs, len(candidates)), replace=False)
    return [candidates[int(k)] for k in sorted(pick)]


def tracr_task(
    model: LoadedModel, spec: ProgramSpec, program: Any, *, numerical: bool, n_pairs: int = 32, seed: int = 0, every_length: bool = False
) -> PairTask:
    items = tracr_pairs(spec, program, numerical=numerical, n_pairs=n_pairs, seed=seed, every_length=every_length)
    source = {"kind": "tracr", "program": spec.name, "n_pairs": len(items), "seed": seed, "every_length": every_length}
    return tokenize_pairs(model, items, source=source)


def edge_scores(model: LoadedModel, task: PairTask, config: CircuitConfig) -> tuple[pd.DataFrame, np.ndarray, float]:
    """Every edge's mean metric change over the pairs under ``config.method``, the per-pair values
    ``[pair, edge]`` (rows of the table) and the wall time (s)."""
    graph = build_graph(model)
    t0 = time.perf_counter()
    per_pair = score_edges(model, task, graph, config)
    wall = time.perf_counter() - t0
    table = graph.edges[["sender", "receiver", "input"]].iloc[per_pair.edge_ids].reset_index(drop=True)
    table["score"] = per_pair.values.mean(axis=0)
    return table, np.asarray(per_pair.values, dtype=float), wall


def auc_interval(
    table: pd.DataFrame, values: np.ndarray, truth: set[tuple[str, str, str]], *, n_bootstrap: int, seed: int
) -> tuple[float, float]:
    """Percentile 95% interval of the AUC over pairs resampled with replacement (the edge scores re-averaged)."""
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    aucs = []
    for _ in range(n_bootstrap):
        t = table.copy()
        t["score"] = values[rng.integers(0, n, size=n)].mean(axis=0)
        aucs.append(edge_roc_auc(t, truth))
    a = np.asarray(aucs, dtype=float)
    a = a[np.isfinite(a)]
    if not len(a):
        return float("nan"), float("nan")
    return float(np.quantile(a, 0.025)), float(np.quantile(a, 0.975))


def score_methods(
    model: LoadedModel, truth: dict[str, Any], task: PairTask, methods: tuple[str, ...] = ("eap", "eap-ig", "exact"),
    *, n_bootstrap: int = 200, seed: int = 0,
) -> pd.DataFrame:  # fmt: skip
    """One row per method: edge ROC AUC against all compiled edges (``auc``) and against the input-dependent ones
    (``auc_varying``: constant true edges left out) with its 95% bootstrap interval over pairs
    (``auc_varying_low``/``_high``), the edge counts, wall time."""
    edges, varying = true_edges(truth), varying_edges(truth)
    rows = []
    for method in methods:
        table, values, wall = edge_scores(model, task, CircuitConfig(method=method))
        # Against every compiled edge, and against those whose signal changes between inputs (the rest are
        # constant -- BOS, `one`, positions -- and invisible to any patch); the false edges are the same.
        keep = np.array([k not in edges or k in varying for k in zip(table["sender"], table["receiver"], table["input"], strict=True)])
        kept = table[keep]
        low, high = auc_interval(kept.reset_index(drop=True), values[:, keep], varying, n_bootstrap=n_bootstrap, seed=seed)
        rows.append({"program": truth["program"]["name"], "method": method, "auc": edge_roc_auc(table, edges),
                     "auc_varying": edge_roc_auc(kept, varying), "auc_varying_low": low, "auc_varying_high": high,
                     "n_edges": len(table), "n_true": len(edges),
                     "n_varying": len(varying), "n_pairs": len(task), "wall_s": wall})  # fmt: skip
    return pd.DataFrame(rows)
