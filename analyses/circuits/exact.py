"""Exact edge patching: one edge's sender contribution to one reader input replaced, everything else as the base run.

For an edge ``s -> r`` the base run (``direction="noising"``: clean; ``"denoising"``: corrupt)
is repeated with only ``r``'s input changed, by ``out_s(other) - out_s(base)``; every other
reader, and every other slot of ``r``'s hook point, reads the base run's stream.  This is path
patching (:mod:`headlens.analyses.patching.path`) generalised to every node type: head ->
head q/k/v (under GQA the key-value group's slot), any writer -> MLP input, any writer ->
logits.  The metric change ``patched - base`` of each pair is what the estimates estimate.

Batching: a patch at a reader of layer ``l`` leaves blocks ``0..l-1`` as in the base run, so
the forward starts at block ``l`` from the base run's stored stream (a :class:`~headlens.probes.patch.Start`; logits edges at the last
block, from its output hook), with one copy of the batch per edge, at most ``max_rows`` rows
(copies x pairs) per forward, every row of a forward starting at the same block: an edge at layer ``l``
costs ``(L - l) / L`` of a forward.
Models on which a late start does not reproduce the full forward run every block.  The default
``max_rows`` (:func:`~headlens.analyses.circuits.cost.auto_rows`) is as many rows as fit in
:data:`~headlens.analyses.circuits.cost.ROW_BYTES` (at least 256): on a small model every (edge, pair) row
of one start block goes into one forward, whose fixed cost is most of its time.

The patched forwards are :class:`~headlens.probes.reader_rows.ReaderRows` (row: a pair's base run with
one edge's difference added at its reader's input), run by :class:`~headlens.probes.reader_rows.RowForwards`,
which chooses the path (below).

Under ``metric="logit-diff"`` the patched forwards stop at the output head's input and the two logits are
read from it (:mod:`~headlens.analyses.circuits.readout`); the base run's values are read the same way from
its capture forward, where they must match its logits on every pair to
:data:`~headlens.probes.reader_rows.CONTROL_ATOL`, else the head runs.

The additivity check of :func:`~headlens.analyses.circuits.hooks.check_edge_model` runs on the first
capture forward (one pair's readers' inputs against its senders' outputs), not on a forward of its own.

On GPT-2 under the logit-diff readout the patched forwards run outside the bridge
(:mod:`~headlens.probes.fast_blocks`): one pass per ``max_rows`` rows, each row joining at its
reader's block as a copy of its pair's control row, which runs from block 0 in the same pass and must
match the base run's value on every pair, else the sweep reruns through the bridge.  The capture forward
then runs without the split inputs (the fast blocks read the stream they compute, so the additivity check has
nothing to check).  ``PerPair.info`` says which ran, and why not.

A patched value within :data:`~headlens.analyses.circuits.resolution.RESOLUTION_EPS` float32 epsilons of
the value it is measured from is no change (exactly 0), on either path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.circuits.capture import capture_group, pair_groups
from headlens.analyses.circuits.cost import auto_rows
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import additivity_hooks, check_additivity, edge_flags, refuse_encoder
from headlens.analyses.circuits.readout import Readout, readout_of
from headlens.analyses.circuits.resolution import FLOAT32_EPS, change
from headlens.analyses.circuits.scores import PerPair, check_direction
from headlens.analyses.circuits.writes import head_sum_norms, sender_deltas
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.reader_rows import (
    CONTROL_ATOL,
    BaseRows,
    ControlMismatch,
    LateStartMismatch,
    Read,
    ReaderRows,
    ReadoutMismatch,
    RowForwards,
    row_forwards,
)

log = logging.getLogger(__name__)

__all__ = ["exact_scores"]


@dataclass(kw_only=True)
class _Job:
    """One :func:`exact_scores` call: the model, the two runs' data and the edges asked for, as arrays over them."""

    model: LoadedModel
    graph: EdgeGraph
    n: int  # pairs
    base_set: Any
    other_set: Any
    direction: str
    batch_size: int
    ids: np.ndarray
    r_layer: np.ndarray  # each edge's reader block
    which: np.ndarray  # q, k, v, mlp or logits
    slot: np.ndarray  # the reader's slot at its hook point (-1: none)
    sender_idx: np.ndarray  # the sender, as an index into the sender order
    norms: list
    progress: Callable[[str, int, int], None] | None
    checked: list[bool] = field(default_factory=list)  # the additivity check has run (on the first capture forward)


