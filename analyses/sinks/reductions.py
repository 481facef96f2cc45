"""Per-batch reductions of attention patterns: excess attention received and the sink's value-norm share.

Each function reduces one batch's pattern of one layer (``A = A[l,h]``, a prompt of ``n``
real tokens, queries ``i``, keys ``j <= i``) to per-prompt sums; the streaming pass
(:mod:`headlens.analyses.sinks.stream`) adds them up.  The ``*_block`` forms reduce the rows of
one block of queries (the engine's reducers, :mod:`headlens.analyses.sinks.reducers`); the
whole-pattern forms are the block forms on the whole pattern.  Padded positions never count.

* **Excess attention received** by key ``j`` (secondary sinks): ``A[i, j] - 1/(i+1)`` pooled
  over every real query ``i >= j`` and every prompt, i.e. ``sum(A[i,j] - 1/(i+1)) / #queries``.
  Pooled per key position, and per token id over key positions ``j >= 1`` (position 0 is the
  primary sink, reported by the census).
* **Value-norm share** (Kobayashi et al. 2020): head ``h``'s output at query ``i`` is
  ``o_i = sum_j A[i,j] f_j`` with ``f_j = v_j W_O^h`` (``v_j`` includes the value bias; the
  layer's output bias is not per head and is left out).  The sink's share of it is
  ``s_i = ||A[i,0] f_0|| / sum_j ||A[i,j] f_j|| = A[i,0] ||f_0|| / sum_j A[i,j] ||f_j||``,
  averaged over real queries ``i >= 1`` (query 0 sees only key 0, so both its shares are 1).
  Beside it, the attention share ``mean over i >= 1 of A[i,0]``.  A sink with a large
  attention share and a tiny norm share writes almost nothing: a no-op.
  ``||f_j||`` is computed as ``sqrt(v_j G_h v_j)`` with ``G_h = W_O^h W_O^h^T`` (``d_head x
  d_head``), so the ``d_model``-wide vectors are never built (:func:`head_output_weights`
  reads ``W_O``).

Sliding windows: in a layer with a window of ``w`` keys query ``i`` sees only keys
``i - w < j <= i``; a uniform head gives ``1/min(i+1, w)`` to each key it sees.  Excess
attention received by ``j`` is then ``A[i,j] - 1/min(i+1, w)`` over ``j <= i < j + w``;
value-norm and attention shares are over ``1 <= i < w``.

Bidirectional layers (encoders such as BERT): every real query sees every real key, a uniform
head gives ``1/n`` to each key, excess attention received is ``A[i,j] - 1/n`` over all ``n``
queries, and value-norm and attention shares are over ``0 <= i < n`` (query 0 sees every key).
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from headlens.probes.attention import repeat_kv, visible
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.placement import materialized

__all__ = [
    "head_output_weights",
    "output_grams",
    "value_norms",
    "value_norm_share",
    "value_norm_block",
    "excess_received",
    "excess_block",
    "received_queries",
]

log = logging.getLogger(__name__)


def head_output_weights(model: LoadedModel, layer: int) -> Tensor:
    """``W_O`` of ``layer`` as ``[head, d_head, d_model]`` (rows of the output projection by head).

    Read from the bridge's ``blocks[layer].attn.W_O`` when it has one; otherwise from the
    output projection module ``blocks[layer].attn.o``: a GPT-2 ``Conv1D`` (weight ``[n_heads *
    d_head, d_model]``) or an ``nn.Linear`` (weight ``[d_model, n_heads * d_head]``), input
    features ordered by head.  Any other layout is an :class:`InputError`.
    """
    with materialized(model.bridge.blocks[layer].attn):  # offloaded weights (--device-map with cpu/disk) are meta outside it
        return _head_output_weights(model, layer)


def _head_output_weights(model: LoadedModel, layer: int) -> Tensor:
    attn = model.bridge.blocks[layer].attn
    n_h, d_h = model.n_heads, model.d_head
    try:
        w = attn.W_O
        if tuple(w.shape[:2]) == (n_h, d_h):
            return w.detach()
    except (AttributeError, RuntimeError, NotImplementedError) as exc:
        log.debug(
            "layer %d: no usable attn.W_O on the bridge (%s: %s); reading the output projection module", layer, type(exc).__name__, exc
        )
    module = getattr(getattr(attn, "o", None), "original_component", None)
    weight = getattr(module, "weight", None)
    if weight is not None:
        w = weight.detach()
        if type(module).__name__ == "Conv1D" and w.shape[0] == n_h * d_h:
            return w.reshape(n_h, d_h, w.shape[1])
        if isinstance(module, torch.nn.Linear) and w.shape[1] == n_h * d_h:
            return w.T.reshape(n_h, d_h, w.shape[0])
    raise InputError(
        f"cannot find the per-head output projection (W_O) of layer {layer} in this model; "
        "value-norm shares need GPT-2-style Conv1D or nn.Linear output projections (skip them with skip='value_norm')",
        layer=layer,
    )


def value_norms(v: Tensor, gram: Tensor) -> Tensor:
    """``||v_j W_O^h||`` as ``[batch, head, pos]`` from ``v`` ``[batch, pos, kv_head, d_head]``
    (``hook_v``'s layout; KV heads repeated per query head) and ``gram`` = ``W_O^h W_O^h^T``
    (``[head, d_head, d_head]``, from :func:`head_output_weights`)."""
    v = repeat_kv(v.detach().float(), gram.shape[0] // v.shape[2])
    vg = torch.einsum("bphd,hdf->bphf", v, gram)
    return (vg * v).sum(-1).clamp_min(0).sqrt().permute(0, 2, 1)


def output_grams(model: LoadedModel) -> list[Tensor]:
    """Per layer ``W_O^h W_O^h^T`` ``[head, d_head, d_head]`` (float32, on the model's device)."""
    grams = []
    for layer in range(model.n_layers):
        w_o = head_output_weights(model, layer).to(model.device, torch.float32)
        grams.append(torch.einsum("hde,hfe->hdf", w_o, w_o))
    return grams


def value_norm_block(
    rows: Tensor,
    value_norm: Tensor,
    lengths: Tensor,
    q_offset: int,
    *,
    window: int | None = None,
    causal: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`value_norm_share` over the rows of queries ``q_offset .. q_offset + block - 1``
    (``rows`` ``[batch, head, block, k]``): the three sums over that block's counted queries."""
    pos = torch.arange(q_offset, q_offset + rows.shape[2], device=rows.device)
    qbool = (pos[None, :] >= (1 if causal else 0)) & (pos[None, :] < lengths[:, None].to(rows.device))
    if window is not None and causal:
        qbool = qbool & (pos[None, :] < window)
    qmask = qbool.to(rows.dtype)  # [b, q]
    weighted = torch.einsum("bhqk,bhk->bhq", rows, value_norm)  # sum_j A[i,j] ||f_j||
    sink = rows[..., 0] * value_norm[:, :, :1]  # A[i,0] ||f_0||
    # weighted >= sink >= 0; where weighted is 0, sink is 0 too and the share is 0.
    share = sink / weighted.clamp_min(torch.finfo(rows.dtype).tiny)
    return (share * qmask[:, None]).sum(-1), (rows[..., 0] * qmask[:, None]).sum(-1), qmask.sum(-1)


def value_norm_share(
    pattern: Tensor,
    value_norm: Tensor,
    lengths: Tensor,
    *,
    window: int | None = None,
    causal: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per prompt and head: sums over real queries ``i >= 1`` of the sink's norm share and attention share.

    ``pattern`` ``[batch, head, q, k]``, ``value_norm`` ``[batch, head, k]`` = ``||v_j W_O^h||``.
    Returns ``(norm_share_sum, attn_share_sum, n_queries)``, shapes ``[batch, head]``,
    ``[batch, head]``, ``[batch]``; divide to get means (see the module docstring).  With a
    sliding ``window`` only the queries that can see key 0 count (``1 <= i < window``); on a
    bidirectional layer (``causal=False``) every real query counts (``0 <= i < n``).
    (:func:`value_norm_block` over the whole pattern as one block.)
    """
    return value_norm_block(pattern, value_norm, lengths, 0, window=window, causal=causal)


def excess_block(rows: Tensor, lengths: Tensor, q_offset: int, *, window: int | None = None, causal: bool = True) -> Tensor:
    """:func:`excess_received`'s sums over the real queries ``q_offset .. q_offset + block - 1`` of
    ``rows`` ``[batch, head, block, k]``: ``[batch, head, k]`` (0 on padded keys)."""
    b, _, n_rows, width = rows.shape
    dev, dt = rows.device, rows.dtype
    lengths = lengths.to(dev)
    q_pos = torch.arange(q_offset, q_offset + n_rows, device=dev)
    k_pos = torch.arange(width, device=dev)
    real_q = q_pos[None, :] < lengths[:, None]  # [b, q]
    real_k = (k_pos[None, :] < lengths[:, None]).to(dt)  # [b, k]
    if not causal:
        realf = real_q.to(dt)
        received_b = torch.einsum("bhqk,bq->bhk", rows, realf)
        # a uniform head gives each real key 1/n from each of the block's real queries
        return (received_b - (realf.sum(-1) / lengths.to(dt))[:, None, None]) * real_k[:, None, :]
    if window is not None:
        sees = real_q[:, :, None] & visible(q_pos[:, None], k_pos[None, :], window=window)[None]  # [b, q, k]
        weight = sees.to(dt)
        received_w = torch.einsum("bhqk,bqk->bhk", rows, weight)
        inv_w = 1.0 / (q_pos + 1).clamp(max=window).to(dt)
        uniform_w = torch.einsum("bqk,q->bk", weight, inv_w)
        return (received_w - uniform_w[:, None, :]) * real_k[:, None, :]
    received = torch.einsum("bhqk,bq->bhk", rows, real_q.to(dt))
    inv = torch.where(real_q, 1.0 / (q_pos[None, :] + 1).to(dt), torch.zeros((), dtype=dt, device=dev))
    # uniform[b, j] = sum over the block's real queries i >= j of 1/(i+1): a reverse cumulative sum
    rev = torch.cat([inv.flip(-1).cumsum(-1).flip(-1), torch.zeros(b, 1, dtype=dt, device=dev)], dim=1)
    uniform = rev[:, (k_pos - q_offset).clamp(0, n_rows)]
    return (received - uniform[:, None, :]) * real_k[:, None, :]


def received_queries(lengths: Tensor, width: int, *, window: int | None = None, causal: bool = True) -> Tensor:
    """``[batch, k]``: how many real queries see each real key ``j`` (0 on padded keys): ``n - j``
    (causal), ``min(n, j + window) - j`` (sliding window), ``n`` (bidirectional)."""
    pos = torch.arange(width, device=lengths.device)
    n = lengths[:, None]
    if not causal:
        return torch.where(pos[None, :] < n, n, 0).to(torch.float64)
    if window is not None:
        return (torch.minimum(n, pos[None, :] + window) - pos[None, :]).clamp_min(0).to(torch.float64)
    return (n - pos[None, :]).clamp_min(0).to(torch.float64)


def excess_received(pattern: Tensor, lengths: Tensor, *, window: int | None = None, causal: bool = True) -> tuple[Tensor, Tensor]:
    """Per prompt, head and key ``j``: ``sum over real queries i >= j of (A[i,j] - 1/(i+1))`` and the query count.

    Returns ``(excess_sum [batch, head, k], n_queries [batch, k])``; padded keys give 0 and 0.
    With a sliding ``window``: over the real queries that see ``j`` (``j <= i < j + window``),
    of ``A[i,j] - 1/min(i+1, window)``.  Bidirectional (``causal=False``): over all ``n`` real
    queries, of ``A[i,j] - 1/n``.  (:func:`excess_block` over the whole pattern as one block.)
    """
    width = pattern.shape[-1]
    counts = received_queries(lengths.to(pattern.device), width, window=window, causal=causal).to(pattern.dtype)
    return excess_block(pattern, lengths, 0, window=window, causal=causal), counts
