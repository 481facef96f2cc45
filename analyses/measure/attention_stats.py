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

__all__ = ["alpha_sums", "sink_alpha", "uniform_sink_alpha", "query_mask"]


def query_mask(lengths: Int[Tensor, " batch"], width: int, *, start: int = 0, stop: int | None = None) -> Tensor:
    """Boolean ``[batch, q]``: real query positions ``start <= i < length`` (and ``i < stop`` when given)."""
    pos = torch.arange(width, device=lengths.device)
    mask = (pos[None, :] >= start) & (pos[None, :] < lengths[:, None])
    return mask if stop is None else mask & (pos[None, :] < stop)


def alpha_sums(
    rows: Float[Tensor, "batch head block k"],
    lengths: Int[Tensor, " batch"],
    q_offset: int = 0,
    *,
    key: int = 0,
    window: int | None = None,
    causal: bool = True,
    start: int = 0,
) -> dict[str, Tensor]:
    """Sums of :func:`sink_alpha` over the rows of queries ``q_offset .. q_offset + block - 1``:
    ``score`` ``[batch, head]`` (``A[i, key]`` over the counted queries), ``count`` ``[batch]``.
    ``start`` > 0 also leaves out queries before it.  At least float32."""
    dev = rows.device
    dt = torch.promote_types(rows.dtype, torch.float32)
    lengths = lengths.to(dev)
    pos = torch.arange(q_offset, q_offset + rows.shape[2], device=dev)[None, :]
    real = pos < lengths[:, None]
    if not causal:
        mask = real & (lengths > key)[:, None] & (pos >= start)
    else:
        mask = real & (pos >= max(key, start))
        if window is not None:
            mask = mask & (pos < key + window)
    m = mask.to(dt)
    col = rows[:, :, :, key].to(dt)
    return {"score": (col * m[:, None, :]).sum(-1), "count": m.sum(-1)}


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
    (:func:`alpha_sums` over the whole pattern as one block.)
    """
    sums = alpha_sums(pattern, lengths, 0, key=key, window=window, causal=causal)
    return sums["score"] / sums["count"].clamp(min=1)[:, None]


def uniform_sink_alpha(
    lengths: Int[Tensor, " batch"], key: int = 0, *, window: int | None = None, causal: bool = True
) -> Float[Tensor, " batch"]:
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
