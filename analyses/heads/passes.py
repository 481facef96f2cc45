"""The census's pass over one stimulus set: the detectors as reducers of :func:`headlens.probes.engine.reduce_pass`.

The engine owns the forward, eager (``hook_pattern``, the whole pattern as one block) or
streaming (rows of ``query_block`` queries recomputed from q and k, no ``[n, n]`` pattern
held), the heads in ``CensusConfig.ablate`` and the visibility rule; this module builds each
layer's :class:`~headlens.analyses.heads.detectors.BatchContext` and keeps the detectors' outputs.

The per-prompt results stay on the model's device (``[prompt, layer, head]`` buffers, float64,
float32 on MPS, which has no float64; every detector's output is float32, so both hold it
exactly) and reach the host once per stimulus set: no per-batch transfer or synchronisation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.heads.detectors import BatchContext, Detector, DetectorOutput
from headlens.analyses.heads.prefix import Arrays, CensusPrefix
from headlens.analyses.heads.stimulus_sets import StimulusSet
from headlens.probes.engine import LayerView, batch_attention_mask, reduce_pass
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.patch import resid_site
from headlens.probes.prompts import iter_batches

__all__ = ["run_pass"]

log = logging.getLogger(__name__)


class PassSettings(Protocol):
    """What a pass reads of its settings (a :class:`~headlens.analyses.heads.census.CensusConfig`)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def ablate(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def query_block(self) -> int: ...


def run_pass(
    model: LoadedModel,
    stim: StimulusSet,
    detectors: list[Detector],
    config: PassSettings,
    progress: Callable[[int, int], None] | None,
    windows: list[int | None],
    causal: tuple[bool, ...] | None = None,
    exclude_frame: bool = False,
    *,
    attention: str = "eager",
    prefix: CensusPrefix | None = None,
) -> Arrays:
    """Per detector: scores ``[prompt, layer, head]``, baselines ``[prompt, layer]``, extras.

    ``prefix`` (eager only): a recording prefix keeps the stream entering each of its blocks per
    batch and the arrays; a continued one starts each forward at its block from the kept stream
    and takes the layers before it from the recorded arrays (:mod:`headlens.analyses.heads.prefix`)."""
    state = _PassState(model, detectors, len(stim.batch), windows, causal)
    ablate = check_layers_heads(model, None, config.ablate) if config.ablate else {}
    frame: dict[str, Any] = {"suffix": stim.n_suffix, "exclude_frame": exclude_frame}
    keep = prefix.keeps() if prefix is not None else ()
    first = prefix.start if prefix is not None and not prefix.recording else 0
    widest = 0
    chunks = iter_batches(stim.batch, config.batch_size)
    with torch.inference_mode():
        for done, (rows, sub) in enumerate(chunks, start=1):
            pos: dict[str, Any] = {k: v[rows] for k, v in stim.positions.items()}
            state.rows = torch.tensor(rows, device=state.device)
            state.ctx = BatchContext(
                lengths=sub.lengths.to(model.device), host_lengths=sub.lengths, offset=stim.n_prefix, seq_len=stim.seq_len, **frame, **pos
            )
            info = reduce_pass(
                model,
                sub.tokens,
                batch_attention_mask(sub),
                detectors,
                context=state.context,
                on_layer=state.store,
                attention=attention,
                query_block=config.query_block,
                ablate=ablate,
                hooks=[(resid_site(layer).hook, _keeper(prefix, (stim.kind, done - 1, layer))) for layer in keep],
                start=(first, prefix.resid[(stim.kind, done - 1, first)]) if prefix is not None and first else None,
            )
            widest = max(widest, info.widest_block)
            if progress is not None:
                progress(done, len(chunks))
    if attention == "streaming":
        log.info("streaming census of %s: widest query block %d of %d positions", stim.kind, widest, int(stim.batch.tokens.shape[1]))
    arrays = _host(state.scores), _host(state.baselines), {name: _host(bufs) for name, bufs in state.extras.items()}
    return prefix.merge(stim.kind, arrays) if prefix is not None else arrays


class _PassState:
    """The pass's buffers on the device (per detector: scores ``[prompt, layer, head]``, baselines
    ``[prompt, layer]``, extras ``[prompt, layer, head]``, NaN until measured), the rows and the
    :class:`BatchContext` of the batch running, and each layer's context (bidirectional, window)."""

    def __init__(
        self, model: LoadedModel, detectors: list[Detector], n: int, windows: list[int | None], causal: tuple[bool, ...] | None
    ) -> None:
        L, H = model.n_layers, model.n_heads
        self.device = torch.device(model.device)
        self.kept = torch.float32 if self.device.type == "mps" else torch.float64
        self.shape = (n, L, H)
        self.scores = {d.name: torch.full((n, L, H), float("nan"), dtype=self.kept, device=self.device) for d in detectors}
        self.baselines = {d.name: torch.full((n, L), float("nan"), dtype=self.kept, device=self.device) for d in detectors}
        self.extras: dict[str, dict[str, Tensor]] = {d.name: {} for d in detectors}
        self.windows, self.causal = windows, causal
        self.rows: Tensor | None = None
        self.ctx: BatchContext | None = None

    def context(self, view: LayerView) -> BatchContext:
        layer, ctx = view.layer.layer, self.ctx
        assert ctx is not None
        if self.causal is not None and not self.causal[layer]:
            return replace(ctx, causal=False)
        if self.windows[layer] is not None:
            return replace(ctx, window=self.windows[layer])
        return ctx

    def store(self, layer: int, outputs: dict[str, DetectorOutput], ctx: BatchContext) -> None:
        rows = self.rows
        for name, result in outputs.items():
            self.scores[name][rows, layer] = result.score.to(self.kept)
            self.baselines[name][rows, layer] = result.baseline.to(self.kept)
            for key, value in result.extra.items():
                buf = self.extras[name].setdefault(key, torch.full(self.shape, float("nan"), dtype=self.kept, device=self.device))
                buf[rows, layer] = value.to(self.kept)


def _keeper(prefix: CensusPrefix | None, key: tuple[str, int, int]) -> Callable[..., None]:
    """A hook keeping the stream it sees in ``prefix.resid[key]`` (``(set, batch, layer)``)."""

    def fn(x: Tensor, hook: Any = None) -> None:
        assert prefix is not None
        prefix.resid[key] = x.detach().clone()

    return fn


def _host(buffers: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """The device buffers as float64 arrays on the host (one transfer each)."""
    return {name: buf.to("cpu", torch.float64).numpy() for name, buf in buffers.items()}
