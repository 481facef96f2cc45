"""Small reductions of attention patterns shared by several analyses.

All functions take TransformerLens-ordered patterns ``[batch, head, q, k]`` that are
right-padded, plus the real ``lengths``; padded positions never count.  ``causal=False``
(bidirectional layers, encoders): every real query sees every real key, so every real query
counts and a uniform head gives ``1/n`` to each key of a prompt of ``n`` real tokens.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

__all__ = ["sink_alpha", "uniform_sink_alpha", "query_mask"]


def query_mask(lengths: Int[Tensor, " batch"], width: int, *, start: int = 0, stop: int | None = None) -> Tensor:
    """Boolean ``[batch, q]``: real query positions ``start <= i < length`` (and ``i < stop`` when given)."""
    pos = torch.arange(width, device=lengths.device)
    mask = (pos[None, :] >= start) & (pos[None, :] < lengths[:, None])
    return mask if stop is None else mask & (pos[None, :] < stop)


def sink_alpha(
    pattern: Float[Tensor, "batch head q k"],
    lengths: Int[Tensor, " batch"],
    key: int = 0,
    *,
    window: int | None = None,
    causal: bool = True,
) -> Float[Tensor, "batch head"]:
    """Gu et al. (2024): ``alpha(k) = mean over real queries i >= k of A[i, k]``, per prompt and head.

    In a sliding-window layer (``window`` keys, query ``i`` sees ``i - window < j <= i``) only
    the queries that can see key ``k`` count: ``k <= i < k + window``.  On a bidirectional
    layer (``causal=False``) every real query counts (a prompt of at most ``k`` tokens: 0).
    """
    lengths = lengths.to(pattern.device)
    if not causal:
        mask = query_mask(lengths, pattern.shape[2]) & (lengths > key)[:, None]
        mask = mask.to(pattern.dtype)
        col = pattern[:, :, :, key]
        return (col * mask[:, None, :]).sum(-1) / mask.sum(-1).clamp(min=1)[:, None]
    stop = None if window is None else key + window
    mask = query_mask(lengths, pattern.shape[2], start=key, stop=stop).to(pattern.dtype)  # [batch, q]
    col = pattern[:, :, :, key]  # [batch, head, q]
    count = mask.sum(-1).clamp(min=1)  # [batch]
    return (col * mask[:, None, :]).sum(-1) / count[:, None]


def uniform_sink_alpha(lengths: Int[Tensor, " batch"], key: int = 0, *, window: int | None = None, causal: bool = True) -> Float[Tensor, " batch"]:
    """``sink_alpha`` of a head that attends uniformly: mean over i >= k of ``1/(i+1)``.

    With a sliding ``window``: uniform over the keys the window allows, ``1/min(i+1, window)``,
    averaged over the queries that can see key ``k`` (``k <= i < k + window``).  Bidirectional
    (``causal=False``): ``1/n`` for a prompt of ``n`` real tokens (NaN when ``n <= k``).
    """
    out = torch.empty(len(lengths), dtype=torch.float64)
    for b, n in enumerate(lengths.tolist()):
        if not causal:
            out[b] = 1.0 / n if n > key else float("nan")
        elif window is None:
            i = torch.arange(key, n, dtype=torch.float64)
            out[b] = (1.0 / (i + 1)).mean() if len(i) else float("nan")
        else:
            i = torch.arange(key, min(n, key + window), dtype=torch.float64)
            out[b] = (1.0 / (i + 1).clamp(max=window)).mean() if len(i) else float("nan")
    return out
