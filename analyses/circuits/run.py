"""A circuit run: edge scores with intervals and stability, the faithfulness curve, the circuit, exact confirmation.

:func:`run_circuit` splits the pairs (:mod:`~headlens.analyses.circuits.heldout`: by default half,
seeded, choose the circuit and the other half measure it; with too few pairs every pair does
both, with a note), scores every edge of the graph on the choosing pairs
(:mod:`~headlens.analyses.circuits.scores` for ``eap``/``eap-ig``,
:mod:`~headlens.analyses.circuits.exact` for ``exact``), measures the faithfulness curve of the
ranking on them (:mod:`~headlens.analyses.circuits.faithfulness`), picks the circuit (``top_n``,
``threshold``, or else the smallest measured size reaching ``target_faithfulness``: the curve is
refined by bisection between the last measured size below the target and the first one at or
above it, which finds the smallest size when faithfulness grows with the size between those two
points; every size it measures joins the curve), then computes stability for that selection
rule (a circuit chosen by ``target_faithfulness`` is resampled as the ``top_n`` rule at the
chosen size: the size is not searched again), confirms the top ``confirm`` edges of the circuit
and a random sample of ``confirm_sample`` others by exact patching
(:mod:`~headlens.analyses.circuits.confirm`: ``disagree``, ``estimate_over_exact``, ``exact ~
0``, the edges the ranking missed; the two together are a stratified sample, on which the estimate's AUROC
and rank agreement against exact patching are ``summary["against_exact"]``,
:mod:`~headlens.analyses.circuits.against_exact`), and measures the same curve on the held-out pairs: the
circuit's faithfulness (``summary["circuit_faithfulness"]``) is theirs, the in-sample figure
beside it.  The smallest size reaching the target is a point estimate on the pairs that ranked
the edges (in-sample): :func:`reach_evidence` records its interval, smaller sizes whose
intervals also include the target, and whether the measured curve is monotone (the bisection's
assumption).  A threshold no edge reaches gives an empty circuit, with a note.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.ablation_kinds import Ablation, ablated_exact_scores, ablation_for
from headlens.analyses.circuits.against_exact import EdgeSample, against_exact
from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.confirm import confirm_edges, confirmation_summary
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.exact_chunks import chunked, configured_scores
from headlens.analyses.circuits.faithfulness import circuit_values, curve_points, curve_summary, faithfulness_curve
from headlens.analyses.circuits.graph import EdgeGraph, build_graph
from headlens.analyses.circuits.ground_truth import read_truth, truth_auc
from headlens.analyses.circuits.heldout import READABLE_SIZES, faithfulness_at, held_out_curve, readable_at, split_pairs, subset
from headlens.analyses.circuits.method_choice import SPLIT_CREDIT, choose_method
from headlens.analyses.circuits.mib import mib_metrics
from headlens.analyses.circuits.scores import PerPair, attribution_scores
from headlens.analyses.circuits.summary import carried, edge_table, gap_of, ranking
from headlens.analyses.circuits.writes import HEAD_SUM_NORM_NOTE
from headlens.analyses.patching.effects import normalised_effects
from headlens.analyses.patching.pairs import PairTask
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

#: A fall of the measured faithfulness curve larger than this (0 corrupted .. 1 clean) makes it not monotone; smaller is noise.
MONOTONE_TOLERANCE = 0.01

__all__ = ["MONOTONE_TOLERANCE", "CircuitRun", "reach_evidence", "run_circuit", "score_edges", "smallest_reaching"]


@dataclass
class CircuitRun:
    edges: pd.DataFrame
    faithfulness: pd.DataFrame
    summary: dict[str, Any]
    config: CircuitConfig
    notes: list[str] = field(default_factory=list)
    graph: EdgeGraph | None = None


def score_edges(
    model: LoadedModel, task: PairTask, graph: EdgeGraph, config: CircuitConfig, progress: Any = None, *, ablation: Any = None
) -> PerPair:
    """Every edge's per-pair score under ``config``; ``config.ablation`` mean or zero: exact, against that ablation
    (:func:`~headlens.analyses.circuits.ablation_kinds.ablated_exact_scores`; ``ablation``: its reference, else made here)."""
    config, _ = choose_method(config, len(graph.edges))
    if config.ablation != "corrupted":
        abl = ablation or ablation_for(model, graph, task, config.ablation, batch_size=config.batch_size)
        assert abl is not None
        return ablated_exact_scores(model, task, graph, abl, direction=config.direction, batch_size=config.batch_size, progress=progress)
    if config.method == "exact" and chunked(config):  # on Ray workers, or with a journal of chunks
        return configured_scores(model, task, graph, config, progress)
    if config.method == "exact":
        return exact_scores(
            model, task, graph, direction=config.direction, batch_size=config.batch_size, max_rows=config.max_rows, progress=progress
        )
    steps = config.steps if config.method == "eap-ig" else 1
    return attribution_scores(model, task, graph, steps=steps, direction=config.direction, batch_size=config.batch_size, progress=progress)


def smallest_reaching(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    order: np.ndarray,
    curve: pd.DataFrame,
    target: float,
    clean: np.ndarray,
    corrupt: np.ndarray,
    gap: Any,
    config: CircuitConfig,
    ablation: Any = None,
) -> tuple[int | None, pd.DataFrame]:
    """Smallest ``n`` whose top-``n`` circuit reaches ``target`` (bisection inside the measured curve); new points join the curve."""
    c = curve.sort_values("n_edges").reset_index(drop=True)
    f = c["faithfulness"].to_numpy(dtype=float)
    ok = np.flatnonzero(np.isfinite(f) & (f >= target))
    if not len(ok):
        return None, c
    hi = int(c["n_edges"][ok[0]])
    below = c[(c["n_edges"] < hi)]
    lo = int(below["n_edges"].max()) if len(below) else -1
    added = []
    while hi - lo > 1:
        mid = (lo + hi) // 2
        vals = circuit_values(model, task, graph, _top_mask(order, mid, len(graph.edges)), batch_size=config.batch_size,
                              ablation=ablation)  # fmt: skip
        eff, low, high = normalised_effects(vals, clean, corrupt, gap, n_resamples=config.n_bootstrap, seed=config.seed)
        added.append({"n_edges": mid, "fraction": mid / len(graph.edges), "faithfulness": float(eff[0]), "ci_low": float(low[0]),
                      "ci_high": float(high[0]), "metric": float(vals[0].mean())})  # fmt: skip
        if np.isfinite(eff[0]) and eff[0] >= target:
            hi = mid
        else:
            lo = mid
    if added:
        c = pd.concat([c, pd.DataFrame(added)], ignore_index=True).sort_values("n_edges").reset_index(drop=True)
    return hi, c


def reach_evidence(curve: pd.DataFrame, reach: int | None, target: float) -> dict[str, Any]:
    """What the smallest size reaching ``target`` rests on: it is a point estimate (``faithfulness`` and its
    interval at that size), measured in-sample (on the pairs that ranked the edges); ``indistinguishable_from``:
    the smallest measured size below it whose 95% interval also includes ``target`` (None when none);
    ``monotone``: False when the measured curve falls by more than :data:`MONOTONE_TOLERANCE` somewhere up to
    that size (``drop``: the largest fall,
    from ``drop_from`` edges to ``drop_to`` edges), so the bisection's answer may not be the smallest."""
    out: dict[str, Any] = {"n": reach, "target": float(target), "point_estimate": True, "in_sample": True}
    if reach is None:
        return out
    c = curve.sort_values("n_edges").drop_duplicates("n_edges")
    at = c[c["n_edges"] == reach].iloc[0]
    out |= {"faithfulness": float(at["faithfulness"]), "ci_low": float(at["ci_low"]), "ci_high": float(at["ci_high"])}
    below = c[(c["n_edges"] < reach) & (c["ci_high"] >= target)]
    out["indistinguishable_from"] = int(below["n_edges"].min()) if len(below) else None
    upto = c[c["n_edges"] <= reach]
    f, n = upto["faithfulness"].to_numpy(dtype=float), upto["n_edges"].to_numpy()
    best, best_n, drop, frm, to = -np.inf, None, 0.0, None, None
    for fi, ni in zip(f, n, strict=True):
        if not np.isfinite(fi):
            continue
        if best - fi > drop:
            drop, frm, to = float(best - fi), best_n, int(ni)
        if fi > best:
            best, best_n = float(fi), int(ni)
    out |= {"monotone": drop <= MONOTONE_TOLERANCE, "drop": drop, "drop_from": frm, "drop_to": to}
    return out


