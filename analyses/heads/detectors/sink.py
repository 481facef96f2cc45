"""Attention-sink heads (Gu et al. 2024): ``alpha(0) = mean over queries i >= 0 of A[i, 0]``.

Stimulus: windows of natural text (Gu et al. use 64 tokens, no BOS).  A head is a sink
head when alpha > eps (0.3).  Uniform baseline: mean over i of ``1/(i+1)``.

In a sliding-window layer only the queries that can see key 0 (``i < window``) count, for the
score and for the baseline (there ``1/min(i+1, window)``, which is ``1/(i+1)`` for those i).
On a bidirectional layer (encoders) every real query counts, ``[CLS]`` and ``[SEP]`` included,
and the baseline is ``1/n`` for a prompt of ``n`` real tokens.
"""

from __future__ import annotations

from headlens.analyses.heads.detectors.base import BatchContext, Detector, DetectorOutput
from headlens.analyses.measure.attention_stats import alpha_sums, uniform_sink_alpha
from headlens.probes.engine import Sums

#: The key whose attention the sink detector measures.
KEY = 0


def partial(rows, ctx: BatchContext, q_offset: int) -> Sums:
    return alpha_sums(rows, ctx.lengths, q_offset, window=ctx.window, causal=ctx.causal)


def finish(sums: Sums, ctx: BatchContext) -> DetectorOutput:
    score = (sums["score"] / sums["count"].clamp(min=1)[:, None]).float()
    baseline = (
        uniform_sink_alpha(
            ctx.lengths.cpu() if ctx.host_lengths is None else ctx.host_lengths, key=KEY, window=ctx.window, causal=ctx.causal
        )
        .float()
        .to(score.device)
    )
    return DetectorOutput(score, baseline)


DETECTOR = Detector(
    name="sink",
    stimulus="natural",
    threshold=0.3,
    summary="Gu et al. alpha: mean A[i, 0] over all query positions of natural-text windows",
    partial=partial,
    finish=finish,
    window_rule="alpha is averaged over the queries that can see key 0 (i < {window}), not over all queries",
)
