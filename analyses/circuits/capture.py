"""Exact patching's capture forward: the senders' outputs, the metric values and the stored streams of the base and
other runs, through the bridge (:mod:`~headlens.analyses.circuits.exact`).

Pairs are taken in groups whose stores fit in :data:`GROUP_BYTES`; a group runs ``per_forward`` pairs per forward.
Under the logit-diff readout the values are also read from the output head's input (:mod:`~headlens.analyses.circuits.readout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.hooks import sender_capture
from headlens.analyses.circuits.readout import Readout, at_last, capture_hook
from headlens.analyses.measure.metrics import model_values
from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import patched_runner, resid_site
from headlens.probes.reader_rows import ReadoutMismatch

__all__ = ["GROUP_BYTES", "capture", "capture_group", "pair_groups"]

#: Device memory (bytes) for one group of pairs' stored senders' outputs, deltas and residuals: pairs are
#: taken together (at least ``batch_size`` of them) while their stores fit, so that the patched forwards
#: fill ``max_rows`` rows from every pair of the group instead of ``batch_size`` at a time.
GROUP_BYTES = 512 * 2**20


def capture(
    model: LoadedModel,
    graph: EdgeGraph,
    tokens: Tensor,
    data: Any,
    rows: Sequence[int],
    resid_layers: Sequence[int],
    extra: Sequence = (),
    readout: Readout | None = None,
) -> tuple[Tensor, Tensor, dict[int, Tensor], Tensor | None]:
    """The senders' outputs, the metric values, the residuals entering ``resid_layers`` and (``readout``) the values
    read from the head's input of one forward."""
    store: dict[str, Tensor] = {}
    resid: dict[int, Tensor] = {}
    head: dict[str, Tensor] = {}

    def keep(layer: int) -> HookFn:
        def fn(x: Tensor, hook: Any = None) -> None:
            resid[layer] = x.detach().clone()

        return fn

    hooks = sender_capture(model, graph, store) + [(resid_site(layer).hook, keep(layer)) for layer in resid_layers] + list(extra)
    if readout is not None:
        hooks.append(capture_hook(head))
    lengths = data.lengths[list(rows)]
    with torch.inference_mode():
        vals = model_values(model, tokens, lengths, data, rows, run=patched_runner(model, hooks))
        read = None
        if readout is not None:
            assert data.correct is not None and data.incorrect is not None  # logit-diff (readout_of)
            r_ids = torch.as_tensor(list(rows))
            try:
                h = at_last(head["x"], lengths, int(tokens.shape[1]))
            except ValueError as exc:  # the head's input holds neither every position nor the last ones
                raise ReadoutMismatch(str(exc)) from exc
            read = readout.values(h, data.correct[r_ids], data.incorrect[r_ids]).cpu()
    return store["out"].clone(), vals.detach().double().cpu(), resid, read


def capture_group(
    model: LoadedModel,
    graph: EdgeGraph,
    tokens: Tensor,
    data: Any,
    rows: Sequence[int],
    resid_layers: Sequence[int],
    per_forward: int,
    extra: Sequence = (),
    readout: Readout | None = None,
) -> tuple[Tensor, Tensor, dict[int, Tensor], Tensor | None]:
    """:func:`capture` of a group of pairs, ``per_forward`` pairs per forward, the stores concatenated (``extra``
    hooks: attached to the first forward only)."""
    parts = [capture(model, graph, tokens[i : i + per_forward], data, rows[i : i + per_forward], resid_layers, extra if i == 0 else (),
                      readout)
             for i in range(0, len(rows), per_forward)]  # fmt: skip
    out = torch.cat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    vals = torch.cat([p[1] for p in parts])
    resid = {layer: torch.cat([p[2][layer] for p in parts]) for layer in resid_layers}
    read = torch.cat([p[3] for p in parts if p[3] is not None]) if readout is not None else None
    return out, vals, resid, read


def pair_groups(model: LoadedModel, graph: EdgeGraph, data: Any, batch_size: int, n_resid: int) -> list[list[int]]:
    """Consecutive groups of pairs whose stores (:data:`GROUP_BYTES`) fit; at least ``batch_size`` pairs each."""
    n = len(data)
    width = int(data.lengths.max()) if n else 1
    d_model = int(model.bridge.cfg.d_model)
    per_pair = 4 * width * d_model * (3 * len(graph.senders()) + 2 * n_resid)  # float32: out_b, out_o/delta, a gathered copy; resid
    size = max(batch_size, GROUP_BYTES // max(1, per_pair))
    return [list(range(i, min(i + size, n))) for i in range(0, n, size)]
