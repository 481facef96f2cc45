"""Referent heads (pronoun -> antecedent): attention from the pronoun to its antecedent.

Stimulus: sentences with a pronoun, its antecedent and a distractor that cannot be the
antecedent (gender or number).  Score = ``A[pronoun, antecedent]``; ``accuracy`` = whether
the antecedent gets more attention than the distractor (Clark et al. 2019 scored BERT
heads this way).  Uniform baseline: ``1/(pronoun + 1)`` (for accuracy, a uniform head
ties, which does not count as a win).

In a sliding-window layer the baseline is ``1/min(pronoun + 1, window)``; a sentence whose
antecedent lies outside the pronoun's window is not measurable (NaN score, baseline and
accuracy), and accuracy is NaN too where only the distractor lies outside it (the head
cannot attend to the distractor, so winning against it says nothing).
"""

from __future__ import annotations

import torch

from analyses.detectors.base import BatchContext, Detector, DetectorOutput, uniform_weight, visible


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
    baseline = uniform_weight(p[:, 0], ctx.window)
    accuracy = (to_ante > to_dist).float()
    if ctx.window is not None:
        seen = visible(p[:, 0], a[:, 0], ctx.window)  # [batch]
        both = seen & visible(p[:, 0], d[:, 0], ctx.window)
        nan = torch.tensor(float("nan"), device=dev)
        to_ante = torch.where(seen[:, None], to_ante, nan)
        baseline = torch.where(seen, baseline, nan)
        accuracy = torch.where(both[:, None], accuracy, nan)
    return DetectorOutput(to_ante, baseline, extra={"accuracy": accuracy})


DETECTOR = Detector(
    name="referent",
    stimulus="referent",
    threshold=0.3,
    summary="A[pronoun, antecedent] on pronoun sentences; accuracy = antecedent beats distractor",
    compute=compute,
    extra_thresholds={"accuracy": 0.6},
    window_rule="a sentence counts only when its antecedent is inside the pronoun's window (accuracy: the distractor too)",
)
