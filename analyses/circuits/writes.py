"""What a sender writes into a reader's copy of the stream, on models that normalise the head sum (Gemma 2).

Gemma 2 adds ``post_attention_layernorm(sum_h z_h W_O[h] + b_O)`` to the stream, not the heads'
sum itself, so a reader does not read a sum of per-head writes.  Treatment (the edge's
definition): **a head's edge into a reader moves that head's ``z_h W_O[h]`` to its value in the
other run inside the reader's own copy of the layer's attention output, and the norm is
recomputed on that copy**.  With ``t_h`` a head's term in the base run, ``t'_h`` in the other
run and ``a = sum_h t_h + b_O``, the reader's input changes by

    D_h = N(a - t_h + t'_h) - N(a)

(``N``: the layer's post-attention norm module of the Hugging Face model, recomputed).  Then:

* exact edge patching adds ``D_h`` to the reader's input: the exact single-edge intervention;
* EAP and EAP-IG contract ``D_h`` (the exact change of what the reader reads at the base run)
  with the reader's gradient: first order in the reader only, as for every other edge;
* the edges of one layer's heads into one reader do not add (the norm is shared), so a
  circuit's reader copy of that layer is ``N(b_O + sum_h (kept ? live t_h : corrupt t_h))``
  (:func:`normed_change`), norm recomputed per reader and per circuit: with every edge kept
  the clean run, with none the corrupted one, still exactly.

Embeddings and MLPs are single writers (an MLP's own post-norm belongs to its node): their
differences are plain.  Models without such a norm take every difference as ``other - base``.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn

from headlens.analyses.circuits.graph import EdgeGraph
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["HeadSumNorm", "head_sum_norms", "sender_deltas", "stream_writes", "normed_change", "HEAD_SUM_NORM_NOTE"]

#: The estimate's assumption on a model whose head sum is normalised (manifest notes).
HEAD_SUM_NORM_NOTE = (
    "this model normalises each layer's head sum before adding it (post-attention norm): a head's edge moves that head's "
    "output to the other run inside the reader's copy of the layer's attention output with the norm recomputed there; the "
    "estimates contract that exact single-edge change with the reader's gradient (first order in the reader only), and the "
    "edges of one layer's heads into one reader do not add up (faithfulness recomputes the norm on each reader's mix)"
)


class HeadSumNorm:
    """A layer's post-attention norm ``N`` and output bias: ``N(sum_h t_h + b_O)`` is what the layer's heads add."""

    def __init__(self, norm: nn.Module, bias: Tensor | None) -> None:
        self.norm = norm
        self.bias = bias

    def __call__(self, a: Tensor) -> Tensor:
        shape = a.shape
        return self.norm(a.reshape(-1, shape[-1])).reshape(shape).to(a.dtype)

    def total(self, terms: Tensor) -> Tensor:
        """``a = sum_h t_h + b_O`` from ``terms`` ``[..., head, pos, d_model]``."""
        a = terms.sum(-3)
        if self.bias is not None:
            a = a + self.bias.to(device=a.device, dtype=a.dtype)
        return a


def head_sum_norms(model: LoadedModel) -> list[HeadSumNorm | None]:
    """Each layer's :class:`HeadSumNorm` (``None`` where the heads' sum is added as it is)."""
    out: list[HeadSumNorm | None] = []
    for block in model.bridge.blocks:
        subs = getattr(block, "submodules", None) or {}
        post = subs.get("ln1_post")
        norm = getattr(post, "original_component", None)
        if post is None or not isinstance(norm, nn.Module):
            out.append(None)
            continue
        o = getattr(getattr(subs.get("attn"), "o", None), "original_component", None)
        bias = getattr(o, "bias", None)
        out.append(HeadSumNorm(norm, None if bias is None else bias.detach()))
    return out


def _heads(layer: int, n_heads: int) -> slice:
    first = 1 + layer * (n_heads + 1)
    return slice(first, first + n_heads)


def sender_deltas(graph: EdgeGraph, norms: list[HeadSumNorm | None], base: Tensor, other: Tensor, *, first: int = 0) -> Tensor:
    """What each sender's edge adds to a reader's input, ``[batch, sender, pos, d_model]``: ``other - base``,
    and ``D_h`` (module doc) for the heads of a normalised layer.  Reuses ``other``'s storage.  ``first``:
    the sender index of the stores' row 0 (a window of senders; a normalised layer's heads lie all inside it or all outside)."""
    n_h = int(graph.info["n_heads"])
    n = base.shape[1]
    with torch.no_grad():
        normed: list[tuple[slice, Tensor]] = []
        for layer, hsn in enumerate(norms):
            full = _heads(layer, n_h)
            if hsn is not None and first <= full.start and full.stop <= first + n:
                sl = slice(full.start - first, full.stop - first)
                a = hsn.total(base[:, sl])  # [b, p, d]
                moved = a[:, None] - base[:, sl] + other[:, sl]  # [b, head, p, d]
                normed.append((sl, hsn(moved) - hsn(a)[:, None]))
        delta = other.sub_(base)
        for sl, d in normed:
            delta[:, sl] = d
    return delta


def stream_writes(graph: EdgeGraph, norms: list[HeadSumNorm | None], out: Tensor, n_send: int) -> Tensor:
    """The sum of what the first ``n_send`` senders add to the stream ``[batch, pos, d_model]`` (normalised layers: ``N(a)``)."""
    n_h = int(graph.info["n_heads"])
    with torch.no_grad():
        total = out[:, :n_send].sum(1)
        for layer, hsn in enumerate(norms):
            sl = _heads(layer, n_h)
            if hsn is None or sl.stop > n_send:
                continue
            total = total - out[:, sl].sum(1) + hsn(hsn.total(out[:, sl]))
    return total


def normed_change(hsn: HeadSumNorm, live: Tensor, corrupt: Tensor, excluded: Tensor) -> Tensor:
    """``N(a_live) - N(a_mix)`` per copy and slot, ``[copies, batch, pos, slot, d_model]``: ``a_mix`` has the
    heads ``excluded[c, slot, h]`` at their corrupted terms (``live``/``corrupt``: ``[copies, batch, head, pos, d]``)."""
    a_live = hsn.total(live)  # [c, b, p, d]
    diff = live - corrupt
    m = excluded.to(diff.dtype)  # [c, slot, head]
    a_mix = a_live[:, :, :, None, :] - torch.einsum("cbhpd,cgh->cbpgd", diff, m)
    return hsn(a_live)[:, :, :, None, :] - hsn(a_mix)