def _top_mask(order: np.ndarray, n: int, n_edges: int) -> np.ndarray:
    m = np.zeros((1, n_edges), dtype=bool)
    m[0, order[:n]] = True
    return m


def _blocks(info: dict) -> str | None:
    """Where exact patching's patched forwards ran: ``"own"`` (:mod:`~headlens.probes.fast_blocks`), ``"bridge: <why>"``,
    or None when no exact patching ran."""
    if "own_blocks" not in info:
        return None
    return "own" if info["own_blocks"] else f"bridge: {info.get('own_blocks_reason') or 'unknown'}"


def run_circuit(
    model: LoadedModel, task: PairTask, config: CircuitConfig | None = None, *, graph: EdgeGraph | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CircuitRun:  # fmt: skip
    """Score, select, measure and confirm a circuit of ``task`` on ``model`` (see the module doc)."""
    config = config or CircuitConfig()
    graph = graph or build_graph(model)
    n_edges = len(graph.edges)
    config, chosen = choose_method(config, n_edges)
    if config.top_n is not None and config.top_n > n_edges:
        raise InputError(f"top_n={config.top_n} is above the graph's {n_edges} edges", top_n=config.top_n)
    split = split_pairs(len(task), config.held_out, config.seed)
    notes = _opening_notes(graph, config, chosen, split.reason)
    chooser = subset(task, split.choose) if split.held else task
    abl = ablation_for(model, graph, chooser, config.ablation, batch_size=config.batch_size)  # the held-out pairs do not choose
    per_pair = score_edges(model, chooser, graph, config, progress, ablation=abl)
    gap = gap_of(per_pair, n_bootstrap=config.n_bootstrap, seed=config.seed)
    if not gap.defined:
        notes.append(f"scores are not normalised: {gap.reason}")
    pick = _choose(model, chooser, graph, per_pair, gap.defined, config, abl, notes, progress)
    confirmation = _confirm(model, chooser, graph, pick.table, pick.order, pick.n_sel, per_pair, config, progress)
    curve = pick.curve
    if split.held:
        curve = held_out_curve(model, subset(task, split.held_out), graph, pick.order, curve, config, ablation=abl, progress=progress)
    summary = {
        "graph": graph.size(),
        "method": config.method,
        "steps": config.steps if config.method == "eap-ig" else 1,
        "direction": config.direction,
        "ablation": config.ablation,
        "method_choice": chosen,
        "estimate": per_pair.estimate,
        "metric": per_pair.metric,
        "gap": gap.describe(),
        "n_circuit": int(pick.n_sel),
        **faithfulness_at(curve, pick.n_sel, split),
        "target_faithfulness": config.target_faithfulness,
        "smallest_reaching_target": pick.reach,
        "reach": reach_evidence(curve, pick.reach, config.target_faithfulness),
        "readable": readable_at(curve, split),
        **confirmation,
        **curve_summary(curve),
        "task": task.describe(),
    }
    measure = subset(task, split.held_out) if split.held else chooser
    on = "held-out pairs" if split.held else "the pairs that chose the circuit (in-sample)"
    scores = _mib_scores(pick.table, per_pair, gap.defined, n_edges, notes)
    summary["mib"] = mib_metrics(model, measure, graph, scores, batch_size=config.batch_size, ablation=abl, measured_on=on,
                                 n_bootstrap=config.n_bootstrap, seed=config.seed)  # fmt: skip
    if config.ground_truth is not None:
        keys = graph.edges.iloc[per_pair.edge_ids]
        truth = read_truth(config.ground_truth)
        summary["ground_truth"] = truth_auc(truth, keys, per_pair.values, n_bootstrap=config.n_bootstrap, seed=config.seed)
    return CircuitRun(edges=pick.table, faithfulness=curve, summary=summary, config=config, notes=notes, graph=graph)


def _opening_notes(graph: EdgeGraph, config: CircuitConfig, chosen: dict[str, Any] | None, split_reason: str | None) -> list[str]:
    """The notes known before any scoring: a head-sum norm, the method auto chose, split credit, the held-out split."""
    notes: list[str] = []
    if graph.info.get("head_sum_norm"):
        notes.append(HEAD_SUM_NORM_NOTE)
    if chosen is not None:
        notes.append(f"method auto: {chosen['chosen']}, because {chosen['why']}")
    if config.method != "exact":
        notes.append(SPLIT_CREDIT)
    if split_reason:
        notes.append(split_reason)
    return notes


@dataclass(kw_only=True)
class _Choice:
    """The ranking, the circuit's size and its edge table, the choosing pairs' curve, the smallest size reaching the target."""

    order: np.ndarray
    n_sel: int
    table: pd.DataFrame
    curve: pd.DataFrame
    reach: int | None


def _choose(
    model: LoadedModel, chooser: PairTask, graph: EdgeGraph, per_pair: PerPair, defined: bool, config: CircuitConfig, abl: Ablation | None,
    notes: list[str], progress: Callable[[str, int, int], None] | None,
) -> _Choice:  # fmt: skip
    """Rank the edges, measure the faithfulness curve on the choosing pairs and pick the circuit (``top_n``,
    ``threshold``, or the smallest size reaching the target: module doc)."""
    n_edges = len(graph.edges)
    base = edge_table(graph, per_pair, top_n=config.top_n, threshold=config.threshold, n_bootstrap=config.n_bootstrap, seed=config.seed)
    order = ranking(base["score"].to_numpy() if defined else base["score_raw"].to_numpy())
    n_sel: int | None = config.top_n
    if config.threshold is not None:
        n_sel = int((np.abs(base["score"].to_numpy()) >= config.threshold).sum())
        if n_sel == 0:
            notes.append(_empty_note(base, config.threshold, defined))
    sizes = curve_points(n_edges, config.curve_points, [*READABLE_SIZES, *([] if n_sel is None else [n_sel])])
    curve, clean, corrupt = faithfulness_curve(model, chooser, graph, order, sizes, batch_size=config.batch_size,
                                               n_bootstrap=config.n_bootstrap, seed=config.seed, progress=progress,
                                               ablation=abl)  # fmt: skip
    fgap = gap_of(PerPair(np.zeros((len(chooser), 0)), clean, corrupt, per_pair.metric, "exact", "noising", np.arange(0)),
                  n_bootstrap=config.n_bootstrap, seed=config.seed)  # fmt: skip
    reach, curve = smallest_reaching(model, chooser, graph, order, curve, config.target_faithfulness, clean, corrupt, fgap, config, abl)
    if n_sel is None:
        if reach is None:
            notes.append(f"no circuit of the ranking reaches faithfulness {config.target_faithfulness}; the circuit is every edge")
            n_sel = n_edges
        else:
            n_sel = reach
        table = edge_table(graph, per_pair, top_n=n_sel, n_bootstrap=config.n_bootstrap, seed=config.seed)
    else:
        table = base
    table["in_circuit"] = np.isin(np.arange(n_edges), order[:n_sel])
    return _Choice(order=order, n_sel=n_sel, table=table, curve=curve, reach=reach)


def _mib_scores(table: pd.DataFrame, per_pair: PerPair, defined: bool, n_edges: int, notes: list[str]) -> np.ndarray:
    """The ranking of MIB's circuits, in graph order: the scores, or where the gap is not defined (every score NaN)
    the oriented raw mean effect, the ranking the run's own curve uses (with a note)."""
    if defined:
        return _by_edge(table, "score", n_edges)
    out = np.full(n_edges, np.nan)
    out[per_pair.edge_ids] = carried(per_pair)[0].mean(0)
    notes.append("CPR and CMD rank the edges by their raw mean effect (oriented to the clean behaviour), as the curve does: "
                 "the scores are not normalised")  # fmt: skip
    return out


def _by_edge(table: pd.DataFrame, column: str, n_edges: int) -> np.ndarray:
    """``table[column]`` in graph order (one value per edge id)."""
    out = np.full(n_edges, np.nan)
    out[table["edge_id"].to_numpy()] = table[column].to_numpy(dtype=float)
    return out


def _empty_note(table: pd.DataFrame, threshold: float, defined: bool) -> str:
    top = float(np.nanmax(np.abs(table["score"].to_numpy(dtype=float)))) if defined and len(table) else float("nan")
    largest = f" (the largest is {top:.3g})" if np.isfinite(top) else " (every score is NaN: the gap is not defined)"
    return f"the circuit is empty: no edge has |score| >= {threshold:g}{largest}; its faithfulness is that of the corrupted run, 0"


def _confirm(
    model: LoadedModel, task: PairTask, graph: EdgeGraph, table: pd.DataFrame, order: np.ndarray, n_sel: int, per_pair: PerPair,
    config: CircuitConfig, progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Exact confirmation of an estimate (:func:`~headlens.analyses.circuits.confirm.confirm_edges`); the summary's
    ``confirmed``, ``disagreements``, ``confirmation`` and ``forwards``."""
    n_edges = len(graph.edges)
    for col, empty in (("exact", np.nan), ("exact_ci_low", np.nan), ("exact_ci_high", np.nan), ("disagree", False),
                       ("estimate_over_exact", np.nan), ("exact_near_zero", False), ("off_exact", False), ("confirmed", "")):  # fmt: skip
        table[col] = empty
    n_confirm = min(config.confirm, n_sel)
    ex, sample, floor, judged = None, np.zeros(0, dtype=np.int64), None, None
    if per_pair.method == "exact":
        table["exact"], table["exact_ci_low"], table["exact_ci_high"] = table["score"], table["ci_low"], table["ci_high"]
    elif n_confirm > 0 or config.confirm_sample > 0:
        ex, sample = confirm_edges(model, task, graph, table, order, n_confirm, config, progress)
        floor = ex.info.get("share_resolution") if ex is not None else None
        if ex is not None and len(sample):  # the confirmed top and the sample are a stratified sample: the ranking judged by exact
            smp = EdgeSample(n_edges=n_edges, top=np.asarray(order)[:n_confirm], random=sample, seed=config.seed)
            judged = against_exact(per_pair, ex, smp, n_bootstrap=config.n_bootstrap, seed=config.seed)
    info = (ex or per_pair).info
    out: dict[str, Any] = {
        "confirmed": int(n_confirm if per_pair.method != "exact" else n_edges),
        "disagreements": int((table["disagree"] & (table["confirmed"] != "sample")).sum()),
        "forwards": {
            "scores": per_pair.forwards,
            "confirm": ex.forwards if ex is not None else 0.0,
            "exact_rows_per_forward": info.get("max_rows"),
            "exact_blocks": _blocks(info),
        },
    }
    if per_pair.method != "exact":
        out["confirmation"] = confirmation_summary(table, n_confirm, sample, floor, config.seed)
    if judged is not None:
        out["against_exact"] = [judged.row()]
    return out
