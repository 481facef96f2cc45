"""Previous-token heads: mean over query positions i >= 1 of ``A[i, i-1]``.

Stimulus: windows of natural text.  With BOS, position 1 (the first text token)
attending to BOS counts as attending to its previous token, as in TransformerLens.
Uniform baseline: mean over the same i of ``1/(i+1)`` (``1/min(i+1, window)`` in a
sliding-window layer; the previous token is inside any window of 2 or more keys).

Encoders (bidirectional, ``[CLS] text [SEP]``): queries and targets are text tokens only
(``[CLS]`` and ``[SEP]`` are neither), and the baseline is ``1/n`` for a prompt of ``n`` real
tokens (a uniform head sees every key).
"""

from __future__ import annotations

import torch

from headlens.analyses.heads.detectors.base import BatchContext, Detector, DetectorOutput, attention_sums_at, mean_from_sums
from headlens.probes.engine import Sums


def partial(rows, ctx: BatchContext, q_offset: int) -> Sums:
    width = rows.shape[-1]
    start, stop = ctx.text_bounds()
    q = torch.arange(start + 1, width, device=rows.device)[None, :].expand(rows.shape[0], -1)
    valid = q < stop.to(rows.device)[:, None]
    return attention_sums_at(rows, q, q - 1, valid, q_offset=q_offset, window=ctx.window, causal=ctx.causal, lengths=ctx.lengths)


def finish(sums: Sums, ctx: BatchContext) -> DetectorOutput:
    return DetectorOutput(*mean_from_sums(sums))


DETECTOR = Detector(
    name="previous_token",
    stimulus="natural",
    threshold=0.5,
    summary="mean A[i, i-1] over query positions i >= 1 of natural-text windows",
    partial=partial,
    finish=finish,
)
