"""Referent heads (pronoun -> antecedent): attention from the pronoun to its antecedent.

Stimulus: sentences with a pronoun, its antecedent and a distractor that cannot be the
antecedent (gender or number).  Score = ``A[pronoun, antecedent]``; ``accuracy`` = whether
the antecedent gets more attention than the distractor (Clark et al. 2019 scored BERT
heads this way).  Uniform baseline: ``1/(pronoun + 1)`` (for accuracy, a uniform head
ties, which does not count as a win).
"""

from __future__ import annotations

import torch

from analyses.detectors.base import BatchContext, Detector, DetectorOutput


def compute(pattern, ctx: BatchContext) -> DetectorOutput:
    if ctx.pronoun is None or ctx.antecedent is None or ctx.distractor is None:
        raise ValueError("the referent detector needs pronoun, antecedent and distractor positions")
    dev = pattern.device
    rows = torch.arange(pattern.shape[0], device=dev)[:, None]
    heads = torch.arange(pattern.shape[1], device=dev)[None, :]
    p, a, d = (t.to(dev)[:, None] for t in (ctx.pronoun, ctx.antecedent, ctx.distractor))
    pat = pattern.float()
    to_ante = pat[rows, heads, p, a]  # [batch, head]
    to_dist = pat[rows, heads, p, d]
    baseline = 1.0 / (p[:, 0].float() + 1)
    return DetectorOutput(to_ante, baseline, extra={"accuracy": (to_ante > to_dist).float()})


DETECTOR = Detector(
    name="referent",
    stimulus="referent",
    threshold=0.3,
    summary="A[pronoun, antecedent] on pronoun sentences; accuracy = antecedent beats distractor",
    compute=compute,
    extra_thresholds={"accuracy": 0.6},
)
