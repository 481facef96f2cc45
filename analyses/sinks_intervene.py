"""What breaks without the sink: sink removal and StreamingLLM-style windowed attention.

Both interventions edit the attention *scores* in ``hook_attn_scores`` (before the softmax),
setting the scores of the keys a query may no longer see to ``-inf``.  The softmax then
renormalises over the keys that remain, exactly (no division of small numbers, no underflow
when a sink held nearly all the attention).  Every row keeps at least its own position.

* **Sink removal** in heads ``S``: for each query ``i >= 1`` of a head in ``S``, key 0 is
  masked out, so ``A'[i, j] = A[i, j] / (1 - A[i, 0])`` for ``j >= 1``.  Query 0 can only see
  key 0; its row is left as it is.
* **Windowed attention** (every head of every layer): query ``i`` sees the last ``w`` keys
  ``i - w < j <= i`` and, with ``keep_first = k``, also the first ``k`` keys ``j < k``
  (StreamingLLM's "attention sinks" kept in the cache).  Positions keep their absolute
  position embeddings: there is no re-indexing of a rolling cache.

Loss is the mean next-token cross-entropy over every real position that has a next real token
(padding never counts), from one forward pass with ``return_type="loss", loss_per_token=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from probes.hooks import attached
from probes.loading import LoadedModel
from probes.prompts import TokenBatch, iter_batches

__all__ = ["mean_loss", "removal_hooks", "window_hooks", "window_allowed"]

Hooks = list[tuple[str, Callable[..., Any]]]


def removal_hooks(heads: dict[int, Sequence[int]]) -> Hooks:
    """Hooks that mask key 0 out of every query ``i >= 1`` of ``heads`` (``{layer: [head, ...]}``)."""
    hooks: Hooks = []
    for layer, hs in heads.items():
        idx = torch.tensor(sorted(set(hs)), dtype=torch.long)

        def hook(scores: Tensor, hook: Any = None, idx: Tensor = idx) -> Tensor:
            out = scores.clone()
            sel = idx.to(out.device)
            col = out[:, sel, 1:, 0]
            out[:, sel, 1:, 0] = torch.full_like(col, float("-inf"))
            return out

        hooks.append((f"blocks.{layer}.attn.hook_attn_scores", hook))
    return hooks


def window_allowed(width: int, window: int, keep_first: int, device: torch.device | str = "cpu") -> Tensor:
    """Boolean ``[q, k]``: key ``j`` is visible to query ``i`` (``i - window < j <= i`` or ``j < keep_first``, and ``j <= i``)."""
    i = torch.arange(width, device=device)[:, None]
    j = torch.arange(width, device=device)[None, :]
    return (j <= i) & ((j > i - window) | (j < keep_first))


def window_hooks(n_layers: int, window: int, keep_first: int) -> Hooks:
    """Hooks that restrict every head of every layer to a sliding window of ``window`` keys plus the first ``keep_first``."""
    cache: dict[tuple[int, str], Tensor] = {}

    def hook(scores: Tensor, hook: Any = None) -> Tensor:
        width = scores.shape[-1]
        key = (width, str(scores.device))
        if key not in cache:
            cache[key] = window_allowed(width, window, keep_first, scores.device)
        allowed = cache[key]
        return scores.masked_fill(~allowed, float("-inf"))

    return [(f"blocks.{layer}.attn.hook_attn_scores", hook) for layer in range(n_layers)]


def mean_loss(
    model: LoadedModel,
    batch: TokenBatch,
    hooks: Hooks = (),  # type: ignore[assignment]
    *,
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[float, int]:
    """Mean next-token loss over every real predicted position, with ``hooks`` attached.

    Returns ``(mean loss, number of predicted tokens)``.  The sum is kept in float64.
    """
    total = 0.0
    count = 0
    chunks = iter_batches(batch, batch_size)
    with torch.inference_mode(), attached(model.bridge, list(hooks)):
        for done, (_, sub) in enumerate(chunks, start=1):
            loss = model.bridge(sub.tokens.to(model.device), return_type="loss", loss_per_token=True)  # [b, pos-1]
            width = loss.shape[1]
            pos = torch.arange(width, device=loss.device)
            # position i predicts token i+1, which must be real
            mask = pos[None, :] + 1 < sub.lengths.to(loss.device)[:, None]
            total += float(loss.double()[mask].sum())
            count += int(mask.sum())
            if progress is not None:
                progress(done, len(chunks))
    return (total / count if count else float("nan")), count