@dataclass(kw_only=True)
class _Path:
    """How the patched forwards run: the readout (None: through the output head) and the rows' path; each fallback
    (:func:`_with_fallbacks`) changes one."""

    readout: Readout | None
    rows: RowForwards


@dataclass(kw_only=True)
class _Tally:
    """A sweep's values and its costs."""

    values: np.ndarray
    clean: np.ndarray
    corrupt: np.ndarray
    rows_run: float = 0.0
    ran_late: bool = False


@dataclass(kw_only=True)
class _Group:
    """One group of pairs' capture: the base run (its values: what the patched ones are measured from), the senders'
    differences ``[pair, sender, pos, d_model]``."""

    bases: BaseRows
    delta: Tensor


def exact_scores(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    edge_ids: Sequence[int] | np.ndarray | None = None,
    *,
    direction: str = "noising",
    batch_size: int = 8,
    max_rows: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> PerPair:
    """Each pair's metric change under each edge's exact patch (see the module doc); ``edge_ids`` default: every edge;
    ``max_rows`` default: :func:`~headlens.analyses.circuits.cost.auto_rows`."""
    check_direction(direction)
    job = _job(model, task, graph, edge_ids, direction, batch_size, max_rows, progress)
    readout = readout_of(model, job.base_set.metric)
    path = _Path(readout=readout, rows=row_forwards(model, _read(job, readout), head_sum_norm=any(x is not None for x in job.norms)))
    tally, rows = _with_fallbacks(job, path, max_rows)
    return PerPair(
        values=tally.values,
        clean=tally.clean,
        corrupt=tally.corrupt,
        metric=job.base_set.metric,
        method="exact",
        direction=direction,
        edge_ids=job.ids,
        forwards=2.0 + tally.rows_run / max(1, job.n),
        # started_late: some forward started after block 0 (and matched its control row); max_rows: the chunk size used;
        # head_skipped: the patched forwards' logit differences were read from the output head's input (module doc);
        # own_blocks: the patched forwards ran outside the bridge (probes/fast_blocks.py), else why not
        info={
            "started_late": tally.ran_late,
            "max_rows": int(rows),
            "head_skipped": path.readout is not None,
            "own_blocks": path.rows.fast is not None,
            "own_blocks_reason": path.rows.why_not,
        },
    )


def _read(job: _Job, readout: Readout | None) -> Read:
    """How a patched row's value is read: from the output head's input under the readout, else the metric's forward."""
    data = job.base_set
    if readout is not None:
        assert data.correct is not None and data.incorrect is not None  # logit-diff (readout_of)

        def last(h: Tensor, ids: np.ndarray) -> Tensor:
            r_ids = torch.from_numpy(ids)
            return readout.values(h, data.correct[r_ids], data.incorrect[r_ids])

        return Read(last=last)

    def run(runner: Callable[..., Any], tokens: Tensor, lengths: Tensor, ids: np.ndarray) -> Tensor:
        return model_values(job.model, tokens, lengths, data, ids.tolist(), run=runner)

    return Read(run=run)


def _job(
    model: LoadedModel,
    task: PairTask,
    graph: EdgeGraph,
    edge_ids: Sequence[int] | np.ndarray | None,
    direction: str,
    batch_size: int,
    max_rows: int | None,
    progress: Callable[[str, int, int], None] | None,
) -> _Job:
    """The edges asked for as arrays, the two runs' data (checked: ids in range, ``max_rows``, a decoder)."""
    n_edges = len(graph.edges)
    ids = np.arange(n_edges) if edge_ids is None else np.asarray(edge_ids, dtype=np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= n_edges):
        raise InputError(f"edge ids must lie in 0..{n_edges - 1}", edge_ids=list(ids[:3]))
    if max_rows is not None and max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}", max_rows=max_rows)
    refuse_encoder(model)
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    base_set, other_set = (clean_set, corrupt_set) if direction == "noising" else (corrupt_set, clean_set)
    e = graph.edges
    return _Job(model=model, graph=graph, n=len(task), base_set=base_set, other_set=other_set, direction=direction, batch_size=batch_size,
                ids=ids, r_layer=e["receiver_layer"].to_numpy()[ids], which=e["input"].to_numpy()[ids],
                slot=e["receiver_slot"].to_numpy()[ids], sender_idx=_sender_index(graph)[ids], norms=head_sum_norms(model),
                progress=progress)  # fmt: skip


