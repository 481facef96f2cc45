"""The census's passes over one stimulus set: eager (``hook_pattern``) or streaming (q and k).

Both hand the detectors the same :class:`~headlens.analyses.heads.detectors.BatchContext` per
layer and reduce with the same code (``Detector.partial`` over blocks of queries, then
``Detector.finish``): the eager pass gives the whole captured pattern as one block; the
streaming pass (:func:`headlens.probes.streaming.streamed_forward`) recomputes the rows of
``query_block`` queries at a time from the layer's rotated q and k, inside the model's SDPA
forward, so no ``[n, n]`` pattern is ever held (peak ``batch x head x block x n`` floats).
Heads in ``CensusConfig.ablate`` are zeroed on ``hook_z`` (eager) or on the attention
function's per-head output (streaming), the same tensor.

The per-prompt results stay on the model's device (``[prompt, layer, head]`` buffers, float64,
float32 on MPS, which has no float64; every detector's output is float32, so both hold it
exactly) and reach the host once per stimulus set: no per-batch transfer or synchronisation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from headlens.analyses.heads.detectors import BatchContext, Detector
from headlens.analyses.heads.detectors.base import Sums, add_sums
from headlens.analyses.sinks.forward import batch_attention_mask, run_to_last_pattern
from headlens.probes.attention import LayerAttention
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.prompts import iter_batches
from headlens.probes.streaming import pattern_blocks, streamed_forward

if TYPE_CHECKING:
    from headlens.analyses.heads.census import CensusConfig, StimulusSet

__all__ = ["run_pass", "ablation_hooks"]

log = logging.getLogger(__name__)

Arrays = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]


def ablation_hooks(model: LoadedModel, heads: tuple[tuple[int, int], ...]) -> list[tuple[str, Callable[..., Any]]]:
    by_layer = check_layers_heads(model, None, heads) if heads else {}
    hooks = []
    for layer, hs in by_layer.items():
        idx = torch.tensor(hs)

        def zero(z: Tensor, hook: Any = None, idx: Tensor = idx) -> Tensor:
            z = z.clone()
            z[:, :, idx.to(z.device)] = 0
            return z

        hooks.append((f"blocks.{layer}.attn.hook_z", zero))
    return hooks


def run_pass(
    model: LoadedModel,
    stim: StimulusSet,
    detectors: list[Detector],
    config: CensusConfig,
    progress: Callable[[int, int], None] | None,
    windows: list[int | None],
    causal: tuple[bool, ...] | None = None,
    exclude_frame: bool = False,
    *,
    attention: str = "eager",
) -> Arrays:
    """Per detector: scores ``[prompt, layer, head]``, baselines ``[prompt, layer]``, extras."""
    n, L, H = len(stim.batch), model.n_layers, model.n_heads
    device = torch.device(model.device)
    kept = torch.float32 if device.type == "mps" else torch.float64
    scores = {d.name: torch.full((n, L, H), float("nan"), dtype=kept, device=device) for d in detectors}
    baselines = {d.name: torch.full((n, L), float("nan"), dtype=kept, device=device) for d in detectors}
    extras: dict[str, dict[str, Tensor]] = {d.name: {} for d in detectors}
    state: dict[str, Any] = {}

    def layer_ctx(layer: int) -> BatchContext:
        ctx = state["ctx"]
        if causal is not None and not causal[layer]:
            return replace(ctx, causal=False)
        if windows[layer] is not None:
            return replace(ctx, window=windows[layer])
        return ctx

    def store(layer: int, sums: dict[str, Sums], ctx: BatchContext) -> None:
        rows = state["rows"]
        for det in detectors:
            result = det.finish(sums[det.name], ctx)
            scores[det.name][rows, layer] = result.score.to(kept)
            baselines[det.name][rows, layer] = result.baseline.to(kept)
            for key, value in result.extra.items():
                buf = extras[det.name].setdefault(key, torch.full((n, L, H), float("nan"), dtype=kept, device=device))
                buf[rows, layer] = value.to(kept)

    def pattern_hook(layer: int) -> Callable[..., None]:
        def hook(pattern: Tensor, hook: Any = None) -> None:
            ctx = layer_ctx(layer)
            store(layer, {d.name: add_sums(None, d.partial(pattern, ctx, 0)) for d in detectors}, ctx)

        return hook

    def on_layer(la: LayerAttention, q: Tensor, k: Tensor, v: Tensor) -> None:
        ctx = layer_ctx(la.layer)
        sums: dict[str, Sums | None] = {d.name: None for d in detectors}
        for q0, rows in pattern_blocks(la, q, k, state["key_mask"], config.query_block):
            state["widest_block"] = max(state.get("widest_block", 0), rows.shape[2])
            for det in detectors:
                sums[det.name] = add_sums(sums[det.name], det.partial(rows, ctx, q0))
        store(la.layer, sums, ctx)  # type: ignore[arg-type]

    streaming = attention == "streaming"
    ablate = check_layers_heads(model, None, config.ablate) if config.ablate else {}
    hooks = [] if streaming else ablation_hooks(model, config.ablate) + [(f"blocks.{layer}.attn.hook_pattern", pattern_hook(layer)) for layer in range(L)]
    chunks = iter_batches(stim.batch, config.batch_size)
    frame = {"suffix": stim.n_suffix, "exclude_frame": exclude_frame}
    with torch.inference_mode():
        for done, (rows, sub) in enumerate(chunks, start=1):
            pos = {k: v[rows] for k, v in stim.positions.items()}
            state["rows"] = torch.tensor(rows, device=device)
            state["ctx"] = BatchContext(lengths=sub.lengths.to(model.device), host_lengths=sub.lengths, offset=stim.n_prefix, seq_len=stim.seq_len, **frame, **pos)
            mask = batch_attention_mask(sub)
            if streaming:
                state["key_mask"] = mask.to(model.device).bool()
                streamed_forward(model, sub.tokens, mask, on_layer, block=config.query_block, ablate=ablate)
            else:
                run_to_last_pattern(model, sub.tokens, hooks, attention_mask=mask)
            if progress is not None:
                progress(done, len(chunks))
    if streaming:
        log.info("streaming census of %s: widest query block %d of %d positions", stim.kind, state.get("widest_block", 0), int(stim.batch.tokens.shape[1]))
    return _host(scores), _host(baselines), {name: _host(bufs) for name, bufs in extras.items()}


def _host(buffers: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """The device buffers as float64 arrays on the host (one transfer each)."""
    return {name: buf.to("cpu", torch.float64).numpy() for name, buf in buffers.items()}
