"""Duplicate-token evidence: how much the model's predictions at a repeated token depend on the
head's attention to that token's earlier occurrence.

A duplicate-token head, at a token that occurred before, attends to the earlier occurrence and
moves what it reads there into the residual stream.  Its causal prediction: cutting that one
edge (query = the repeat, key = the earlier occurrence) changes what the model predicts at the
repeat, and cutting an edge to a key the head does not need changes less.

Stimulus: ``n`` sequences of ``T`` distinct random tokens repeated once
(:func:`~headlens.analyses.stimuli.random_tokens.random_repeated_tokens`), after the model's
prefix (BOS).  Every second-copy position ``i`` has exactly one earlier occurrence of its
token, at ``e = i - T``.  Two score edits of the head (:func:`~headlens.probes.interventions.score_edits`:
the key set to ``-inf`` before the softmax, the head's attention renormalised over the other
keys), each on every second-copy query at once:

* **match**: key ``e`` (the earlier occurrence) masked;
* **neighbour**: key ``e + 1`` masked, the token that followed the earlier occurrence, which an
  induction head reads (so the test tells the two roles apart; it is never the match, the
  tokens being distinct).

Per sequence, the mean over the second-copy positions of ``KL(clean || edited)`` between the
next-token distributions (nats); the figure is the mean over sequences of
``KL(match) - KL(neighbour)`` with a 95% bootstrap interval over sequences.  The role predicts a
positive figure (:func:`headlens.analyses.patching.evidence.role_evidence` judges it).
A KL, not a loss change: what a duplicate-token head's output does to the loss has no predicted
sign (in IOI it suppresses the repeated name), but the predictions must move.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.stimuli.random_tokens import random_repeated_tokens
from headlens.probes.hooks import attached
from headlens.probes.interventions import Edit, score_edits
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["duplicate_knockout_effects", "knockout_edit", "repeated_batch", "KNOCKOUTS"]

#: The two knocked-out keys, as an offset from the earlier occurrence ``e = i - T``.
KNOCKOUTS = {"match": 0, "neighbour": 1}


def repeated_batch(model: LoadedModel, *, n: int, T: int, seed: int) -> tuple[Int[Tensor, "n pos"], int]:
    """``(tokens, p)``: the model's prefix (``p`` tokens) then ``T`` distinct random tokens twice."""
    special = sorted({int(i) for i in (getattr(model.tokenizer, "all_special_ids", None) or [])})
    body = random_repeated_tokens(n, T, seed, int(model.bridge.cfg.d_vocab), exclude=special, distinct=True)
    prefix, _ = model.frame(True)
    return torch.cat([torch.tensor([prefix] * n, dtype=torch.long).view(n, len(prefix)), body], 1), len(prefix)


def logits_at(model: LoadedModel, tokens: Int[Tensor, "batch pos"], positions: slice) -> Float[Tensor, "batch kept vocab"]:
    """The logits of one forward at ``positions`` only: the unembedding's input is cut to them
    (a hook on ``unembed.hook_in``), so the output head, most of a small model's forward on a 50k
    vocabulary, runs on those positions alone; everything before it runs as in a full forward.
    Each kept row of the matrix product is the full forward's row (bit for bit on one BLAS thread, as
    the evidence tables were checked; on several threads a product of another shape may round apart,
    2e-7 on logits of order 1 measured on 2); a model without that hook point runs the full forward and
    keeps the slice."""
    if "unembed.hook_in" not in model.bridge.hook_dict:
        return model.bridge(tokens, return_type="logits")[:, positions]

    def cut(x: Tensor, hook: Any = None) -> Tensor:
        return x[:, positions]

    with attached(model.bridge, [("unembed.hook_in", cut)]):
        return model.bridge(tokens, return_type="logits")


def knockout_edit(head: int, *, p: int, T: int, offset: int) -> Edit:
    """The score edit that masks, for head ``head``, key ``i - T + offset`` out of every second-copy query ``i``."""

    def edit(scores: Float[Tensor, "batch head q k"]) -> Float[Tensor, "batch head q k"]:
        n_q, n_k = scores.shape[-2], scores.shape[-1]
        start = n_k - n_q  # absolute position of the first query
        q = torch.arange(p + T, min(p + 2 * T, n_k), device=scores.device)
        q = q[q >= start]
        out = scores.clone()
        out[:, head, q - start, q - T + offset] = float("-inf")
        return out

    return edit


def _kl(clean: Tensor, edited: Tensor) -> Tensor:
    """``[n]``: the mean over positions of ``KL(clean || edited)`` (log-probabilities ``[n, pos, vocab]``)."""
    return (clean.exp() * (clean - edited)).sum(-1).mean(-1).cpu()


def duplicate_knockout_effects(
    model: LoadedModel, heads: Sequence[tuple[int, int]], *, n: int, T: int, seed: int = 0, batch_size: int = 8
) -> dict[tuple[int, int], tuple[float, float, float, float, float, int]]:
    """Per head ``(figure, low, high, KL match, KL neighbour, n sequences)`` (see the module doc)."""
    tokens, p = repeated_batch(model, n=n, T=T, seed=seed)
    second = slice(p + T, p + 2 * T)
    chunks = [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]

    def logp(edits: dict[int, Edit] | None, rows: slice) -> Tensor:
        """Next-token log-probabilities at the second-copy positions, float64."""
        with score_edits(model, edits or {}), torch.inference_mode():
            out = logits_at(model, tokens[rows].to(model.device), second)
            return torch.log_softmax(out.double(), -1)

    clean = [logp(None, rows) for rows in chunks]
    out = {}
    for layer, head in heads:
        kl = {}
        for what, offset in KNOCKOUTS.items():
            edit = {layer: knockout_edit(head, p=p, T=T, offset=offset)}
            kl[what] = torch.cat([_kl(c, logp(edit, rows)) for c, rows in zip(clean, chunks, strict=True)]).numpy()
        diff = kl["match"] - kl["neighbour"]
        low, high = bootstrap_mean_ci(diff[:, None], seed=seed)
        out[(layer, head)] = (
            float(diff.mean()),
            float(low[0]),
            float(high[0]),
            float(kl["match"].mean()),
            float(kl["neighbour"].mean()),
            n,
        )
        log.debug("duplicate knockout %d.%d: %s", layer, head, out[(layer, head)])
    return out
