"""The demo recipe's losses: the sampled softmax it trains with, the full-softmax held-out loss, the unigram reference."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from headlens.analyses.demo.data import VOCAB_SIZE

__all__ = ["sampled_softmax_loss", "full_loss", "unigram_loss"]


def sampled_softmax_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    n_neg: int,
    generator: torch.Generator | None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of ``targets`` over the distinct targets plus ``n_neg`` uniform negatives.

    ``hidden [N, d]``, ``weight [V, d]`` (the tied unembedding), ``targets [N]``. The
    negatives' logits get ``log(V / n_neg)`` added (the estimate of the rest of the
    partition function). ``n_neg = 0`` scores against the distinct targets only.
    """
    V = weight.shape[0]
    positives = torch.unique(targets)  # sorted
    cand = positives
    shift = None
    if n_neg:
        drawn = torch.randperm(V, generator=generator)[:n_neg]
        negatives = drawn[~torch.isin(drawn, positives)]
        cand = torch.cat([positives, negatives])
        shift = torch.zeros(cand.numel(), dtype=hidden.dtype)
        shift[positives.numel() :] = math.log(V / n_neg)
    logits = hidden @ weight[cand].T
    if shift is not None:
        logits = logits + shift
    return F.cross_entropy(logits, torch.searchsorted(positives, targets), reduction=reduction)


@torch.no_grad()
def full_loss(model: Any, windows: torch.Tensor, batch_size: int = 8) -> float:
    """Mean next-token cross-entropy (nats, full softmax) over every target of ``windows``.

    The first token of each window is context only; targets are tokens 1..end.
    """
    total, count = 0.0, 0
    weight = model.lm_head.weight
    for start in range(0, windows.shape[0], batch_size):
        x = windows[start : start + batch_size]
        hidden = model.transformer(input_ids=x).last_hidden_state[:, :-1]
        y = x[:, 1:]
        for row in range(x.shape[0]):  # one row at a time keeps the logits small
            logits = hidden[row] @ weight.T
            total += float(F.cross_entropy(logits, y[row], reduction="sum"))
            count += y.shape[1]
    return total / count


def unigram_loss(train_stream: torch.Tensor, windows: torch.Tensor) -> float:
    """Cross-entropy of an add-one smoothed unigram model of ``train_stream`` on the targets of ``windows``."""
    counts = torch.bincount(train_stream, minlength=VOCAB_SIZE).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[windows[:, 1:]].mean())
