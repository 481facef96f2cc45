"""Path patching: how much of the clean behaviour one sender head restores through one receiver
head's query, key or value input alone (Wang et al. 2022).

For a sender ``s`` (layer ``ls``) and a receiver ``r`` (layer ``lr > ls``), on the corrupted inputs:

1. run with ``s``'s ``z`` taken from the clean run and **every other head** (layers ``ls`` to
   ``lr - 1``) frozen at its corrupted ``z``; MLPs and norms recompute.  Keep ``r``'s input
   (``hook_q``, ``hook_k`` or ``hook_v`` of layer ``lr``, head ``r``'s slot);
2. run again with only that input of ``r`` replaced by the kept one; measure the metric.

The effect is the normalised metric of step 2 (:mod:`headlens.analyses.patching.effects`): 0 is
the corrupted run, 1 the clean one.  A previous-token head feeding an induction head by
K-composition restores the induction head's behaviour through ``k`` and not through ``q``; a head
that merely sits upstream restores little through any single input.

Batching: step 1 runs once per sender layer (one copy of the batch per sender head, from block
``ls``, stopped after the last receiver layer), step 2 once per receiver and sender layer (from
block ``lr``).  Under grouped-query attention ``k`` and ``v`` have one slot per key-value head,
shared by a group of query heads: patching receiver ``r``'s ``k`` patches its group's
(``receiver_slot`` in the table says which).

``PathConfig(joint=True)``: step 2 replaces the input of every receiver after the sender's layer
at once, one row per sender (``receiver`` joins them with ``+``, ``receiver_slot`` is -1).  Heads
that share one job (several induction heads) each restore only part of the behaviour; the
sender's joint edge is what it feeds the set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.ablation.hooks import z_hook_name
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.metrics import model_values
from headlens.analyses.patching.config import RECEIVER_INPUTS, PathConfig
from headlens.analyses.patching.effects import Gap, normalised_effects, task_gap
from headlens.analyses.patching.pairs import PairTask, pair_eval_sets
from headlens.analyses.patching.runs import RunCache, cache_run, can_start_late
from headlens.probes.engine_forward import StopForward, stopping
from headlens.probes.errors import InputError, InterventionError
from headlens.probes.head_lists import as_heads
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.patch import Patch, Site, Start, patched_forward

log = logging.getLogger(__name__)

__all__ = ["PathConfig", "PathRun", "RECEIVER_INPUTS", "run_path_patching", "check_receivers", "strongest_edges", "PATH_COLUMNS"]

PATH_COLUMNS = [
    "sender_layer",
    "sender_head",
    "sender",
    "receiver",
    "receiver_input",
    "receiver_slot",
    "effect",
    "effect_low",
    "effect_high",
    "metric",
]


@dataclass
class PathRun:
    table: pd.DataFrame  # PATH_COLUMNS
    gap: Gap
    info: dict[str, Any] = field(default_factory=dict)


def _slot(model: LoadedModel, head: int, which: str) -> int:
    if which == "q":
        return head
    return head // model.kv_group


def _input_hook(layer: int, which: str) -> str:
    return f"blocks.{layer}.attn.hook_{which}"


def _frozen(z_rows: Tensor, sender: Sequence[int] = (), clean_rows: Tensor | None = None) -> HookFn:
    """``hook_z``: every head at its corrupted value (``z_rows`` repeated per copy); copy ``c``'s head ``sender[c]`` at its clean value."""

    if sender and clean_rows is None:
        raise ValueError("a sender at its clean value needs clean_rows")

    def fn(z: Tensor, hook: Any = None) -> Tensor:
        k = z.shape[0] // z_rows.shape[0]
        out = z_rows[:, : z.shape[1]].to(device=z.device, dtype=z.dtype).repeat(k, 1, 1, 1)
        if sender and clean_rows is not None:
            ov = out.view(k, z_rows.shape[0], *out.shape[1:])
            src = clean_rows[:, : z.shape[1]].to(device=z.device, dtype=z.dtype)
            for c, h in enumerate(sender):
                ov[c, :, :, h] = src[:, :, h]
        return out

    return fn


