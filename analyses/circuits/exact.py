"""Exact edge patching: one edge's sender contribution to one reader input replaced, everything else as the base run.

For an edge ``s -> r`` the base run (``direction="noising"``: clean; ``"denoising"``: corrupt)
is repeated with only ``r``'s input changed, by ``out_s(other) - out_s(base)``; every other
reader, and every other slot of ``r``'s hook point, reads the base run's stream.  This is path
patching (:mod:`headlens.analyses.patching.path`) generalised to every node type: head ->
head q/k/v (under GQA the key-value group's slot), any writer -> MLP input, any writer ->
logits.  The metric change ``patched - base`` of each pair is what the estimates estimate.

Batching: a patch at a reader of layer ``l`` leaves blocks ``0..l-1`` as in the base run, so
the forward starts at block ``l`` from the base run's stored stream (logits edges at the last
block, from its output hook), with one copy of the batch per edge, at most ``max_rows`` rows
(copies x pairs) per forward, every row of a forward starting at the same block: an edge at layer ``l``
costs ``(L - l) / L`` of a forward.
Models on which a late start does not reproduce the full forward run every block.  The default
``max_rows`` (:func:`auto_rows`) is as many rows as fit in :data:`ROW_BYTES` (at least 256): on a small
model every (edge, pair) row of one start block goes into one forward, whose fixed cost is most of its time.

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
import functools
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.ablation.metrics import model_values
from headlens.analyses.ablation.suffix import run_from_layer
from headlens.analyses.circuits.capture import capture_group, pair_groups
from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import additivity_hooks, check_additivity, edge_flags, reader_hook, refuse_encoder
from headlens.analyses.circuits.own_blocks import ControlMismatch, OwnBlocks, own_blocks, pass_values
from headlens.analyses.circuits.readout import Readout, ReadoutMismatch, readout_hook, readout_of
from headlens.analyses.circuits.resolution import change
from headlens.analyses.circuits.scores import PerPair, check_direction
from headlens.analyses.circuits.writes import head_sum_norms, sender_deltas
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.probes.errors import InputError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["exact_scores", "auto_rows", "ROW_BYTES", "MIN_AUTO_ROWS", "MAX_AUTO_ROWS"]


#: Device memory (bytes) the activations of one patched forward may take when ``max_rows`` is not given.
ROW_BYTES = 256 * 2**20
#: The default ``max_rows`` is at least this (what it was before it depended on the model) and at most
#: :data:`MAX_AUTO_ROWS` (past that a forward's fixed cost is long amortised).
MIN_AUTO_ROWS, MAX_AUTO_ROWS = 256, 8192


def auto_rows(model: LoadedModel, width: int, *, own: bool = False) -> int:
    """Rows of ``width`` positions per patched forward whose activations fit in :data:`ROW_BYTES`.

    A row's peak, in float32, through the bridge: the split q/k/v inputs of a block (``3 * n_heads`` residual
    copies) and the reader hook's copy of them, the residual stream and its patch, the MLP's hidden layer, one
    head's pattern row per head, and the logits.  ``own`` (:mod:`~headlens.analyses.circuits.own_blocks`): the
    stream, its norm, its patch and the attention output, the fused q/k/v product twice (a patched copy), the
    MLP's hidden layer twice (its activation) and the pattern three times (scores, masked, softmax); no split copies,
    no logits."""
    cfg = model.bridge.cfg
    n_h, d_model = int(cfg.n_heads), int(cfg.d_model)
    d_mlp = int(getattr(cfg, "d_mlp", None) or 4 * d_model)
    d_vocab = int(cfg.d_vocab)
    w = max(1, width)
    if own:
        per_row = 4 * w * (4 * d_model + 6 * n_h * int(cfg.d_head) + 2 * d_mlp + 3 * n_h * w)
    else:
        per_row = 4 * w * (6 * n_h * d_model + 4 * d_model + d_mlp + n_h * w + d_vocab)
    return int(min(MAX_AUTO_ROWS, max(MIN_AUTO_ROWS, ROW_BYTES // per_row)))


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
#: :func:`headlens.analyses.ablation.suffix.check_from_layer` bounds the logits).
LATE_START_ATOL = 1e-5


class _LateStartMismatch(Exception):
    """A forward continued from a later block did not reproduce the full forward's value."""


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
    ``max_rows`` default: :func:`auto_rows`."""
    check_direction(direction)
    n_edges = len(graph.edges)
    ids = np.arange(n_edges) if edge_ids is None else np.asarray(edge_ids, dtype=np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= n_edges):
        raise InputError(f"edge ids must lie in 0..{n_edges - 1}", edge_ids=list(ids[:3]))
    if max_rows is not None and max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}", max_rows=max_rows)
    refuse_encoder(model)
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=batch_size)
    base_set, other_set = (clean_set, corrupt_set) if direction == "noising" else (corrupt_set, clean_set)
    n_l = model.n_layers
    e = graph.edges
    r_layer = e["receiver_layer"].to_numpy()[ids]
    which = e["input"].to_numpy()[ids]
    slot = e["receiver_slot"].to_numpy()[ids]
    sender_idx = _sender_index(graph)[ids]
    hook_of = np.array([reader_hook(int(r_layer[j]), str(which[j]), n_l) for j in range(len(ids))], dtype=object)
    n = len(task)
    norms = head_sum_norms(model)
    width = int(base_set.lengths.max()) if n else 1
    eps = float(torch.finfo(torch.float32).eps)
    checked: list[bool] = []  # the additivity check has run (on the first capture forward)

    def sweep(
        late: bool, readout: Readout | None, own: OwnBlocks | None, max_rows: int, capture_rows: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, bool]:
        if own is not None:  # every row from its reader's block, logits edges after the last block (own_blocks module doc)
            start = r_layer.copy()
        else:
            start = np.minimum(r_layer, n_l - 1) if late else np.zeros_like(r_layer)
        values = np.full((n, len(ids)), np.nan)
        clean_vals, corrupt_vals = np.zeros(n), np.zeros(n)
        rows_run, ran_late = 0.0, False
        needed = [] if own is not None else sorted({int(s) for s in start if s > 0})  # own blocks carry their controls' streams
        groups = pair_groups(model, graph, base_set, batch_size, len(needed))
        cells_before, total, said = 0, n * len(ids), [-1]  # progress: (pair, edge) cells done, after every patched forward
        same = _same_targets(base_set, other_set)  # both runs in one capture: the metric reads the same targets
        per_forward = max(batch_size, capture_rows)  # the capture runs through the bridge
        for rows in groups:
            tok_b, lengths, _width = base_set.batch(rows)
            tok_o, _, _ = other_set.batch(rows)
            seen: dict = {}
            # row 0 of the first forward: a base row (own blocks: the readers read the stream they compute, by construction)
            extra = [] if checked or own is not None else additivity_hooks(model, graph, seen)
            if same:
                g = len(rows)
                out, v, resid, read = capture_group(
                    model, graph, torch.cat([tok_b, tok_o]), base_set, rows + rows, needed, per_forward, extra, readout
                )
                out_b, out_o, v_b, v_o = out[:g], out[g:], v[:g], v[g:]
                resid = {layer: r[:g] for layer, r in resid.items()}
                del out
            else:
                out_b, v_b, resid, read = capture_group(model, graph, tok_b, base_set, rows, needed, per_forward, extra, readout)
                out_o, v_o, _, _ = capture_group(model, graph, tok_o, other_set, rows, [], per_forward)
            # the values the patched ones are measured from: read the way they are (the head's input, or the logits)
            base_v = v_b
            if read is not None:
                full = v if same else v_b
                miss = (read - full).abs() / full.abs().clamp(min=1.0)
                if not bool((miss <= LATE_START_ATOL).all()):
                    i = int(miss.argmax())
                    raise ReadoutMismatch(f"{float(read[i])!r} against the logits' {float(full[i])!r}")
                base_v = read[: len(rows)]
            if not checked and own is None:
                check_additivity(model, graph, out_b, seen)  # refuses the model before any patched forward
                checked.append(True)
            (clean_vals if direction == "noising" else corrupt_vals)[rows] = v_b.numpy()
            (corrupt_vals if direction == "noising" else clean_vals)[rows] = v_o.numpy()
            stream0 = out_b[:, 0].clone() if own is not None else None  # sender 0: the stream entering block 0
            delta = sender_deltas(graph, norms, out_b, out_o)
            del out_b, out_o
            # A sender whose output is the same in both runs (delta exactly 0 at every position) patches nothing:
            # those (edge, pair) values are exactly 0 and their rows are not run.
            moves = (delta != 0).flatten(2).any(-1).cpu().numpy()  # [pair, sender]
            rows_arr = np.asarray(rows)
            control = int(lengths.argmax())  # the group's longest pair: the late start's check (module doc)
            order = np.argsort(start, kind="stable")
            pair_of, col_of = np.nonzero(moves[:, sender_idx[order]].T)[::-1]  # edge-major within a start layer
            col_of = order[col_of]
            values[np.ix_(rows_arr, np.arange(len(ids)))] = 0.0
            still = len(rows) * len(ids) - len(pair_of)  # cells of senders that move nothing: exactly 0, not run

            def tick(ran: int) -> None:
                if progress is not None and cells_before + still + ran != said[0]:  # each count once
                    said[0] = cells_before + still + ran
                    progress("exact", said[0], total)

            with torch.inference_mode():
                if own is not None:  # one pass per max_rows rows (controls included), each row joining at its reader's block
                    assert readout is not None and stream0 is not None  # own_blocks needs the readout
                    per_pass = max(1, max_rows - len(rows))  # at most one control per pair of the group
                    for c0 in range(0, len(pair_of), per_pass):
                        p_i, c_j = pair_of[c0 : c0 + per_pass], col_of[c0 : c0 + per_pass]
                        values[rows_arr[p_i], c_j] = pass_values(
                            own,
                            readout,
                            base_set,
                            delta,
                            stream0,
                            rows_arr,
                            lengths,
                            p_i,
                            start[c_j],
                            which[c_j],
                            slot[c_j],
                            sender_idx[c_j],
                            base_v,
                            eps,
                            LATE_START_ATOL,
                        )
                        rows_run += float(np.maximum(0, n_l - start[c_j]).sum()) / n_l + len(np.unique(p_i))  # controls: every block
                        ran_late = ran_late or bool((start[c_j] > 0).any())
                        tick(c0 + len(p_i))
                for c0, c1 in [] if own is not None else _chunks(start[col_of], max_rows):
                    p_i, c_j = pair_of[c0:c1], col_of[c0:c1]
                    layer = int(start[c_j].min())
                    hooks = []
                    for name in dict.fromkeys(hook_of[c_j].tolist()):
                        at = np.flatnonzero(hook_of[c_j] == name)
                        sl = slot[c_j[at]]
                        if (sl < 0).any() != (sl < 0).all():  # a hook point has a slot dim for every reader or for none
                            raise RuntimeError(f"readers of {name} with and without a slot")
                        d = delta[torch.from_numpy(p_i[at]).to(delta.device), torch.from_numpy(sender_idx[c_j[at]]).to(delta.device)]
                        hooks.append((name, _add_hook(torch.from_numpy(at), None if sl[0] < 0 else torch.from_numpy(sl), d)))
                    p_run = np.append(p_i, control) if layer > 0 else p_i  # the control row: no patch, last in the batch
                    pick = torch.from_numpy(p_run)
                    r0 = resid[layer][pick.to(resid[layer].device)] if layer > 0 else None
                    kept: dict[str, Tensor] = {}
                    if readout is not None:
                        hooks.append(readout_hook(lengths[pick] - 1, kept))
                    run = functools.partial(_patched_forward, model, hooks=hooks, resid=r0, layer=layer)
                    if readout is not None:
                        try:
                            run(tok_b[pick])
                        except ValueError as exc:  # the head's input is not [row, pos, d_model] here
                            raise ReadoutMismatch(str(exc)) from exc
                        r_ids = torch.from_numpy(rows_arr[p_run])
                        assert base_set.correct is not None and base_set.incorrect is not None  # logit-diff (readout_of)
                        vals = readout.values(kept["h"], base_set.correct[r_ids], base_set.incorrect[r_ids])
                    else:
                        vals = model_values(model, tok_b[pick], lengths[pick], base_set, rows_arr[p_run].tolist(), run=run)
                    vals = vals.detach().double().cpu()
                    if layer > 0:
                        want, got = float(base_v[control]), float(vals[-1])
                        if not abs(got - want) <= LATE_START_ATOL * max(1.0, abs(want)):
                            raise _LateStartMismatch(f"from block {layer}: {got!r} against the full forward's {want!r}")
                        vals = vals[:-1]
                        ran_late = True
                    values[rows_arr[p_i], c_j] = change(vals, base_v[torch.from_numpy(p_i)], eps).numpy()
                    rows_run += len(p_i) * (n_l - layer) / n_l
                    tick(c1)
            tick(len(pair_of))  # the group whole, also when it ran nothing
            cells_before += len(rows) * len(ids)
        return values, clean_vals, corrupt_vals, rows_run, ran_late

    late = n_l >= 2
    readout = readout_of(model, base_set.metric)
    own, why_not = own_blocks(model, readout=readout is not None, head_sum_norm=any(x is not None for x in norms))
    if own is None:
        log.debug("exact edge patching: the patched forwards run through the bridge (%s)", why_not)
    while True:
        try:
            rows = max_rows if max_rows is not None else auto_rows(model, width, own=own is not None)
            capture_rows = max_rows if max_rows is not None else auto_rows(model, width)
            with edge_flags(model) if own is None else contextlib.nullcontext():  # own blocks read no reader hook
                values, clean_vals, corrupt_vals, rows_run, ran_late = sweep(late, readout, own, rows, capture_rows)
            break
        except ControlMismatch as exc:
            why_not = f"its blocks computed outside the bridge missed the base run ({exc})"
            log.info("exact edge patching: %s; the patched forwards run through the bridge", why_not)
            own = None
        except ReadoutMismatch as exc:
            log.info("exact edge patching: the logit difference read from the output head's input does not reproduce "
                     "this model's (%s); the head runs", exc)  # fmt: skip
            readout = None
            own, why_not = None, "the logit difference is read through the output head"
        except _LateStartMismatch as exc:
            if not late:
                raise
            log.info("exact edge patching: a late start does not reproduce this model's forward (%s); every block runs", exc)
            late = False
    return PerPair(
        values=values,
        clean=clean_vals,
        corrupt=corrupt_vals,
        metric=base_set.metric,
        method="exact",
        direction=direction,
        edge_ids=ids,
        forwards=2.0 + rows_run / max(1, n),
        # started_late: some forward started after block 0 (and matched its control row); max_rows: the chunk size used;
        # head_skipped: the patched forwards' logit differences were read from the output head's input (module doc);
        # own_blocks: the patched forwards ran outside the bridge (own_blocks module doc), else why not
        info={
            "started_late": ran_late,
            "max_rows": int(rows),
            "head_skipped": readout is not None,
            "own_blocks": own is not None,
            "own_blocks_reason": why_not,
        },
    )


def _patched_forward(
    model: LoadedModel, tokens: Tensor, *, hooks: list, resid: Tensor | None, layer: int, **kwargs: Any
) -> Float[Tensor, "batch pos vocab"]:
    """One patched forward's logits (``kwargs`` to the bridge): from block ``layer`` on the stored stream ``resid``,
    or every block when ``resid`` is None."""
    if resid is not None:
        return run_from_layer(model, tokens, resid, layer, hooks, **kwargs)
    with attached(model.bridge, hooks):
        return model.bridge(tokens.to(model.device), return_type="logits", **kwargs)


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
