"""Sink evidence: the loss change when a head can no longer attend to the first token.

The intervention is ``headlens sinks``' sink removal
(:func:`headlens.analyses.sinks.intervene.removal_edits`): key 0 is masked out of every query
``i >= 1`` of the head, before the softmax, so the head's attention renormalises over the other
keys.  Here it runs per head, and the loss is kept per window so the change gets an interval:
for each evaluation-text window (the sink census's windows,
:func:`headlens.analyses.sinks.batches.census_batch`), the mean next-token loss over its real
predicted positions with the edit minus without it; the figure is the mean over windows with a
95% bootstrap interval over windows.  The verdict follows
:func:`headlens.analyses.measure.verdicts.difference_verdict` (a finding needs an interval that
excludes 0, from at least :data:`~headlens.analyses.measure.verdicts.MIN_ITEMS` windows).

An encoder has no next-token loss: :func:`sink_removal_effects` raises
:class:`~headlens.probes.errors.UnsupportedModelError` (as ``mean_loss`` does), and the
evidence says "not testable here" with that reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.sinks.batches import census_batch, n_windows
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.intervene import removal_edits
from headlens.probes.attention import attention_spec
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.interventions import Edit, score_edits
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, iter_batches

log = logging.getLogger(__name__)

__all__ = ["window_losses", "sink_removal_effects", "SINK_WINDOW"]

#: Tokens per evaluation-text window (the sink census's default, Gu et al.'s 64).
SINK_WINDOW = 64


def window_losses(model: LoadedModel, batch: TokenBatch, edits: Mapping[int, Edit] | None = None, *, batch_size: int = 8) -> np.ndarray:
    """Mean next-token loss of each sequence of ``batch`` (float64 ``[n]``) with score ``edits`` in
    place: the positions :func:`headlens.analyses.sinks.intervene.mean_loss` counts (position
    ``i`` predicts token ``i + 1``, which must be real), averaged per sequence instead of over all."""
    out = np.zeros(len(batch.tokens), dtype=np.float64)
    with score_edits(model, edits or {}), torch.inference_mode():
        for rows, sub in iter_batches(batch, batch_size):
            loss = model.bridge(
                sub.tokens.to(model.device), return_type="loss", loss_per_token=True, attention_mask=sub.attention_mask.to(model.device)
            )
            pos = torch.arange(loss.shape[1], device=loss.device)
            mask = (pos[None, :] + 1 < sub.lengths.to(loss.device)[:, None]).double()
            per = (loss.double() * mask).sum(1) / mask.sum(1).clamp(min=1)
            out[np.asarray(rows)] = per.cpu().numpy()
    return out


def sink_removal_effects(
    model: LoadedModel,
    heads: Sequence[tuple[int, int]],
    *,
    n: int,
    prepend_bos: bool = True,
    window: int = SINK_WINDOW,
    batch_size: int = 8,
    seed: int = 0,
    text: str | None = None,
    step: Callable[[int], None] | None = None,
) -> dict[tuple[int, int], tuple[float, float, float, int]]:
    """Per head ``(mean loss change, low, high, n windows)``: the loss with the head's attention to
    the first token removed minus the loss without the edit, over at most ``n`` windows of ``text``
    (None: the built-in evaluation text; :func:`headlens.analyses.measure.texts.choose_text` chooses it);
    ``step(i)`` after the pass without the edit (``i = 0``) and after each head's (``i`` heads done)."""
    if model.is_encoder:
        family = attention_spec(model).family
        raise UnsupportedModelError(
            f"an encoder ({family}) sees every token it would predict, so it has no next-token loss for sink removal to change",
            family=family,
        )
    config = SinkConfig(window=min(window, model.n_ctx), bos=(prepend_bos,), batch_size=batch_size, seed=seed)
    available = n_windows(model, config, text)
    config = SinkConfig(window=config.window, bos=(prepend_bos,), batch_size=batch_size, seed=seed, n_prompts=min(n, available))
    batch = census_batch(model, config, prepend_bos, text)
    base = window_losses(model, batch, batch_size=batch_size)
    if step is not None:
        step(0)
    out = {}
    for i, (layer, head) in enumerate(heads):
        diff = window_losses(model, batch, removal_edits({layer: [head]}), batch_size=batch_size) - base
        low, high = bootstrap_mean_ci(diff[:, None], seed=seed)
        out[(layer, head)] = (float(diff.mean()), float(low[0]), float(high[0]), len(diff))
        if step is not None:
            step(i + 1)
    return out
