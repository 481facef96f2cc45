"""Induction evidence, the mechanism's own test: how much the loss on repeated tokens depends on
the head's attention to the token after the earlier occurrence.

An induction head, at a token that occurred before, attends to the token that FOLLOWED the
earlier occurrence and copies it.  Zero-ablating the head (:mod:`headlens.analyses.patching.evidence`'s
first test) cannot tell it from a head upstream of the induction heads (a previous-token head
whose output their keys read): ablating either raises the loss on the second copy.  Cutting the
one attention edge the role names can: query = a second-copy token ``i``, key = ``i - T + 1``
(the neighbour of the earlier occurrence ``i - T``), masked with a score edit
(:func:`~headlens.probes.interventions.score_edits`: the key set to ``-inf`` before the
softmax, the head's attention renormalised over the other keys), on every second-copy query at
once.  An upstream head does not attend there, so masking that key moves nothing.

Why not the head's direct logit attribution (the check this replaced): in a deep model an
induction head's output is read and amplified by later layers before it reaches the logits.  On
SmolLM2-135M, zero-ablating induction head 18.6 raises the second-copy loss by 1.8 nats while its
direct attribution is 1% of the induction task's logit-difference gap (the largest of the eight
census induction heads is 7%): a direct-share bar rejected every one of them.

Stimulus: the evidence's repeated random tokens (:func:`~headlens.analyses.patching.duplicate_knockout.repeated_batch`).
Figure per sequence: the mean over the second copy's predictions of tokens 2..T of the loss
(nats) with the edge cut minus without; the mean over sequences with a 95% bootstrap interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import Tensor

from headlens.analyses.measure.metrics import token_nll
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.patching.duplicate_knockout import KNOCKOUTS, knockout_edit, logits_at, repeated_batch
from headlens.probes.interventions import score_edits
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["induction_knockout"]


def induction_knockout(
    model: LoadedModel, *, n: int, T: int, seed: int = 0, batch_size: int = 8
) -> Callable[[tuple[int, int]], tuple[float, float, float]]:
    """``effect(head) -> (rise, low, high)``: the second-copy loss rise (nats) when the head's attention
    to the token after each earlier occurrence is masked, its 95% interval over the ``n`` sequences.
    The unedited pass runs here, once; each ``effect`` call is one more forward (so a caller can say
    progress per head)."""
    tokens, p = repeated_batch(model, n=n, T=T, seed=seed)
    at = slice(p + T, p + 2 * T - 1)  # second-copy tokens 1..T-1, each predicting the next (tokens 2..T)
    target = tokens[:, p + T + 1 : p + 2 * T]
    chunks = [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]

    def loss(layer: int | None, head: int) -> Tensor:
        edits = {} if layer is None else {layer: knockout_edit(head, p=p, T=T, offset=KNOCKOUTS["neighbour"])}
        with score_edits(model, edits), torch.inference_mode():
            return torch.cat([token_nll(logits_at(model, tokens[rows].to(model.device), at), target[rows]).mean(-1) for rows in chunks])

    clean = loss(None, 0)

    def effect(head: tuple[int, int]) -> tuple[float, float, float]:
        rise = (loss(*head) - clean).numpy()
        low, high = bootstrap_mean_ci(rise[:, None], seed=seed)
        log.debug("induction knockout %d.%d: %.4f [%.4f, %.4f]", *head, rise.mean(), low[0], high[0])
        return float(rise.mean()), float(low[0]), float(high[0])

    return effect