def _with_fallbacks(job: _Job, path: _Path, max_rows: int | None) -> tuple[_Tally, int]:
    """The sweep, rerun on the next path down when one does not reproduce the base run: fast blocks -> the bridge,
    the readout -> the output head, a late start -> every block (module doc).  Returns the tally and the rows used."""
    model, fw = job.model, path.rows
    width = int(job.base_set.lengths.max()) if job.n else 1
    while True:
        rows = max_rows if max_rows is not None else auto_rows(model, width, own=fw.fast is not None)
        capture_rows = max_rows if max_rows is not None else auto_rows(model, width)
        try:
            with edge_flags(model) if fw.fast is None else contextlib.nullcontext():  # the fast blocks read no reader hook
                return _sweep(job, path, rows, capture_rows), rows
        except ControlMismatch as exc:
            fw.fast, fw.why_not = None, f"its blocks computed outside the bridge missed the base run ({exc})"
            log.info("exact edge patching: %s; the patched forwards run through the bridge", fw.why_not)
        except ReadoutMismatch as exc:
            log.info("exact edge patching: the logit difference read from the output head's input does not reproduce "
                     "this model's (%s); the head runs", exc)  # fmt: skip
            path.readout, fw.read = None, _read(job, None)
            fw.fast, fw.why_not = None, "the logit difference is read through the output head"
        except LateStartMismatch as exc:
            if not fw.late:
                raise
            log.info("exact edge patching: a late start does not reproduce this model's forward (%s); every block runs", exc)
            fw.late = False


class _Ticks:
    """Progress: ``(pair, edge)`` cells done, said after every patched forward, each count once."""

    def __init__(self, job: _Job) -> None:
        self.progress, self.total, self.before, self.said = job.progress, job.n * len(job.ids), 0, -1

    def tick(self, cells: int) -> None:
        if self.progress is not None and self.before + cells != self.said:
            self.said = self.before + cells
            self.progress("exact", self.said, self.total)


def _sweep(job: _Job, path: _Path, max_rows: int, capture_rows: int) -> _Tally:
    """Every (pair, edge) value on ``path``: one capture per group of pairs, then its patched forwards."""
    n, fw = job.n, path.rows
    start = fw.starts(job.r_layer)  # fast blocks: every row from its reader's block, logits edges after the last block
    tally = _Tally(values=np.full((n, len(job.ids)), np.nan), clean=np.zeros(n), corrupt=np.zeros(n))
    streams = fw.streams(start)
    needed = [layer for layer in streams if layer > 0]  # the stream entering block 0 is the senders' first output
    ticks = _Ticks(job)
    for rows in pair_groups(job.model, job.graph, job.base_set, job.batch_size, len(needed)):
        group = _capture(job, path, rows, needed, max(job.batch_size, capture_rows), tally, 0 in streams)  # through the bridge
        # A sender whose output is the same in both runs (delta exactly 0 at every position) patches nothing:
        # those (edge, pair) values are exactly 0 and their rows are not run.
        moves = (group.delta != 0).flatten(2).any(-1).cpu().numpy()  # [pair, sender]
        order = np.argsort(start, kind="stable")
        pair_of, col_of = np.nonzero(moves[:, job.sender_idx[order]].T)[::-1]  # edge-major within a start layer
        col_of = order[col_of]
        g_rows = group.bases.ids
        tally.values[np.ix_(g_rows, np.arange(len(job.ids)))] = 0.0
        still = len(rows) * len(job.ids) - len(pair_of)  # cells of senders that move nothing: exactly 0, not run
        with torch.inference_mode():
            for c0, c1 in fw.chunks(start[col_of], max_rows, len(rows)):
                p_i, c_j = pair_of[c0:c1], col_of[c0:c1]
                edges = ReaderRows(base=p_i, layer=job.r_layer[c_j], which=job.which[c_j], slot=job.slot[c_j],
                                   change=job.sender_idx[c_j], deltas=group.delta)  # fmt: skip
                got = fw.run(edges, group.bases)
                tally.values[g_rows[p_i], c_j] = change(got.values, got.reference, FLOAT32_EPS).numpy()
                tally.rows_run += got.forwards
                tally.ran_late = tally.ran_late or got.late
                ticks.tick(still + c1)
        ticks.tick(still + len(pair_of))  # the group whole, also when it ran nothing
        ticks.before += len(rows) * len(job.ids)
    return tally


