"""Patched rows: a batch of rows, each a copy of a base row with one additive change at one reader input.

A reader input is what a block reads from the residual stream: head ``slot``'s ``q``, ``k`` or ``v``
input (the bridge's split inputs, ``blocks.L.attn.hook_{q,k,v}_input``), the MLP's (``blocks.L.hook_mlp_in``)
or the logits' (``logits``, at ``L == n_layers``: the last block's output).  A patch there leaves blocks
``0..L-1`` as in the base row, so every row runs from its reader's block, from the base row's stored stream.
:class:`ReaderRows` are those rows, :class:`BaseRows` the unpatched ones with what the full forward gave them,
and :meth:`RowForwards.run` runs a chunk of rows on one of two paths, chosen once by :func:`row_forwards`:

* the fast path (:mod:`~headlens.probes.fast_blocks`, GPT-2 read at each row's last position only): one pass per
  chunk, each row joining at its reader's block as a copy of its base row, which runs unpatched from block 0 in the
  same pass (its control) and must reproduce the base row's value (:data:`CONTROL_ATOL`), else
  :class:`ControlMismatch`; a row's change is measured from its control's value;
* the bridge (:func:`~headlens.probes.patch.patched_forward`, :class:`~headlens.probes.patch.Patch` ``add`` at the
  reader's hook point, which the caller switches on): one forward per chunk of one start block, from the stored
  stream entering it (:class:`~headlens.probes.patch.Start`), with the longest base row as an unpatched control that
  must reproduce its value (else :class:`LateStartMismatch`; ``late=False`` runs every block); a row's change is
  measured from its base row's value.  Read at the last position only, the output head gets no position
  (:func:`readout_hook`): its input there is what the caller reads.

The caller reads the values (:class:`Read`) and falls back on a mismatch by changing the :class:`RowForwards`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.probes.fast_blocks import QKV, FastBlocks, Join, Rows, fast_blocks
from headlens.probes.hooks import HookFn
from headlens.probes.patch import Patch, PatchLike, Site, Start, patched_runner

log = logging.getLogger(__name__)

__all__ = [
    "ReaderRows",
    "BaseRows",
    "Read",
    "RowValues",
    "RowForwards",
    "row_forwards",
    "reader_hook",
    "readout_hook",
    "READOUT_HOOK",
    "CONTROL_ATOL",
    "ControlMismatch",
    "LateStartMismatch",
    "ReadoutMismatch",
]

#: The output head's input: a row's value under a last-position read is computed from it.
READOUT_HOOK = "unembed.hook_in"
#: A control row reproduces its base row when its value is within this of the full forward's, relative to
#: ``max(1, |value|)`` (as :func:`headlens.probes.patch.check_start` bounds the logits).
CONTROL_ATOL = 1e-5


class ControlMismatch(Exception):
    """A control row of the fast path missed its base row's value."""


class LateStartMismatch(Exception):
    """A forward continued from a later block did not reproduce the full forward's value."""


class ReadoutMismatch(Exception):
    """A value read from the output head's input did not reproduce the full forward's value."""


def reader_hook(layer: int, which: str, n_layers: int) -> str:
    """The hook point whose value is a reader's input (``which`` in q, k, v, mlp, logits)."""
    if which in QKV:
        return f"blocks.{layer}.attn.hook_{which}_input"
    if which == "mlp":
        return f"blocks.{layer}.hook_mlp_in"
    return f"blocks.{n_layers - 1}.hook_resid_post"


def readout_hook(last: Int[Tensor, " row"], store: dict[str, Tensor]) -> tuple[str, HookFn]:
    """Hook on the head's input: keeps ``h[row, last[row]]`` in ``store["h"]`` and passes on zero positions."""

    def fn(x: Tensor, hook: Any = None) -> Tensor:
        if x.shape[0] != last.shape[0] or int(last.max()) >= x.shape[1]:
            raise ValueError(f"the output head's input has shape {tuple(x.shape)}, not one row per item with every position")
        idx = torch.arange(x.shape[0], device=x.device)
        store["h"] = x[idx, last.to(x.device)].detach()
        return x[:, :0]

    return READOUT_HOOK, fn


@dataclass(frozen=True, kw_only=True)
class ReaderRows:
    """Row ``i`` is base row ``base[i]`` with ``deltas[base[i], change[i]]`` added to reader ``which[i]`` (q, k, v, mlp,
    logits) of block ``layer[i]``, at slot ``slot[i]`` of its hook point (-1: none); ``deltas`` holds each base
    row's candidate changes, so that a chunk gathers only its own."""

    base: np.ndarray
    layer: np.ndarray
    which: np.ndarray
    slot: np.ndarray
    change: np.ndarray
    deltas: Float[Tensor, "base change pos d_model"]

    def __len__(self) -> int:
        return len(self.base)

    def delta(self, at: np.ndarray) -> Float[Tensor, "row pos d_model"]:
        dev = self.deltas.device
        return self.deltas[torch.from_numpy(self.base[at]).to(dev), torch.from_numpy(self.change[at]).to(dev)]


