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

Under ``metric="logit-diff"`` the patched forwards stop at the output head's input and the two logits are
read from it (:mod:`~headlens.analyses.circuits.readout`); the base run's values are read the same way from
its capture forward, where they must match its logits on every pair to :data:`LATE_START_ATOL`, else the
head runs.

The additivity check of :func:`~headlens.analyses.circuits.hooks.check_edge_model` runs on the first
capture forward (one pair's readers' inputs against its senders' outputs), not on a forward of its own.

On GPT-2 under the logit-diff readout the patched forwards run outside the bridge
(:mod:`~headlens.analyses.circuits.own_blocks`): one pass per ``max_rows`` rows, each row joining at its
reader's block as a copy of its pair's control row, which runs from block 0 in the same pass and must
match the base run's value on every pair (:data:`LATE_START_ATOL`), else the sweep reruns through the
bridge.  The capture forward then runs without the split inputs (the own blocks read the stream they
compute, so the additivity check has nothing to check).  ``PerPair.info`` says which ran, and why not.

A patched value within :data:`~headlens.analyses.circuits.resolution.RESOLUTION_EPS` float32 epsilons of
the value it is measured from is no change (exactly 0), on either path.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.circuits.capture import capture_group, pair_groups
from headlens.analyses.circuits.cost import auto_rows
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import additivity_hooks, check_additivity, edge_flags, reader_hook, refuse_encoder
from headlens.analyses.circuits.own_blocks import ControlMismatch, OwnBlocks, own_blocks, pass_values
from headlens.analyses.circuits.readout import Readout, ReadoutMismatch, readout_hook, readout_of
from headlens.analyses.circuits.resolution import change
from headlens.analyses.circuits.scores import PerPair, check_direction
from headlens.analyses.circuits.writes import head_sum_norms, sender_deltas
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import Patch, PatchLike, Site, Start, patched_runner

log = logging.getLogger(__name__)

__all__ = ["exact_scores"]


def _add_hook(at: Tensor, slot: Tensor | None, d: Float[Tensor, "row pos d_model"]) -> HookFn:
    """Reader hook: batch row ``at[i]`` gets ``d[i]`` added (to its slot ``slot[i]`` when the hook point has a slot dim)."""

    def fn(x: Tensor, hook: Any = None) -> Tensor:
        x = x.clone()
        dd = d[:, : x.shape[1]].to(device=x.device, dtype=x.dtype)
        idx = at.to(x.device)
        if slot is None:
            x[idx] += dd
        else:
            x[idx, :, slot.to(x.device)] += dd
        return x

    return fn


#: A late start is taken to reproduce the full forward when the control row's metric value (module doc)
#: is within this of the full forward's, relative to ``max(1, |value|)`` (as
#: :func:`headlens.probes.patch.check_start` bounds the logits).
LATE_START_ATOL = 1e-5


#: float32's machine epsilon (:func:`~headlens.analyses.circuits.resolution.change` counts a value within
#: RESOLUTION_EPS of them of its base as no change)
_EPS = float(torch.finfo(torch.float32).eps)


class _LateStartMismatch(Exception):
    """A forward continued from a later block did not reproduce the full forward's value."""


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
    hook_of: np.ndarray  # the reader's hook point
    norms: list
    progress: Callable[[str, int, int], None] | None
    checked: list[bool] = field(default_factory=list)  # the additivity check has run (on the first capture forward)


@dataclass(kw_only=True)
class _Path:
    """How the patched forwards run; each fallback (:func:`_with_fallbacks`) changes one field."""

    late: bool
    readout: Readout | None
    own: OwnBlocks | None
    why_not: str


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
    """One group of pairs' capture: the base run's values and stored streams, the senders' differences."""

    rows: np.ndarray
    tokens: Tensor  # the base run's tokens
    lengths: Tensor
    base_v: Tensor  # the values the patched ones are measured from
    delta: Tensor  # [pair, sender, pos, d_model]
    resid: dict[int, Tensor]
    stream0: Tensor | None  # own blocks: the stream entering block 0


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
    own, why_not = own_blocks(model, readout=readout is not None, head_sum_norm=any(x is not None for x in job.norms))
    if own is None:
        log.debug("exact edge patching: the patched forwards run through the bridge (%s)", why_not)
    path = _Path(late=model.n_layers >= 2, readout=readout, own=own, why_not=why_not)
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
        # own_blocks: the patched forwards ran outside the bridge (own_blocks module doc), else why not
        info={
            "started_late": tally.ran_late,
            "max_rows": int(rows),
            "head_skipped": path.readout is not None,
            "own_blocks": path.own is not None,
            "own_blocks_reason": path.why_not,
        },
    )


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
    r_layer = e["receiver_layer"].to_numpy()[ids]
    which = e["input"].to_numpy()[ids]
    hook_of = np.array([reader_hook(int(r_layer[j]), str(which[j]), model.n_layers) for j in range(len(ids))], dtype=object)
    return _Job(model=model, graph=graph, n=len(task), base_set=base_set, other_set=other_set, direction=direction, batch_size=batch_size,
                ids=ids, r_layer=r_layer, which=which, slot=e["receiver_slot"].to_numpy()[ids],
                sender_idx=_sender_index(graph)[ids], hook_of=hook_of, norms=head_sum_norms(model), progress=progress)  # fmt: skip