def _run(
    model: LoadedModel, tokens: Tensor, resid: dict[int, Tensor], layer: int, rows: list[int], width: int, k: int, hooks: list, **kw: Any
) -> Any:
    start = Start(layer=layer, resid=resid[layer][rows, :width].to(model.device).repeat(k, 1, 1)) if layer > 0 and layer in resid else None
    return patched_forward(model, tokens, hooks, start=start, **kw)


def _check_input_edits(model: LoadedModel, data: EvalSet, layer: int, which: str) -> None:
    """Refuse when replacing ``hook_{which}`` of ``layer`` (every slot) does not change the output (a post-hoc hook)."""
    tokens, _lengths, _ = data.batch([0])
    with torch.inference_mode():
        base = model.bridge(tokens.to(model.device), return_type="logits")

        def scramble(x: Tensor, hook: Any = None) -> Tensor:
            x = x.flip(1) * 3 + 1
            return x

        with attached(model.bridge, [(_input_hook(layer, which), scramble)]):
            moved = model.bridge(tokens.to(model.device), return_type="logits")
    if torch.equal(base, moved):
        raise InterventionError(
            f"path patching: replacing hook_{which} of layer {layer} does not change this model's output, so a patch there would not take "
            "effect",
            layer=layer,
        )


def check_receivers(model: LoadedModel, receivers: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The receivers without repeats; one-line :class:`InputError` for a head the model lacks or one in layer 0."""
    receivers = list(dict.fromkeys(as_heads(receivers, name="receivers")))
    check_layers_heads(model, None, tuple(receivers))
    for layer, head in receivers:
        if layer == 0:
            raise InputError(f"receiver {layer}.{head} is in layer 0: no head sends to it", head=f"{layer}.{head}")
    return receivers


@dataclass
class _Paths:
    """What both steps of a path-patching run share: the pairs' runs (``clean`` and ``corrupt``
    cached), the receivers and their input slots, the senders by layer, and the receivers' inputs
    kept by step 1 (``(sender layer, sender head, receiver) -> [item, pos, d_head]``)."""

    model: LoadedModel
    corrupt_set: EvalSet
    clean: RunCache
    corrupt: RunCache
    receivers: list[tuple[int, int]]
    slots: dict[tuple[int, int], int]
    which: str
    gap: Gap
    config: PathConfig
    sender_heads: dict[int, list[int]]
    kept: dict[tuple[int, int, tuple[int, int]], Tensor] = field(default_factory=dict)


def _keep_inputs(p: _Paths, ls: int, n_pos: int) -> None:
    """Step 1 for the senders of layer ``ls``: the receivers' inputs with each sender patched (one copy
    each) and every other head frozen at its corrupted ``z``, into ``p.kept``."""
    model, corrupt_set, clean, corrupt, which = p.model, p.corrupt_set, p.clean, p.corrupt, p.which
    heads, top, n = p.sender_heads[ls], max(layer for layer, _ in p.receivers), len(corrupt_set)
    needed = sorted({lr for lr, _ in p.receivers if lr > ls})
    for rows in corrupt_set.rows(p.config.batch_size):
        tokens, _lengths, width = corrupt_set.batch(rows)
        zc = {layer: corrupt.z[layer][rows, :width] for layer in range(ls, top)}
        hooks: list = [(z_hook_name(ls), _frozen(zc[ls], heads, clean.z[ls][rows, :width]))]
        hooks += [(z_hook_name(layer), _frozen(zc[layer])) for layer in range(ls + 1, top)]
        got: dict[int, Tensor] = {}

        def keeper(lr: int) -> HookFn:
            def fn(x: Tensor, hook: Any = None) -> None:
                got[lr] = x.detach().clone()
                if lr == needed[-1]:
                    raise StopForward  # the rest of the forward is not needed

            return fn

        hooks += [(_input_hook(lr, which), keeper(lr)) for lr in needed]
        with stopping():
            _run(model, tokens.repeat(len(heads), 1), corrupt.resid, ls, rows, width, len(heads), hooks)
        for r in p.receivers:
            if r[0] <= ls:
                continue
            x = got[r[0]].view(len(heads), len(rows), width, *got[r[0]].shape[2:])
            for c, h in enumerate(heads):
                store = p.kept.setdefault((ls, h, r), torch.zeros(n, n_pos, x.shape[-1], dtype=x.dtype))
                store[rows, :width] = x[c, :, :, p.slots[r]].cpu()


def _receiver_rows(p: _Paths, r: tuple[int, int], ls: int) -> list[list[Any]]:
    """Step 2 for receiver ``r`` and the senders of layer ``ls``: its input replaced by the kept one,
    one copy per sender; one row per sender."""
    model, corrupt_set, clean, corrupt, config = p.model, p.corrupt_set, p.clean, p.corrupt, p.config
    lr, heads = r[0], p.sender_heads[ls]
    H = len(heads)
    values = torch.zeros(H, len(corrupt_set), dtype=torch.float64)
    for rows in corrupt_set.rows(config.batch_size):
        tokens, lengths, width = corrupt_set.batch(rows)
        repl = torch.cat([p.kept[(ls, h, r)][rows, :width] for h in heads])
        hooks = [Patch(site=Site(hook=_input_hook(lr, p.which), heads=p.slots[r]), value=repl)]

        def run(t: Tensor, _h: list = hooks, _rows: list = rows, _w: int = width, **kw: Any) -> Any:
            return _run(model, t, corrupt.resid, lr, _rows, _w, H, _h, **kw)

        values[:, rows] = model_values(model, tokens, lengths, corrupt_set, rows, copies=H, run=run).cpu().view(H, len(rows))
    eff, low, high = normalised_effects(
        values.numpy(), clean.values.numpy(), corrupt.values.numpy(), p.gap, n_resamples=config.n_resamples, seed=config.seed
    )
    return [
        [ls, h, f"{ls}.{h}", f"{lr}.{r[1]}", p.which, p.slots[r], eff[c], low[c], high[c], float(values[c].mean())]
        for c, h in enumerate(heads)
    ]


def _joint_rows(p: _Paths) -> list[list[Any]]:
    """Step 2 with every receiver after the sender's layer patched at once: one row per sender."""
    model, corrupt_set, clean, corrupt, kept, which, config = p.model, p.corrupt_set, p.clean, p.corrupt, p.kept, p.which, p.config
    receivers, slots, sender_heads = p.receivers, p.slots, p.sender_heads
    n, bs = clean.values.shape[0], config.batch_size
    out_rows = []
    for ls in sorted(sender_heads):
        reach = [r for r in receivers if r[0] > ls]
        start = min(r[0] for r in reach)
        heads = sender_heads[ls]
        H = len(heads)
        values = torch.zeros(H, n, dtype=torch.float64)
        for rows in corrupt_set.rows(bs):
            tokens, lengths, width = corrupt_set.batch(rows)
            hooks = []
            for lr in sorted({r[0] for r in reach}):
                repl = {slots[r]: torch.cat([kept[(ls, h, r)][rows, :width] for h in heads]) for r in reach if r[0] == lr}
                hooks += [Patch(site=Site(hook=_input_hook(lr, which), heads=slot), value=v) for slot, v in repl.items()]

            def run(t: Tensor, _h: list = hooks, _rows: list = rows, _w: int = width, **kw: Any) -> Any:
                return _run(model, t, corrupt.resid, start, _rows, _w, H, _h, **kw)

            values[:, rows] = model_values(model, tokens, lengths, corrupt_set, rows, copies=H, run=run).cpu().view(H, len(rows))
        eff, low, high = normalised_effects(
            values.numpy(), clean.values.numpy(), corrupt.values.numpy(), p.gap, n_resamples=config.n_resamples, seed=config.seed
        )
        label = "+".join(f"{a}.{b}" for a, b in reach)
        for c, h in enumerate(heads):
            out_rows.append([ls, h, f"{ls}.{h}", label, which, -1, eff[c], low[c], high[c], float(values[c].mean())])
    return out_rows


