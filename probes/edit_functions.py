"""Headlens' copies of the Hugging Face families' eager attention, with a score edit inside.

:mod:`headlens.probes.interventions` switches a model to these while a ``score_edits``
block holds: :func:`interface_attention` is registered with ``transformers.AttentionInterface`` (:mod:`headlens.probes.hf_attention`)
(OPT, GPT-J, BERT: every module that picks its attention function by name) and
:func:`neo_attn` replaces ``GPTNeoSelfAttention._attn`` per instance.  Both do what the
family's eager code does (scale, softcap, additive mask, grouped-query heads, float32
scores where the family upcasts) and apply the edit of the module's layer after the masks.

``ACTIVE`` maps ``id(module)`` to its :class:`LayerState` only inside a ``score_edits``
block (the registered function is global to transformers, so the state it reads is keyed
by module); it is empty outside one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.probes.attention import repeat_kv
from headlens.probes.errors import InterventionError

__all__ = ["Edit", "ATTENTION_IMPLEMENTATION", "LayerState", "ACTIVE", "edited", "interface_attention", "neo_attn"]

log = logging.getLogger(__name__)

#: ``edit(scores[batch, head, q, k]) -> scores`` (masked, pre-softmax).
Edit = Callable[[Float[Tensor, "batch head q k"]], Float[Tensor, "batch head q k"]]

#: The name headlens' attention function is registered under in ``transformers.AttentionInterface``.
ATTENTION_IMPLEMENTATION = "headlens_score_edits"

#: Hugging Face attention classes whose eager function computes ``q . k`` in float32 whatever the dtype.
_UPCAST_QK = frozenset({"GPTJAttention"})


@dataclass
class LayerState:
    """What headlens' attention function does for one Hugging Face attention module while a ``with`` block holds."""

    family: str
    layer: int
    edit: Edit | None
    calls: int = 0


#: ``id(module) -> state`` of the modules inside a ``score_edits`` block; empty outside.
ACTIVE: dict[int, LayerState] = {}


def edited(edit: Edit, scores: Tensor, family: str, layer: int) -> Tensor:
    result = edit(scores)
    if not isinstance(result, Tensor) or result.shape != scores.shape:
        got = tuple(result.shape) if isinstance(result, Tensor) else type(result).__name__
        raise InterventionError(
            f"score edit on {family} layer {layer}: returned {got}, expected a tensor of shape {tuple(scores.shape)}",
            family=family,
            layer=layer,
        )
    return result


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
    return mask


def interface_attention(
    module: Any,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """The eager attention of the Hugging Face families, plus the edit of this module's layer (if any)."""
    state = ACTIVE.get(id(module))
    if kwargs.get("s_aux") is not None:
        family = state.family if state else type(module).__name__
        raise InterventionError(f"score edits on {family}: attention sinks (s_aux) are not reproduced by headlens", family=family)
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    key, value = repeat_kv(key, groups, dim=1), repeat_kv(value, groups, dim=1)  # [batch, head, pos, d]
    if scaling is None:
        scaling = float(query.shape[-1] ** -0.5)
    if type(module).__name__ in _UPCAST_QK:
        scores = torch.matmul(query.float(), key.float().transpose(2, 3)) * scaling
    else:
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + _additive(attention_mask, scores.dtype)[..., : key.shape[-2]]
    if state is not None:
        state.calls += 1
        if state.edit is not None:
            scores = edited(state.edit, scores, state.family, state.layer)
    weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def neo_attn(module: Any) -> Callable[..., tuple[Tensor, Tensor]]:
    """``GPTNeoSelfAttention._attn`` (transformers 5) with the edit of the module's layer after the masks."""

    def _attn(query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        state = ACTIVE.get(id(module))
        query, key = query.to(torch.float32), key.to(torch.float32)
        scores = torch.matmul(query, key.transpose(-1, -2))
        q_len, k_len = query.size(-2), key.size(-2)
        causal = module.bias[:, :, k_len - q_len : k_len, :k_len].to(scores.device)
        mask_value = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype, device=scores.device)
        scores = torch.where(causal, scores, mask_value)
        if attention_mask is not None:
            scores = scores + _additive(attention_mask, scores.dtype)
        if state is not None:
            state.calls += 1
            if state.edit is not None:
                scores = edited(state.edit, scores, state.family, state.layer)
        weights = torch.nn.functional.softmax(scores, dim=-1).to(value.dtype)
        weights = module.attn_dropout(weights)
        return torch.matmul(weights, value), weights

    _attn.headlens = True  # type: ignore[attr-defined]
    return _attn