def _with_fallbacks(job: _Job, path: _Path, max_rows: int | None) -> tuple[_Tally, int]:
    """The sweep, rerun on the next path down when one does not reproduce the base run: own blocks -> the bridge,
    the readout -> the output head, a late start -> every block (module doc).  Returns the tally and the rows used."""
    model = job.model
    width = int(job.base_set.lengths.max()) if job.n else 1
    while True:
        rows = max_rows if max_rows is not None else auto_rows(model, width, own=path.own is not None)
        capture_rows = max_rows if max_rows is not None else auto_rows(model, width)
        try:
            with edge_flags(model) if path.own is None else contextlib.nullcontext():  # own blocks read no reader hook
                return _sweep(job, path, rows, capture_rows), rows
        except ControlMismatch as exc:
            path.why_not = f"its blocks computed outside the bridge missed the base run ({exc})"
            log.info("exact edge patching: %s; the patched forwards run through the bridge", path.why_not)
            path.own = None
        except ReadoutMismatch as exc:
            log.info("exact edge patching: the logit difference read from the output head's input does not reproduce "
                     "this model's (%s); the head runs", exc)  # fmt: skip
            path.readout, path.own, path.why_not = None, None, "the logit difference is read through the output head"
        except _LateStartMismatch as exc:
            if not path.late:
                raise
            log.info("exact edge patching: a late start does not reproduce this model's forward (%s); every block runs", exc)
            path.late = False


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
    n, n_l, own = job.n, job.model.n_layers, path.own
    if own is not None:  # every row from its reader's block, logits edges after the last block (own_blocks module doc)
        start = job.r_layer.copy()
    else:
        start = np.minimum(job.r_layer, n_l - 1) if path.late else np.zeros_like(job.r_layer)
    tally = _Tally(values=np.full((n, len(job.ids)), np.nan), clean=np.zeros(n), corrupt=np.zeros(n))
    needed = [] if own is not None else sorted({int(s) for s in start if s > 0})  # own blocks carry their controls' streams
    ticks = _Ticks(job)
    for rows in pair_groups(job.model, job.graph, job.base_set, job.batch_size, len(needed)):
        group = _capture(job, path, rows, needed, max(job.batch_size, capture_rows), tally)  # the capture runs through the bridge
        # A sender whose output is the same in both runs (delta exactly 0 at every position) patches nothing:
        # those (edge, pair) values are exactly 0 and their rows are not run.
        moves = (group.delta != 0).flatten(2).any(-1).cpu().numpy()  # [pair, sender]
        order = np.argsort(start, kind="stable")
        pair_of, col_of = np.nonzero(moves[:, job.sender_idx[order]].T)[::-1]  # edge-major within a start layer
        col_of = order[col_of]
        tally.values[np.ix_(group.rows, np.arange(len(job.ids)))] = 0.0
        still = len(rows) * len(job.ids) - len(pair_of)  # cells of senders that move nothing: exactly 0, not run
        with torch.inference_mode():
            if own is not None:  # one pass per max_rows rows (controls included), each row joining at its reader's block
                per_pass = max(1, max_rows - len(rows))  # at most one control per pair of the group
                for c0 in range(0, len(pair_of), per_pass):
                    p_i, c_j = pair_of[c0 : c0 + per_pass], col_of[c0 : c0 + per_pass]
                    tally.values[group.rows[p_i], c_j] = _own_pass(job, path, group, p_i, c_j, start, tally)
                    ticks.tick(still + c0 + len(p_i))
            for c0, c1 in [] if own is not None else _chunks(start[col_of], max_rows):
                p_i, c_j = pair_of[c0:c1], col_of[c0:c1]
                tally.values[group.rows[p_i], c_j] = _bridge_chunk(job, path, group, p_i, c_j, int(start[c_j].min()), tally)
                ticks.tick(still + c1)
        ticks.tick(still + len(pair_of))  # the group whole, also when it ran nothing
        ticks.before += len(rows) * len(job.ids)
    return tally