def _sender_heads(model: LoadedModel, top: int, senders: Sequence[tuple[int, int]] | None) -> dict[int, list[int]]:
    """Layer -> its sender heads before layer ``top``: every head, or those of ``senders``."""
    if senders is None:
        return {ls: list(range(model.n_heads)) for ls in range(top)}
    out: dict[int, list[int]] = {}
    for layer, head in sorted(set(as_heads(senders, name="senders"))):
        if layer < top:
            out.setdefault(layer, []).append(head)
    return out


def _path_info(p: _Paths, task: PairTask, metric: str, senders: Sequence[tuple[int, int]] | None, late: bool) -> dict[str, Any]:
    config = p.config
    return {
        "metric": metric,
        "gap": p.gap.describe(),
        "receivers": [f"{a}.{b}" for a, b in p.receivers],
        "receiver_input": p.which,
        "joint": config.joint,
        "senders": "every earlier head" if senders is None else [f"{a}.{b}" for a, hs in sorted(p.sender_heads.items()) for b in hs],
        "started_late": late,
        "frozen": "every head other than the sender, layers sender..receiver-1, at its corrupted z; MLPs recompute",
        "n_resamples": config.n_resamples,
        "seed": config.seed,
        "task": task.describe(),
    }


def run_path_patching(
    model: LoadedModel,
    task: PairTask,
    config: PathConfig,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    senders: Sequence[tuple[int, int]] | None = None,
) -> PathRun:
    """Sender x receiver table (see the module doc); senders are every head before each receiver's
    layer, or only the heads of ``senders`` (those before the receiver's layer: a cheaper run
    that measures the same edges)."""
    receivers = check_receivers(model, config.receivers)
    which, bs = config.receiver_input, config.batch_size
    clean_set, corrupt_set = pair_eval_sets(model, task, batch_size=bs)
    top = max(layer for layer, _ in receivers)
    late = can_start_late(model, clean_set)
    layers = list(range(top))
    clean = cache_run(model, clean_set, z_layers=layers, batch_size=bs)
    corrupt: RunCache = cache_run(
        model, corrupt_set, z_layers=layers, resid_layers=[x for x in range(1, top + 1)] if late else [], batch_size=bs
    )
    gap = task_gap(clean_set.metric, clean.values.numpy(), corrupt.values.numpy(), n_resamples=config.n_resamples, seed=config.seed)
    if not gap.defined:
        log.warning("normalised path-patching effects are undefined: %s", gap.reason)
    slots = {r: _slot(model, r[1], which) for r in receivers}
    for lr in sorted({r[0] for r in receivers}):
        _check_input_edits(model, corrupt_set, lr, which)
    sender_heads = _sender_heads(model, top, senders)
    if senders is not None:
        check_layers_heads(model, None, tuple((a, b) for a, hs in sender_heads.items() for b in hs))
    p = _Paths(model, corrupt_set, clean, corrupt, receivers, slots, which, gap, config, sender_heads)
    total, done = len(sender_heads) * (1 + len(receivers)), 0
    with torch.inference_mode():
        for ls in sorted(sender_heads):  # step 1
            _keep_inputs(p, ls, task.clean.shape[1])
            done += 1
            if progress is not None:
                progress("senders", done, total)
        out_rows = _joint_rows(p) if config.joint else []
        for r in receivers if not config.joint else []:  # step 2, one receiver at a time
            for ls in [layer for layer in sorted(sender_heads) if layer < r[0]]:
                out_rows += _receiver_rows(p, r, ls)
                done += 1
                if progress is not None:
                    progress("receivers", done, total)
    return PathRun(table=pd.DataFrame(out_rows, columns=PATH_COLUMNS), gap=gap, info=_path_info(p, task, clean_set.metric, senders, late))


def strongest_edges(table: pd.DataFrame, k: int = 5) -> pd.DataFrame:
    """The ``k`` edges with the largest effect (by absolute value)."""
    order = np.argsort(-np.abs(table["effect"].to_numpy(dtype=float)), kind="stable")
    return table.iloc[order[:k]].reset_index(drop=True)
