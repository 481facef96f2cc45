"""The demo recipe's losses: the sampled softmax it trains with, the full-softmax held-out loss, the unigram reference."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from headlens.analyses.demo.data import VOCAB_SIZE

__all__ = ["sampled_softmax_loss", "window_losses", "full_loss", "unigram_loss"]


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


#: Targets and vocabulary entries scored at once by :func:`window_losses`: a 128 x 4096 block of
#: logits (2 MiB) stays in the cache, where a row's 255 x 50,257 logits (51 MB) went to memory and back.
_TARGET_BLOCK = 128
_VOCAB_BLOCK = 4096


@torch.no_grad()
def window_losses(model: Any, windows: Int[Tensor, "n seq"], batch_size: int = 8) -> Float[Tensor, " n"]:
    """Each window's mean next-token cross-entropy (nats, full softmax, float64).

    The first token of each window is context only; targets are tokens 1..end. The partition
    function is a log-sum-exp over blocks of the vocabulary (the full softmax, never materialised
    for more than :data:`_TARGET_BLOCK` targets at a time).
    """
    weight = model.lm_head.weight
    out = torch.empty(windows.shape[0], dtype=torch.float64)
    for start in range(0, windows.shape[0], batch_size):
        x = windows[start : start + batch_size]
        hidden = model.transformer(input_ids=x).last_hidden_state[:, :-1].reshape(-1, weight.shape[1])
        y = x[:, 1:].reshape(-1)
        per_target = torch.empty(y.shape[0], dtype=hidden.dtype)
        for t in range(0, y.shape[0], _TARGET_BLOCK):
            h = hidden[t : t + _TARGET_BLOCK]
            parts = [torch.logsumexp(h @ weight[v : v + _VOCAB_BLOCK].T, dim=-1) for v in range(0, weight.shape[0], _VOCAB_BLOCK)]
            per_target[t : t + _TARGET_BLOCK] = torch.logsumexp(torch.stack(parts, dim=-1), dim=-1) - (
                h * weight[y[t : t + _TARGET_BLOCK]]
            ).sum(-1)
        out[start : start + x.shape[0]] = per_target.double().view(x.shape[0], -1).mean(dim=1)
    return out


def full_loss(model: Any, windows: Int[Tensor, "n seq"], batch_size: int = 8) -> float:
    """Mean next-token cross-entropy (nats, full softmax) over every target of ``windows``
    (every window has as many targets, so it is the mean of :func:`window_losses`)."""
    return float(window_losses(model, windows, batch_size).mean())


def unigram_loss(train_stream: torch.Tensor, windows: torch.Tensor) -> float:
    """Cross-entropy of an add-one smoothed unigram model of ``train_stream`` on the targets of ``windows``."""
    counts = torch.bincount(train_stream, minlength=VOCAB_SIZE).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return float(-logp[windows[:, 1:]].mean())
