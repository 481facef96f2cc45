"""What breaks without the sink: sink removal and StreamingLLM-style windowed attention.

Both interventions edit the attention *scores* (masked, before the softmax), setting the
scores of the keys a query may no longer see to ``-inf``.  The softmax then renormalises over
the keys that remain, exactly (no division of small numbers, no underflow when a sink held
nearly all the attention).  Every row keeps at least its own position.

The edits go through :func:`headlens.probes.interventions.score_edits`, so they take effect on every
supported family (on GPT-Neo, OPT and GPT-J, where the bridge fires ``hook_attn_scores`` only
after Hugging Face has computed the attention, they run inside Hugging Face's attention), or
are refused with :class:`~headlens.probes.errors.InterventionError`: never a silent delta of 0.

* **Sink removal** in heads ``S``: for each query ``i >= 1`` of a head in ``S``, key 0 is
  masked out, so ``A'[i, j] = A[i, j] / (1 - A[i, 0])`` for ``j >= 1``.  Query 0 can only see
  key 0; its row is left as it is.
* **Windowed attention** (every head of every layer): query ``i`` sees the last ``w`` keys
  ``i - w < j <= i`` and, with ``keep_first = k``, also the first ``k`` keys ``j < k``
  (StreamingLLM's "attention sinks" kept in the cache).  Positions keep their absolute
  position embeddings: there is no re-indexing of a rolling cache.

Loss is the mean next-token cross-entropy over every real position that has a next real token
(padding never counts, nor is attended to: the batch's attention mask goes to every forward),
from one forward pass with ``return_type="loss", loss_per_token=True``.  A bidirectional encoder
(BERT) has no next-token loss: refused with :class:`~headlens.probes.errors.UnsupportedModelError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from headlens.probes.attention import attention_spec, visible
from headlens.probes.errors import InterventionError, UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.interventions import Edit, mask_keys, score_edits
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, iter_batches

__all__ = ["mean_loss", "removal_edits", "window_edits", "removal_hooks", "window_hooks", "window_allowed"]

log = logging.getLogger(__name__)

Hooks = list[tuple[str, Callable[..., Any]]]
Edits = dict[int, Edit]


def removal_edits(heads: Mapping[int, Sequence[int]]) -> Edits:
    """Score edits that mask key 0 out of every query ``i >= 1`` of ``heads`` (``{layer: [head, ...]}``)."""
    edits: Edits = {}
    for layer, hs in heads.items():
        idx = tuple(sorted(set(int(h) for h in hs)))

        def edit(scores: Tensor, idx: tuple[int, ...] = idx) -> Tensor:
            out = scores.clone()
            sel = torch.tensor(idx, dtype=torch.long, device=out.device)
            start = max(0, 1 - (out.shape[-1] - out.shape[-2]))  # queries at positions >= 1
            col = out[:, sel, start:, 0]
            out[:, sel, start:, 0] = torch.full_like(col, float("-inf"))
            return out

        edits[int(layer)] = edit
    return edits


def window_allowed(width: int, window: int, keep_first: int, device: torch.device | str = "cpu", *, n_q: int | None = None) -> Tensor:
    """Boolean ``[q, k]``: key ``j`` is visible to query ``i`` (``i - window < j <= i`` or ``j < keep_first``, and ``j <= i``).

    ``width`` keys; the queries are the last ``n_q`` positions (default: all ``width``).
    """
    n_q = width if n_q is None else n_q
    i = torch.arange(width - n_q, width, device=device)[:, None]
    j = torch.arange(width, device=device)[None, :]
    return visible(i, j, window=window) | (visible(i, j) & (j < keep_first))


def window_edits(n_layers: int, window: int, keep_first: int) -> Edits:
    """Score edits that restrict every head of every layer to a sliding window of ``window`` keys plus the first ``keep_first``."""
    cache: dict[tuple[int, int, str], Tensor] = {}

    def allowed(n_q: int, n_k: int, device: torch.device) -> Tensor:
        key = (n_q, n_k, str(device))
        if key not in cache:
            cache[key] = window_allowed(n_k, window, keep_first, device, n_q=n_q)
        return cache[key]

    edit = mask_keys(allowed)
    return {layer: edit for layer in range(n_layers)}


#: The names callers used when these were hooks on ``hook_attn_scores``; they return score edits now.
removal_hooks = removal_edits
window_hooks = window_edits

_SCORE_HOOKS = ("hook_attn_scores", "hook_pattern")


def _check_hooks(model: LoadedModel, hooks: Sequence[tuple[str, Callable[..., Any]]]) -> None:
    """Refuse plain hooks on scores or patterns of a layer where the bridge fires them after the fact (their edits would be discarded)."""
    spec = attention_spec(model)
    for name, _ in hooks:
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blocks" and parts[2] == "attn" and parts[3] in _SCORE_HOOKS and parts[1].isdigit():
            layer = int(parts[1])
            if layer < len(spec.layers) and not spec.layers[layer].native:
                raise InterventionError(
                    f"a hook on {name} cannot change the output on {spec.family} (the bridge fires it after Hugging Face's attention);"
                    " pass score edits (probes.interventions) instead",
                    family=spec.family,
                    layer=layer,
                )


def mean_loss(
    model: LoadedModel,
    batch: TokenBatch,
    edits: Mapping[int, Edit] | Sequence[tuple[str, Callable[..., Any]]] | None = None,
    *,
    hooks: Sequence[tuple[str, Callable[..., Any]]] = (),
    batch_size: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[float, int]:
    """Mean next-token loss over every real predicted position, with score ``edits`` (``{layer: edit}``) and ``hooks`` in place.

    ``edits`` go through :func:`headlens.probes.interventions.score_edits` (refused with
    :class:`InterventionError` when they would not take effect).  A list of
    ``(hook name, fn)`` in its place is taken as ``hooks`` (the older calling convention);
    plain hooks on ``hook_attn_scores``/``hook_pattern`` are refused where the bridge fires
    them after the fact.  Returns ``(mean loss, number of predicted tokens)``; the sum is
    kept in float64.
    """
    if getattr(model, "is_encoder", False):
        family = attention_spec(model).family
        raise UnsupportedModelError(
            f"next-token loss on {family}: a bidirectional encoder sees every token it would predict,"
            " so sink removal and windowed attention have no loss to measure",
            family=family,
        )
    if edits is not None and not isinstance(edits, Mapping):
        hooks, edits = [*edits, *hooks], None
    hooks = list(hooks)
    _check_hooks(model, hooks)
    total = 0.0
    count = 0
    chunks = iter_batches(batch, batch_size)
    with score_edits(model, edits or {}), torch.inference_mode(), attached(model.bridge, hooks):
        for done, (_, sub) in enumerate(chunks, start=1):
            loss = model.bridge(
                sub.tokens.to(model.device), return_type="loss", loss_per_token=True, attention_mask=sub.attention_mask.to(model.device)
            )  # [b, pos-1]
            width = loss.shape[1]
            pos = torch.arange(width, device=loss.device)
            # position i predicts token i+1, which must be real
            mask = pos[None, :] + 1 < sub.lengths.to(loss.device)[:, None]
            total += float(loss.double()[mask].sum())
            count += int(mask.sum())
            if progress is not None:
                progress(done, len(chunks))
    if edits:
        log.debug(
            "mean loss with score edits on layers %s: %.6f over %d tokens", sorted(edits), total / count if count else float("nan"), count
        )
    return (total / count if count else float("nan")), count