def _capture(job: _Job, path: _Path, rows: list[int], needed: list[int], per_forward: int, tally: _Tally) -> _Group:
    """One group's capture forwards (both runs in one when the metric reads the same targets): the senders' outputs
    and their differences, the values, the streams entering ``needed`` blocks; the base values read the way the
    patched ones are (the head's input, or the logits); the additivity check on the first one."""
    model, graph, base_set, other_set, own = job.model, job.graph, job.base_set, job.other_set, path.own
    tok_b, lengths, _width = base_set.batch(rows)
    tok_o, _, _ = other_set.batch(rows)
    seen: dict = {}
    # row 0 of the first forward: a base row (own blocks: the readers read the stream they compute, by construction)
    extra = [] if job.checked or own is not None else additivity_hooks(model, graph, seen)
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
        if not bool((miss <= LATE_START_ATOL).all()):
            i = int(miss.argmax())
            raise ReadoutMismatch(f"{float(read[i])!r} against the logits' {float(full[i])!r}")
        base_v = read[: len(rows)]
    if not job.checked and own is None:
        check_additivity(model, graph, out_b, seen)  # refuses the model before any patched forward
        job.checked.append(True)
    (tally.clean if job.direction == "noising" else tally.corrupt)[rows] = v_b.numpy()
    (tally.corrupt if job.direction == "noising" else tally.clean)[rows] = v_o.numpy()
    stream0 = out_b[:, 0].clone() if own is not None else None  # sender 0: the stream entering block 0
    delta = sender_deltas(graph, job.norms, out_b, out_o)
    return _Group(rows=np.asarray(rows), tokens=tok_b, lengths=lengths, base_v=base_v, delta=delta, resid=resid, stream0=stream0)


def _own_pass(job: _Job, path: _Path, group: _Group, p_i: np.ndarray, c_j: np.ndarray, start: np.ndarray, tally: _Tally) -> np.ndarray:
    """Rows ``(p_i, c_j)`` in one pass of the own blocks (:func:`~headlens.analyses.circuits.own_blocks.pass_values`)."""
    assert path.own is not None and path.readout is not None and group.stream0 is not None  # own_blocks needs the readout
    vals = pass_values(path.own, path.readout, job.base_set, group.delta, group.stream0, group.rows, group.lengths, p_i,
                       start[c_j], job.which[c_j], job.slot[c_j], job.sender_idx[c_j], group.base_v, _EPS, LATE_START_ATOL)  # fmt: skip
    n_l = job.model.n_layers
    tally.rows_run += float(np.maximum(0, n_l - start[c_j]).sum()) / n_l + len(np.unique(p_i))  # controls: every block
    tally.ran_late = tally.ran_late or bool((start[c_j] > 0).any())
    return vals


