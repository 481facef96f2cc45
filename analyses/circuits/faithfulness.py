"""Faithfulness of a circuit: the metric with every edge outside it patched to its corrupted value.

The clean run is repeated with each reader's input rebuilt: for every edge ``s -> r`` outside
the circuit, ``r``'s input loses ``s``'s live output (in this run, which upstream patches have
already changed) and gains ``s``'s output on the corrupted input.  Edges in the circuit carry
the live values.  With every edge in the circuit this is the clean run, with none the corrupted
one (the readers' inputs are sums of the writers: :func:`~headlens.analyses.circuits.hooks.check_edge_model`).
Faithfulness is normalised as every patch is (:mod:`headlens.analyses.patching.effects`):
``mean(m_circuit - m_corrupt) / mean(m_clean - m_corrupt)``, 0 = corrupted, 1 = clean, with
its 95% bootstrap interval over pairs.

The curve (:func:`faithfulness_curve`) takes the ``n`` best-ranked edges for each ``n``;
:func:`curve_summary` gives MIB-style areas (Mueller et al. 2025): the area under faithfulness
against the fraction of edges kept (trapezoids on the measured points, from 0 to 1), and the
same on a log axis of ``n`` (which weighs the small circuits people report).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags, sender_capture
from headlens.analyses.circuits.scores import senders_of
from headlens.analyses.circuits.writes import HeadSumNorm, head_sum_norms, normed_change
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.patching.effects import normalised_effects, task_gap
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import patched_runner
from headlens.probes.progress import Step, stage_step
from headlens.probes.reader_rows import reader_hook

log = logging.getLogger(__name__)

__all__ = ["circuit_values", "faithfulness_curve", "curve_summary", "curve_points", "FAITHFULNESS_COLUMNS"]

FAITHFULNESS_COLUMNS = ["n_edges", "fraction", "faithfulness", "ci_low", "ci_high", "metric"]


def _rebuild(
    graph: EdgeGraph, layer: int, which: str, live: dict[str, Tensor], corrupt: Tensor, masks: Tensor, norms: list[HeadSumNorm | None]
) -> HookFn:
    """Reader hook: copy ``c``'s input minus ``sum_s masks[c, slot, s] (live_s - corrupt_s)``; the heads of a
    layer whose head sum is normalised change the input by ``N(a_live) - N(a_mix)`` instead (:func:`normed_change`)."""
    _first, k, n_send = graph.blocks[(layer, which)]
    n_h = int(graph.info["n_heads"])
    normed = [(lr, slice(1 + lr * (n_h + 1), 1 + lr * (n_h + 1) + n_h)) for lr, hsn in enumerate(norms) if hsn is not None]
    normed = [(lr, sl) for lr, sl in normed if sl.stop <= n_send]

    def fn(x: Tensor, hook: Any = None) -> Tensor:
        copies = masks.shape[0]
        lv, ck, width, d_model = _flat(live["out"], copies, n_send), _flat(corrupt, 1, n_send)[0], x.shape[1], x.shape[-1]
        m = masks[:, :k, :n_send].to(lv.dtype)  # [copies, slot, S]
        if normed:
            m = m.clone()
            for _lr, sl in normed:
                m[:, :, sl] = 0
        change = _contract(m, lv, ck).view(copies, -1, k, width, d_model).permute(0, 1, 3, 2, 4)  # [c, b, p, slot, d]
        for lr, sl in normed:
            hsn = norms[lr]
            assert hsn is not None
            lvh = live["out"][:, sl].view(copies, -1, n_h, width, d_model)
            change = change + normed_change(hsn, lvh, corrupt[None, :, sl], masks[:, :k, sl])
        if x.dim() == 4:
            return (x.view(copies, -1, *x.shape[1:]) - change.to(x.dtype)).view(x.shape)
        return (x.view(copies, -1, *x.shape[1:]) - change[:, :, :, 0].to(x.dtype)).view(x.shape)

    return fn


def _flat(store: Tensor, copies: int, n_send: int) -> Tensor:
    """``[copies, batch, n_send, pos * d_model]``: a view of the first ``n_send`` senders of a store
    ``[copies * batch, sender, pos, d_model]``."""
    cb, s_tot, width, d_model = store.shape
    return store.view(copies, cb // copies, s_tot, width * d_model)[:, :, :n_send]


def _contract(m: Tensor, live: Tensor, corrupt: Tensor) -> Tensor:
    """``sum_s m[c, slot, s] (live[c, b, s] - corrupt[b, s])`` as ``[copies, batch, slot, pos * d_model]``, by two matrix
    products on views of the stores (``live`` ``[c, b, S, x]``, ``corrupt`` ``[b, S, x]``): the difference of the senders'
    outputs is never formed (a ``[c, b, S, pos, d_model]`` tensor per reader and forward, allocated and freed each time)."""
    c, k, n_send = m.shape
    b = corrupt.shape[0]
    out = torch.matmul(m[:, None], live)  # [c, b, slot, x]: m broadcast over the batch, live's rows read in place
    off = torch.matmul(m.reshape(1, c * k, n_send), corrupt)  # [b, c * slot, x]
    return out.sub_(off.view(b, c, k, -1).transpose(0, 1))


def circuit_values(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    circuits: np.ndarray,
    *,
    batch_size: int = 8,
    max_rows: int = 64,
    progress: Step | None = None,
    ablation: Any = None,
) -> np.ndarray:
    """Metric ``[circuit, pair]`` of the clean run with every edge outside each circuit corrupted (``ablation``, an
    :class:`~headlens.analyses.circuits.ablation_kinds.Ablation`: its mean or zero instead).

    ``circuits`` is boolean ``[circuit, edge]`` (or ``[edge]`` for one circuit)."""
    circuits = np.atleast_2d(np.asarray(circuits, dtype=bool))
    if circuits.shape[1] != len(graph.edges):
        raise InputError(f"a circuit mask needs one entry per edge ({len(graph.edges)}), got {circuits.shape[1]}")
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    out = np.zeros((len(circuits), len(task)))
    norms = head_sum_norms(model)
    done, total = 0, len(circuits) * len(task)  # progress: (circuit, pair) values measured
    with edge_flags(model):
        check_edge_model(model, graph)
        for rows in clean_set.rows(batch_size):
            tok_c, lengths, _ = clean_set.batch(rows)
            tok_k, _, _ = corrupt_set.batch(rows)
            corrupt, _ = senders_of(model, graph, task, rows, tok_k, corrupt_set)
            if ablation is not None:
                corrupt = ablation.values(corrupt)
            per = max(1, max_rows // len(rows))
            for c0 in range(0, len(circuits), per):
                chunk = circuits[c0 : c0 + per]
                k = len(chunk)
                live: dict[str, Tensor] = {}
                hooks = sender_capture(model, graph, live)
                for (layer, which), (first, slots, n_send) in graph.blocks.items():
                    excluded = ~chunk[:, first : first + slots * n_send]
                    if not excluded.any():
                        continue
                    masks = torch.as_tensor(excluded.reshape(k, slots, n_send), device=model.device)
                    hooks.append((reader_hook(layer, which, model.n_layers), _rebuild(graph, layer, which, live, corrupt, masks, norms)))
                with torch.inference_mode():
                    vals = model_values(model, tok_c, lengths, clean_set, rows, copies=k, run=patched_runner(model, hooks))
                out[c0 : c0 + k, rows] = vals.detach().double().cpu().view(k, len(rows)).numpy()
                done += k * len(rows)
                if progress is not None:
                    progress(done, total)
    return out


def curve_points(n_edges: int, n_points: int = 12, extra: Sequence[int] = ()) -> list[int]:
    """Circuit sizes of a curve: 0, the whole graph and ``n_points`` roughly log-spaced sizes between, plus ``extra``."""
    pts = {0, n_edges, *[int(e) for e in extra if 0 <= int(e) <= n_edges]}
    if n_edges > 1 and n_points > 0:
        pts |= {round(float(v)) for v in np.geomspace(1, n_edges, n_points)}
    return sorted(pts)


def faithfulness_curve(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    order: np.ndarray,
    sizes: Sequence[int],
    *,
    batch_size: int = 8,
    n_bootstrap: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
    ablation: Any = None,
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """``(curve, clean, corrupt)``: faithfulness of the top-``n`` edges of ``order`` for each ``n`` in ``sizes``."""
    n_edges = len(graph.edges)
    sizes = [int(s) for s in sizes]
    if any(s < 0 or s > n_edges for s in sizes):
        raise InputError(f"circuit sizes must lie in 0..{n_edges}", sizes=sizes)
    masks = np.zeros((len(sizes) + 2, n_edges), dtype=bool)
    masks[1] = True  # row 0: nothing kept (the corrupted run), row 1: everything (the clean run)
    for i, s in enumerate(sizes):
        masks[i + 2, np.asarray(order)[:s]] = True
    step = stage_step(progress, "faithfulness")  # one value per (circuit, pair)
    vals = circuit_values(model, task, graph, masks, progress=step, batch_size=batch_size, ablation=ablation)
    clean_set, _ = pair_eval_sets(model, task, batch_size=batch_size)
    corrupt, clean = vals[0], vals[1]
    gap = task_gap(clean_set.metric, clean, corrupt, n_resamples=n_bootstrap, seed=seed)
    eff, low, high = normalised_effects(vals[2:], clean, corrupt, gap, n_resamples=n_bootstrap, seed=seed)
    curve = pd.DataFrame(
        {
            "n_edges": sizes,
            "fraction": [s / n_edges for s in sizes],
            "faithfulness": eff,
            "ci_low": low,
            "ci_high": high,
            "metric": vals[2:].mean(1),
        }
    )
    return curve, clean, corrupt


def curve_summary(curve: pd.DataFrame) -> dict[str, float]:
    """MIB-style areas under the faithfulness curve (module doc); NaN where faithfulness is."""
    c = curve.sort_values("n_edges")
    f = c["faithfulness"].to_numpy(dtype=float)
    x = c["fraction"].to_numpy(dtype=float)
    if not np.isfinite(f).all() or len(f) < 2:
        return {"auc": float("nan"), "auc_log": float("nan")}
    auc = float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(x)))
    pos = c["n_edges"].to_numpy() > 0
    lx = np.log(c["n_edges"].to_numpy(dtype=float)[pos])
    span = lx[-1] - lx[0] if len(lx) > 1 else 0.0
    auc_log = float("nan")
    if span > 0:
        fl = f[pos]
        auc_log = float(np.sum((fl[1:] + fl[:-1]) / 2 * np.diff(lx)) / span)
    return {"auc": auc, "auc_log": auc_log}
