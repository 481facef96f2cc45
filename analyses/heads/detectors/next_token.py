"""Next-token heads: mean over query positions i that have a real next token of ``A[i, i+1]``.

Stimulus: windows of natural text (the previous-token stimulus).  Only bidirectional
attention (encoders such as BERT) can look ahead: on a causal layer every target ``i+1`` is
masked, so the score is *not measurable*: NaN (never 0, never a role), with a note in the
census.  Encoders: queries and targets are text tokens only (not ``[CLS]`` or ``[SEP]``);
uniform baseline ``1/n`` for a prompt of ``n`` real tokens.  Threshold 0.5, as previous-token.
"""

from __future__ import annotations

import torch

from headlens.analyses.heads.detectors.base import BatchContext, Detector, DetectorOutput, attention_sums_at, mean_from_sums
from headlens.probes.engine import Sums


def partial(rows, ctx: BatchContext, q_offset: int) -> Sums:
    width = rows.shape[-1]
    start, stop = ctx.text_bounds()
    q = torch.arange(start, max(width - 1, start), device=rows.device)[None, :].expand(rows.shape[0], -1)
    valid = q + 1 < stop.to(rows.device)[:, None]
    return attention_sums_at(rows, q, q + 1, valid, q_offset=q_offset, window=ctx.window, causal=ctx.causal, lengths=ctx.lengths)


def finish(sums: Sums, ctx: BatchContext) -> DetectorOutput:
    return DetectorOutput(*mean_from_sums(sums))


DETECTOR = Detector(
    name="next_token",
    stimulus="natural",
    threshold=0.5,
    summary="mean A[i, i+1] over query positions with a real next token, natural-text windows (bidirectional attention only)",
    partial=partial,
    finish=finish,
    causal_rule="not measurable on causal attention: every target A[i, i+1] is masked (NaN, never a role)",
)