@dataclass(frozen=True, kw_only=True)
class BaseRows:
    """The unpatched rows: the caller's ``ids`` (passed to :class:`Read`, named in errors), ``tokens`` and
    ``lengths``, each one's ``values`` in the full forward (float64), and the streams entering blocks (``0``: the
    embeddings, for the fast path; later blocks: the bridge's late starts, :meth:`RowForwards.streams`)."""

    ids: np.ndarray
    tokens: Int[Tensor, "base pos"]
    lengths: Int[Tensor, " base"]
    values: Float[Tensor, " base"]
    streams: dict[int, Float[Tensor, "base pos d_model"]]


@dataclass(frozen=True, kw_only=True)
class Read:
    """How a row's value is read: ``last(h, ids)`` from the output head's input at each row's last position (the
    fast path needs it), else ``run(runner, tokens, lengths, ids)`` from a runner of the patched forward."""

    last: Callable[[Float[Tensor, "row d_model"], np.ndarray], Tensor] | None = None
    run: Callable[[Callable[..., Any], Tensor, Tensor, np.ndarray], Tensor] | None = None

    def __post_init__(self) -> None:
        if (self.last is None) == (self.run is None):
            raise ValueError("a Read needs exactly one of last and run")


@dataclass(frozen=True, kw_only=True)
class RowValues:
    """A chunk's values (float64) and the unpatched ones each is measured from; ``forwards``: rows x blocks run over
    ``n_layers`` (controls included); ``late``: some row started after block 0."""

    values: Float[Tensor, " row"]
    reference: Float[Tensor, " row"]
    forwards: float
    late: bool


@dataclass(kw_only=True)
class RowForwards:
    """The path of one model's patched rows (module doc): ``fast`` blocks (None: the bridge, ``why_not`` says why),
    from late starts (``late``) or every block.  A caller falls back by setting these."""

    model: Any
    read: Read
    fast: FastBlocks | None
    why_not: str
    late: bool

    def starts(self, layer: np.ndarray) -> np.ndarray:
        """The block each row with a reader of block ``layer`` starts at."""
        if self.fast is not None:  # logits rows after the last block
            return layer.copy()
        return np.minimum(layer, self.model.n_layers - 1) if self.late else np.zeros_like(layer)

    def streams(self, starts: np.ndarray) -> list[int]:
        """The blocks whose entering streams :class:`BaseRows` must hold."""
        return [0] if self.fast is not None else sorted({int(s) for s in starts if s > 0})

    def chunks(self, starts: np.ndarray, max_rows: int, n_bases: int) -> list[tuple[int, int]]:
        """``(begin, end)`` of each chunk of rows sorted by start: at most ``max_rows`` rows with the fast path's controls
        (one per base row of ``n_bases``); through the bridge one start block each (a forward spanning two would run the
        later block's rows through blocks they do not need)."""
        if self.fast is not None:
            per = max(1, max_rows - n_bases)
            return [(c0, min(c0 + per, len(starts))) for c0 in range(0, len(starts), per)]
        cuts = [0, *np.flatnonzero(np.diff(starts)) + 1, len(starts)]
        return [(c0, min(c0 + max_rows, b)) for a, b in itertools.pairwise(cuts) for c0 in range(a, b, max_rows)]

    def run(self, rows: ReaderRows, bases: BaseRows) -> RowValues:
        """The values of one chunk of ``rows`` (sorted by start; through the bridge, one start block)."""
        return _fast_pass(self, rows, bases) if self.fast is not None else _bridge_forward(self, rows, bases)


def row_forwards(model: Any, read: Read, *, head_sum_norm: bool) -> RowForwards:
    """The :class:`RowForwards` of ``model``: the fast path where :func:`~headlens.probes.fast_blocks.fast_blocks` allows
    it, else the bridge; late starts on models of two blocks or more."""
    fast, why_not = fast_blocks(model, last_only=read.last is not None, head_sum_norm=head_sum_norm)
    if fast is None:
        log.debug("patched rows run through the bridge (%s)", why_not)
    return RowForwards(model=model, read=read, fast=fast, why_not=why_not, late=model.n_layers >= 2)


def _missed(got: Tensor, want: Tensor) -> int | None:
    """The row of ``got`` furthest from ``want`` when some miss by more than :data:`CONTROL_ATOL` (relative), else None."""
    miss = (got - want).abs() / want.abs().clamp(min=1.0)
    return None if bool((miss <= CONTROL_ATOL).all()) else int(miss.argmax())