def _bridge_chunk(job: _Job, path: _Path, group: _Group, p_i: np.ndarray, c_j: np.ndarray, layer: int, tally: _Tally) -> np.ndarray:
    """Rows ``(p_i, c_j)`` (one start block ``layer``) in one patched forward through the bridge; from a later block
    with the group's longest pair as an unpatched control row, last, that must reproduce its base value."""
    model, base_set = job.model, job.base_set
    patches: list[PatchLike] = []
    for name in dict.fromkeys(job.hook_of[c_j].tolist()):
        at = np.flatnonzero(job.hook_of[c_j] == name)
        sl = job.slot[c_j[at]]
        if (sl < 0).any() != (sl < 0).all():  # a hook point has a slot dim for every reader or for none
            raise RuntimeError(f"readers of {name} with and without a slot")
        dev = group.delta.device
        d = group.delta[torch.from_numpy(p_i[at]).to(dev), torch.from_numpy(job.sender_idx[c_j[at]]).to(dev)]
        patches.append(Patch(site=Site(hook=name), setter=_add_hook(torch.from_numpy(at), None if sl[0] < 0 else torch.from_numpy(sl), d)))
    control = int(group.lengths.argmax())  # the group's longest pair: the late start's check (module doc)
    p_run = np.append(p_i, control) if layer > 0 else p_i  # the control row: no patch, last in the batch
    pick = torch.from_numpy(p_run)
    start = Start(layer=layer, resid=group.resid[layer][pick.to(group.resid[layer].device)]) if layer > 0 else None
    kept: dict[str, Tensor] = {}
    if path.readout is not None:
        patches.append(readout_hook(group.lengths[pick] - 1, kept))
    run = patched_runner(model, patches, start=start)
    if path.readout is not None:
        try:
            run(group.tokens[pick])
        except ValueError as exc:  # the head's input is not [row, pos, d_model] here
            raise ReadoutMismatch(str(exc)) from exc
        r_ids = torch.from_numpy(group.rows[p_run])
        assert base_set.correct is not None and base_set.incorrect is not None  # logit-diff (readout_of)
        vals = path.readout.values(kept["h"], base_set.correct[r_ids], base_set.incorrect[r_ids])
    else:
        vals = model_values(model, group.tokens[pick], group.lengths[pick], base_set, group.rows[p_run].tolist(), run=run)
    vals = vals.detach().double().cpu()
    if layer > 0:
        want, got = float(group.base_v[control]), float(vals[-1])
        if not abs(got - want) <= LATE_START_ATOL * max(1.0, abs(want)):
            raise _LateStartMismatch(f"from block {layer}: {got!r} against the full forward's {want!r}")
        vals = vals[:-1]
        tally.ran_late = True
    tally.rows_run += len(p_i) * (model.n_layers - layer) / model.n_layers
    return change(vals, group.base_v[torch.from_numpy(p_i)], _EPS).numpy()


def _chunks(starts: np.ndarray, max_rows: int) -> list[tuple[int, int]]:
    """``(begin, end)`` of each forward over rows sorted by start layer: at most ``max_rows`` rows, one start layer each
    (a forward spanning two would run the later layer's rows through blocks they do not need)."""
    cuts = [0, *np.flatnonzero(np.diff(starts)) + 1, len(starts)]
    return [(c0, min(c0 + max_rows, b)) for a, b in itertools.pairwise(cuts) for c0 in range(a, b, max_rows)]


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
