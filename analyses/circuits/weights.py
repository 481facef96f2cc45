"""Every head's W_Q, W_K, W_V, W_O read from the bridge for weight-based scores, LayerNorm folded
as TransformerLens' ``process_weights`` folds it (see :mod:`headlens.analyses.circuits.composition`
for the conventions), key-value heads expanded to their query heads under GQA."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.probes.attention import repeat_kv
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.loading import LoadedModel

__all__ = ["HeadWeights", "head_weights", "norm_gain", "centre", "WEIGHT_DTYPE"]

log = logging.getLogger(__name__)

#: Weight-based scores are computed in float64.
WEIGHT_DTYPE = torch.float64
_DT = WEIGHT_DTYPE


@dataclass
class HeadWeights:
    """Every head's matrices, float64, KV expanded to query heads (``layer``, ``head`` leading)."""

    W_Q: Float[Tensor, "layer head d_model d_head"]
    W_K: Float[Tensor, "layer head d_model d_head"]
    W_V: Float[Tensor, "layer head d_model d_head"]
    W_O: Float[Tensor, "layer head d_head d_model"]
    n_kv_heads: int
    folded: bool
    norm: str  # "LN", "RMS" or "none"
    notes: list[str] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        n_l, n_h, d_model, d_head = self.W_Q.shape
        return int(n_l), int(n_h), int(d_model), int(d_head)


def _module_of(component: Any) -> Any:
    return getattr(component, "original_component", None) or component


def _gain(norm_module: Any, d_model: int) -> Tensor:
    """The effective gain of an RMS norm module: its output for a constant row (rms = the
    constant, so the output is the gain; Gemma's ``1 + weight`` and Llama's ``weight`` alike)."""
    w = next(iter(norm_module.parameters()), None)
    dtype = w.dtype if w is not None else torch.float32
    device = w.device if w is not None else torch.device("cpu")
    x = torch.full((1, 1, d_model), 1e3, dtype=dtype, device=device)
    return (norm_module(x)[0, 0] / 1e3).detach().to("cpu", _DT)


def norm_gain(bridge: Any, component: Any, kind: str, d_model: int) -> Tensor | None:
    mod = _module_of(component)
    if mod is None:
        return None
    if kind == "LN":
        w = getattr(mod, "weight", None)
        return None if w is None else w.detach().to("cpu", _DT)
    return _gain(mod, d_model)


def _post_norm(model: LoadedModel) -> bool:
    cfg = getattr(model.bridge.original_model, "config", None)
    return model.is_encoder or getattr(cfg, "do_layer_norm_before", True) is False


def _expand(w: Tensor, n_heads: int) -> Tensor:
    """KV weights ``[n_kv, ...]`` repeated to the query heads (head h reads KV head h // group)."""
    if w.shape[0] == n_heads:
        return w
    if n_heads % w.shape[0]:
        raise UnsupportedModelError(f"{n_heads} query heads do not split into {w.shape[0]} key-value groups")
    return repeat_kv(w, n_heads // w.shape[0], dim=0)


def centre(w: Tensor, dim: int) -> Tensor:
    return w - w.mean(dim=dim, keepdim=True)


def head_weights(model: LoadedModel, *, fold_ln: bool = True) -> HeadWeights:
    """Every head's W_Q, W_K, W_V, W_O from the bridge, float64 on the CPU (see the module's conventions)."""
    bridge = model.bridge
    n_heads = model.n_heads
    kind = str(getattr(bridge.cfg, "normalization_type", None) or "none")
    notes: list[str] = []
    fold = fold_ln and kind in ("LN", "LNPre", "RMS", "RMSPre")
    if fold_ln and _post_norm(model):
        notes.append("post-norm model: no norm in front of the attention to fold; composition scored on the raw weights")
        fold = False
    elif fold_ln and not fold:
        notes.append(f"normalization {kind!r}: nothing to fold; composition scored on the raw weights")
    if "ln1_post" in bridge.blocks[0]._modules:
        notes.append(
            "the norm after each attention output (ln1_post, e.g. Gemma 2) rescales what the heads write; it is not folded into W_O"
            " (as in TransformerLens), so the scores read W_O as the head writes it before that norm"
        )
    is_ln = kind.startswith("LN")
    stacks: dict[str, list[Tensor]] = {"W_Q": [], "W_K": [], "W_V": [], "W_O": []}
    n_kv = n_heads
    with torch.no_grad():
        for layer in range(model.n_layers):
            block = bridge.blocks[layer]
            attn = block.attn
            got = {name: getattr(attn, name).detach().to("cpu", _DT) for name in stacks}
            n_kv = int(got["W_K"].shape[0])
            got["W_K"], got["W_V"] = _expand(got["W_K"], n_heads), _expand(got["W_V"], n_heads)
            if fold:
                gain = norm_gain(bridge, block._modules.get("ln1"), "LN" if is_ln else "RMS", got["W_Q"].shape[1])
                for name in ("W_Q", "W_K", "W_V"):
                    w = got[name] if gain is None else got[name] * gain[None, :, None]
                    got[name] = centre(w, 1) if is_ln else w
                if is_ln:
                    got["W_O"] = centre(got["W_O"], 2)
            for name, w in got.items():
                stacks[name].append(w)
    return HeadWeights(
        **{name: torch.stack(ws) for name, ws in stacks.items()},
        n_kv_heads=n_kv,
        folded=fold,
        norm=kind,
        notes=notes,
    )
