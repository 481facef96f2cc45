"""Per-batch reductions of attention patterns: excess attention received and the sink's value-norm share.

Each function reduces one batch's pattern of one layer (``A = A[l,h]``, a prompt of ``n``
real tokens, queries ``i``, keys ``j <= i``) to per-prompt sums; the streaming pass
(:mod:`headlens.analyses.sinks.stream`) adds them up.  Padded positions never count.

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

from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

__all__ = ["head_output_weights", "value_norm_share", "excess_received"]

log = logging.getLogger(__name__)


def head_output_weights(model: LoadedModel, layer: int) -> Tensor:
    """``W_O`` of ``layer`` as ``[head, d_head, d_model]`` (rows of the output projection by head).

    Read from the bridge's ``blocks[layer].attn.W_O`` when it has one; otherwise from the
    output projection module ``blocks[layer].attn.o``: a GPT-2 ``Conv1D`` (weight ``[n_heads *
    d_head, d_model]``) or an ``nn.Linear`` (weight ``[d_model, n_heads * d_head]``), input
    features ordered by head.  Any other layout is an :class:`InputError`.
    """
    from headlens.probes.placement import materialized

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
        log.debug("layer %d: no usable attn.W_O on the bridge (%s: %s); reading the output projection module", layer, type(exc).__name__, exc)
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
        "value-norm shares need GPT-2-style Conv1D or nn.Linear output projections (skip them with --skip value_norm)",
        layer=layer,
    )


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
    """
    width = pattern.shape[2]
    pos = torch.arange(width, device=pattern.device)
    qbool = (pos[None, :] >= (1 if causal else 0)) & (pos[None, :] < lengths[:, None].to(pattern.device))
    if window is not None and causal:
        qbool = qbool & (pos[None, :] < window)
    qmask = qbool.to(pattern.dtype)  # [b, q]
    weighted = torch.einsum("bhqk,bhk->bhq", pattern, value_norm)  # sum_j A[i,j] ||f_j||
    sink = pattern[..., 0] * value_norm[:, :, :1]  # A[i,0] ||f_0||
    # weighted >= sink >= 0; where weighted is 0, sink is 0 too and the share is 0.
    share = sink / weighted.clamp_min(torch.finfo(pattern.dtype).tiny)
    return (share * qmask[:, None]).sum(-1), (pattern[..., 0] * qmask[:, None]).sum(-1), qmask.sum(-1)


def excess_received(pattern: Tensor, lengths: Tensor, *, window: int | None = None, causal: bool = True) -> tuple[Tensor, Tensor]:
    """Per prompt, head and key ``j``: ``sum over real queries i >= j of (A[i,j] - 1/(i+1))`` and the query count.

    Returns ``(excess_sum [batch, head, k], n_queries [batch, k])``; padded keys give 0 and 0.
    With a sliding ``window``: over the real queries that see ``j`` (``j <= i < j + window``),
    of ``A[i,j] - 1/min(i+1, window)``.  Bidirectional (``causal=False``): over all ``n`` real
    queries, of ``A[i,j] - 1/n``.
    """
    b, _, width, _ = pattern.shape
    lengths = lengths.to(pattern.device)
    pos = torch.arange(width, device=pattern.device)
    real = pos[None, :] < lengths[:, None]  # [b, pos]
    if not causal:
        realf = real.to(pattern.dtype)
        received_b = torch.einsum("bhqk,bq->bhk", pattern, realf)
        # a uniform head gives each real key 1/n from each of the n real queries: 1 in all
        excess_b = (received_b - 1.0) * realf[:, None, :]
        return excess_b, realf * lengths[:, None].to(pattern.dtype)
    if window is not None:
        i, j = pos[:, None], pos[None, :]
        sees = real[:, :, None] & ((j <= i) & (j > i - window))[None]  # [b, q, k]: real query i sees key j
        weight = sees.to(pattern.dtype)
        received_w = torch.einsum("bhqk,bqk->bhk", pattern, weight)
        inv_w = 1.0 / (pos + 1).clamp(max=window).to(pattern.dtype)
        uniform_w = torch.einsum("bqk,q->bk", weight, inv_w)
        excess_w = (received_w - uniform_w[:, None, :]) * real[:, None, :].to(pattern.dtype)
        return excess_w, weight.sum(1)
    received = torch.einsum("bhqk,bq->bhk", pattern, real.to(pattern.dtype))
    inv = torch.where(real, 1.0 / (pos[None, :] + 1).to(pattern.dtype), torch.zeros((), dtype=pattern.dtype, device=pattern.device))
    # uniform[b, j] = sum_{i=j}^{n_b - 1} 1/(i+1): reverse cumulative sum over real queries.
    uniform = inv.flip(-1).cumsum(-1).flip(-1)
    n_queries = ((lengths[:, None] - pos[None, :]).clamp_min(0)).to(pattern.dtype)
    excess = (received - uniform[:, None, :]) * real[:, None, :].to(pattern.dtype)
    return excess, n_queries