def _fast_pass(fw: RowForwards, rows: ReaderRows, bases: BaseRows) -> RowValues:
    """One pass of the fast blocks: each base row's control from block 0, each row joining at its reader's block."""
    fast, read, n_l = fw.fast, fw.read.last, fw.model.n_layers
    assert fast is not None and read is not None  # fast_blocks(last_only=True)
    controls = np.unique(rows.base)
    n_c = len(controls)
    ctrl_of = np.searchsorted(controls, rows.base)
    stream0 = bases.streams[0]
    dev = stream0.device
    joins, order = [], []  # order: the rows in the order FastBlocks returns them (after the controls)

    def rows_of(at: np.ndarray, attn: bool = False) -> Rows | None:
        if not len(at):
            return None
        order.append(at)
        d, ctrl = rows.delta(at), torch.from_numpy(ctrl_of[at]).to(dev)
        if not attn:
            return Rows(ctrl, d)
        w = torch.tensor([QKV.index(str(k)) for k in rows.which[at]], device=dev)
        return Rows(ctrl, d, w, torch.from_numpy(rows.slot[at]).to(dev))

    for layer in sorted(set(rows.layer.tolist())):
        at = np.flatnonzero(rows.layer == layer)
        kind = rows.which[at]
        attn = rows_of(at[np.isin(kind, QKV)], attn=True)
        joins.append(Join(int(layer), attn, rows_of(at[kind == "mlp"]), rows_of(at[kind == "logits"])))
    order_arr = np.concatenate(order)
    if len(order_arr) != len(rows):
        raise RuntimeError(f"readers of kinds other than {(*QKV, 'mlp', 'logits')} in {sorted(set(rows.which.tolist()))}")
    c_ids = torch.from_numpy(controls)
    h = fast.run(stream0[c_ids.to(dev)].to(fast.dtype), bases.lengths[c_ids] - 1, joins)
    vals = read(h, bases.ids[np.concatenate([controls, rows.base[order_arr]])]).detach().double().cpu()
    ctrl, want = vals[:n_c], bases.values[c_ids]
    if (i := _missed(ctrl, want)) is not None:
        raise ControlMismatch(f"pair {int(bases.ids[controls[i]])}: {float(ctrl[i])!r} against {float(want[i])!r}")
    values = torch.empty(len(rows), dtype=vals.dtype)
    values[torch.from_numpy(order_arr)] = vals[n_c:]
    forwards = float(np.maximum(0, n_l - rows.layer).sum()) / n_l + n_c  # controls: every block
    return RowValues(values=values, reference=ctrl[torch.from_numpy(ctrl_of)], forwards=forwards, late=bool((rows.layer > 0).any()))


def _add_patches(fw: RowForwards, rows: ReaderRows) -> list[PatchLike]:
    """One :class:`Patch` ``add`` per reader hook point of ``rows``: each row's change at its batch row (and slot)."""
    hook_of = np.array([reader_hook(int(lr), str(w), fw.model.n_layers) for lr, w in zip(rows.layer, rows.which, strict=True)])
    patches: list[PatchLike] = []
    for name in dict.fromkeys(hook_of.tolist()):
        at = np.flatnonzero(hook_of == name)
        sl = rows.slot[at]
        if (sl < 0).any() != (sl < 0).all():  # a hook point has a slot dim for every reader or for none
            raise RuntimeError(f"readers of {name} with and without a slot")
        heads = None if sl[0] < 0 else tuple(int(s) for s in sl)
        patches.append(Patch(site=Site(hook=name, rows=tuple(int(a) for a in at), heads=heads), add=rows.delta(at)))
    return patches


def _bridge_forward(fw: RowForwards, rows: ReaderRows, bases: BaseRows) -> RowValues:
    """One patched forward through the bridge of rows of one start block; from a later block with the longest base row
    as an unpatched control row, last, that must reproduce its value."""
    model, n_l = fw.model, fw.model.n_layers
    layer = int(fw.starts(rows.layer).min())
    patches = _add_patches(fw, rows)
    control = int(bases.lengths.argmax())
    p_run = np.append(rows.base, control) if layer > 0 else rows.base  # the control row: no patch, last in the batch
    pick = torch.from_numpy(p_run)
    start = Start(layer=layer, resid=bases.streams[layer][pick.to(bases.streams[layer].device)]) if layer > 0 else None
    kept: dict[str, Tensor] = {}
    if fw.read.last is not None:
        patches.append(readout_hook(bases.lengths[pick] - 1, kept))
    run = patched_runner(model, patches, start=start)
    if fw.read.last is not None:
        try:
            run(bases.tokens[pick])
        except ValueError as exc:  # the head's input is not [row, pos, d_model] here
            raise ReadoutMismatch(str(exc)) from exc
        vals = fw.read.last(kept["h"], bases.ids[p_run])
    else:
        assert fw.read.run is not None
        vals = fw.read.run(run, bases.tokens[pick], bases.lengths[pick], bases.ids[p_run])
    vals = vals.detach().double().cpu()
    if layer > 0:
        want, got = float(bases.values[control]), float(vals[-1])
        if not abs(got - want) <= CONTROL_ATOL * max(1.0, abs(want)):
            raise LateStartMismatch(f"from block {layer}: {got!r} against the full forward's {want!r}")
        vals = vals[:-1]
    reference = bases.values[torch.from_numpy(rows.base)]
    return RowValues(values=vals, reference=reference, forwards=len(rows) * (n_l - layer) / n_l, late=layer > 0)
