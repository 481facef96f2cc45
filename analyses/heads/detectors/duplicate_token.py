"""Duplicate-token heads: on ``x1..xT x1..xT`` (T distinct random tokens), mean attention from
each second-copy position i to the earlier occurrence of its token, ``i - T``.

Uniform baseline: mean over the same i of ``1/(i+1)`` (``1/min(i+1, window)`` in a
sliding-window layer, where positions whose target is outside the window do not count);
``1/n`` on a bidirectional layer (encoders: ``[CLS] x1..xT x1..xT [SEP]``, ``n`` real tokens).
"""

from __future__ import annotations

from headlens.analyses.heads.detectors.base import BatchContext, Detector, DetectorOutput, attention_sums_at, mean_from_sums
from headlens.analyses.heads.detectors.repeated import second_copy_queries
from headlens.probes.engine import Sums


def partial(rows, ctx: BatchContext, q_offset: int) -> Sums:
    q, valid = second_copy_queries(rows, ctx)
    if ctx.seq_len is None:
        raise ValueError("the repeated-sequence detectors need ctx.seq_len (T)")
    return attention_sums_at(rows, q, q - ctx.seq_len, valid, q_offset=q_offset, window=ctx.window, causal=ctx.causal, lengths=ctx.lengths)


def finish(sums: Sums, ctx: BatchContext) -> DetectorOutput:
    return DetectorOutput(*mean_from_sums(sums))


DETECTOR = Detector(
    name="duplicate_token",
    stimulus="repeated",
    threshold=0.3,
    summary="mean A[i, i-T] over second-copy positions of repeated random tokens",
    partial=partial,
    finish=finish,
    window_rule="the target i-T is T keys back: inside the window only when T < {window}",
)
