"""The metric under a sequence of head masks, each continued from the last run's residual streams.

The pruning sweep's random-order control measures the model with the first ``n`` heads of an
order removed, for growing ``n``: consecutive masks differ only by the heads added, and the
residual stream entering every layer before the first layer with an added head is the same as
in the previous run.  :class:`MaskSequence` keeps the residual entering each layer from its last
run and continues the next run from the first layer where the masks differ
(:func:`headlens.probes.patch.patched_runner` from a :class:`~headlens.probes.patch.Start`, checked against a full forward once;
full forwards when that check fails or the residuals would not fit in ``MAX_CACHE_BYTES``).
The numbers are those of a full forward per mask (:func:`headlens.analyses.ablation.runs.ablated_values`),
to float rounding.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

from headlens.analyses.ablation.hooks import mask_hooks
from headlens.analyses.ablation.runs import ablated_values
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask
from headlens.analyses.measure.metrics import model_values
from headlens.probes.hooks import HookFn
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import Start, check_start, patched_runner, resid_site

__all__ = ["MaskSequence", "MAX_CACHE_BYTES", "stream_bytes"]

log = logging.getLogger(__name__)

#: The residuals kept between runs (``layers x items x pos x d_model`` values) stay under this.
MAX_CACHE_BYTES = 2 * 2**30


def stream_bytes(model: LoadedModel, positions: int, layers: int) -> int:
    """Bytes of the residual streams of ``positions`` token positions kept at ``layers`` blocks (the model's dtype)."""
    return layers * positions * int(model.bridge.cfg.d_model) * torch.empty((), dtype=model.dtype).element_size()


class MaskSequence:
    """``values(heads)``: per-item metric with ``heads`` removed (zero ablation), continuing from
    the previous call's residual streams where the two head sets agree on every earlier layer.
    ``reset()`` forgets them (the next call runs the whole model)."""

    def __init__(self, model: LoadedModel, data: EvalSet, *, batch_size: int = 8, reuse: bool = True) -> None:
        self.model, self.data, self.batch_size = model, data, batch_size
        n, width = data.tokens.shape
        size = stream_bytes(model, n * width, model.n_layers)
        self.reuse = reuse and model.n_layers > 1 and size <= MAX_CACHE_BYTES and data.metric != "embedding"
        if self.reuse:
            self.reuse = check_start(model, data.longest()[0], range(1, model.n_layers))
        self.resid: dict[int, Tensor] = {}
        self.last: frozenset[tuple[int, int]] | None = None
        self.runs: dict[int, int] = {}  # first layer run -> how many runs (for the manifest and tests)

    def reset(self) -> None:
        self.resid, self.last = {}, None

    def _mask(self, heads: frozenset[tuple[int, int]]) -> HeadMask | None:
        return (
            HeadMask.from_heads(sorted(heads), n_layers=self.model.n_layers, n_heads=self.model.n_heads, model=self.model.name)
            if heads
            else None
        )

    def values(self, heads: set[tuple[int, int]] | frozenset[tuple[int, int]]) -> Tensor:
        heads = frozenset(heads)
        mask = self._mask(heads)
        if not self.reuse:
            self.runs[0] = self.runs.get(0, 0) + 1
            return ablated_values(self.model, self.data, [], mask=mask, batch_size=self.batch_size)
        start = 0
        if self.last is not None:
            changed = heads ^ self.last
            start = min((layer for layer, _ in changed), default=self.model.n_layers - 1)
        self.runs[start] = self.runs.get(start, 0) + 1
        out = self._run(mask, start)
        self.last = heads
        return out

    def _run(self, mask: HeadMask | None, start: int) -> Tensor:
        model, data = self.model, self.data
        n, width_all = data.tokens.shape
        keep_layers = range(max(start, 1), model.n_layers)
        for layer in keep_layers:
            if layer not in self.resid:
                self.resid[layer] = torch.zeros(n, width_all, int(model.bridge.cfg.d_model), dtype=model.dtype)
        state: dict[str, Any] = {}

        def keeper(layer: int) -> HookFn:
            def fn(x: Tensor, hook: Any = None) -> None:
                self.resid[layer][state["rows"], : x.shape[1]] = x.detach().to("cpu")

            return fn

        values = torch.zeros(n, dtype=torch.float64)
        with torch.inference_mode():
            for rows in data.rows(self.batch_size):
                tokens, lengths, width = data.batch(rows)
                state["rows"] = rows
                hooks = mask_hooks(mask, from_layer=start) + [
                    (resid_site(layer).hook, keeper(layer)) for layer in keep_layers if layer > start
                ]
                begin = None if start == 0 else Start(layer=start, resid=self.resid[start][rows, :width].to(model.device))
                vals = model_values(model, tokens, lengths, data, rows, run=patched_runner(model, hooks, start=begin))
                values[rows] = vals.cpu()
        return values