def _capture(job: _Job, path: _Path, rows: list[int], needed: list[int], per_forward: int, tally: _Tally, stream0: bool) -> _Group:
    """One group's capture forwards (both runs in one when the metric reads the same targets): the senders' outputs
    and their differences, the values, the streams entering ``needed`` blocks (``stream0``: and block 0); the base
    values read the way the patched ones are (the head's input, or the logits); the additivity check on the first one."""
    model, graph, base_set, other_set = job.model, job.graph, job.base_set, job.other_set
    fast = path.rows.fast is not None
    tok_b, lengths, _width = base_set.batch(rows)
    tok_o, _, _ = other_set.batch(rows)
    seen: dict = {}
    # row 0 of the first forward: a base row (fast blocks: the readers read the stream they compute, by construction)
    extra = [] if job.checked or fast else additivity_hooks(model, graph, seen)
    if _same_targets(base_set, other_set):
        g = len(rows)
        out, v, resid, read = capture_group(model, graph, torch.cat([tok_b, tok_o]), base_set, rows + rows, needed, per_forward,
                                            extra, path.readout)  # fmt: skip
        out_b, out_o, v_b, v_o = out[:g], out[g:], v[:g], v[g:]
        resid = {layer: r[:g] for layer, r in resid.items()}
        full = v
        del out
    else:
        out_b, v_b, resid, read = capture_group(model, graph, tok_b, base_set, rows, needed, per_forward, extra, path.readout)
        out_o, v_o, _, _ = capture_group(model, graph, tok_o, other_set, rows, [], per_forward)
        full = v_b
    base_v = v_b
    if read is not None:
        miss = (read - full).abs() / full.abs().clamp(min=1.0)
        if not bool((miss <= CONTROL_ATOL).all()):
            i = int(miss.argmax())
            raise ReadoutMismatch(f"{float(read[i])!r} against the logits' {float(full[i])!r}")
        base_v = read[: len(rows)]
    if not job.checked and not fast:
        check_additivity(model, graph, out_b, seen)  # refuses the model before any patched forward
        job.checked.append(True)
    (tally.clean if job.direction == "noising" else tally.corrupt)[rows] = v_b.numpy()
    (tally.corrupt if job.direction == "noising" else tally.clean)[rows] = v_o.numpy()
    if stream0:  # sender 0: the stream entering block 0
        resid[0] = out_b[:, 0].clone()
    delta = sender_deltas(graph, job.norms, out_b, out_o)
    bases = BaseRows(ids=np.asarray(rows), tokens=tok_b, lengths=lengths, values=base_v, streams=resid)
    return _Group(bases=bases, delta=delta)


def _same_targets(a: Any, b: Any) -> bool:
    """True when two evaluation sets differ only in their tokens (one metric of the same targets)."""

    def same(x: Tensor | None, y: Tensor | None) -> bool:
        return (x is None and y is None) or (x is not None and y is not None and x.shape == y.shape and bool(torch.equal(x, y)))

    return (a.metric == b.metric and a.loss_start == b.loss_start and same(a.lengths, b.lengths) and same(a.correct, b.correct)
            and same(a.incorrect, b.incorrect) and same(a.reference, b.reference))  # fmt: skip


def _sender_index(graph: EdgeGraph) -> np.ndarray:
    """Each edge's sender as an index into the sender order."""
    order = {node.name: i for i, node in enumerate(graph.senders())}
    return np.array([order[s] for s in graph.edges["sender"]], dtype=np.int64)
