"""Direct logit attribution: each component's share of the logit difference, through the final
norm's frozen scale.

At each pair's last real position the residual stream entering the final norm is a sum of
components: the embeddings (``blocks.0.hook_resid_pre``), each head's output (its ``z`` through
the output projection, the projection's bias left out), each layer's attention-output bias,
and each MLP's output.  The logit difference after the final norm and the unembedding is
affine in the norm's normalised output ``n``: ``LD = n . a + c`` (``a`` is the gradient, ``c``
the value at ``n = 0``: the norm's bias and the unembedding bias projected on
``correct - incorrect``).  With the norm's scale ``s`` frozen at its value in the run,
``n`` is linear in the stream (``(x - mean(x)) / s`` for LayerNorm, ``x / s`` for RMSNorm), so
component ``x_k`` contributes ``n(x_k) . a`` and the contributions plus ``c`` ("biases") sum to
the model's logit difference.  That sum is checked on every run; a model where it does not hold
(an output softcap, blocks that are not a sum) is refused, never reported approximately.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headlens.analyses.patching.pairs import PairTask
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel

__all__ = ["DLARun", "run_dla", "DLA_COLUMNS", "SUM_TOL"]

DLA_COLUMNS = ["component", "kind", "layer", "head", "dla", "dla_sd"]
#: The components must sum to the model's logit difference within this (relative to max(1, |LD|)).
SUM_TOL = 1e-4


@dataclass
class DLARun:
    table: pd.DataFrame  # DLA_COLUMNS: mean and standard deviation over pairs
    per_item: np.ndarray  # [component, item]
    logit_diff: np.ndarray  # [item] the model's own
    info: dict[str, Any] = field(default_factory=dict)


def _final_norm_kind(x: Tensor, normed: Tensor, scale: Tensor) -> str:
    """``layernorm`` or ``rmsnorm``: which of the two the final norm's normalised output is."""
    ln = (x - x.mean(-1, keepdim=True)) / scale
    rms = x / scale
    tol = 1e-4 * max(1.0, float(normed.abs().max()))
    if float((ln - normed).abs().max()) <= tol:
        return "layernorm"
    if float((rms - normed).abs().max()) <= tol:
        return "rmsnorm"
    raise UnsupportedModelError(
        "direct logit attribution: the final norm's output is neither (x - mean) / scale nor x / scale for this model"
    )


#: The hooks every run reads: the final norm's input, output and scale, and the embeddings.
_NORM_HOOKS = ["ln_final.hook_in", "ln_final.hook_normalized", "ln_final.hook_scale", "blocks.0.hook_resid_pre"]


def _check_model(model: LoadedModel) -> None:
    if model.is_encoder or model.head_is_new:
        raise UnsupportedModelError(
            "direct logit attribution reads the output head's logits, which this model has not (an encoder, or a newly initialised head)"
        )
    if any(n not in model.hook_names() for n in _NORM_HOOKS):
        raise UnsupportedModelError(
            "direct logit attribution needs the final norm's hooks (ln_final.hook_in/normalized/scale), which this model lacks"
        )


def _capture(model: LoadedModel, toks: Tensor, idx: Tensor, last: Tensor) -> tuple[dict[str, Tensor], Tensor]:
    """``(got, logits)``: at each row's last real position, the final norm's input, output and scale,
    the embeddings, and each layer's ``z``, attention output and MLP output (float64); and the logits."""
    got: dict[str, Tensor] = {}

    def keep(name: str) -> Any:
        def fn(x: Tensor, hook: Any = None) -> None:
            got[name] = x.detach()[idx, last].double()

        return fn

    n_l = model.n_layers
    hooks = [(n, keep(n)) for n in _NORM_HOOKS]
    hooks += [(f"blocks.{l}.attn.hook_z", keep(f"z{l}")) for l in range(n_l)]
    hooks += [(f"blocks.{l}.hook_attn_out", keep(f"attn{l}")) for l in range(n_l)]
    hooks += [(f"blocks.{l}.hook_mlp_out", keep(f"mlp{l}")) for l in range(n_l)]
    with torch.inference_mode(), attached(model.bridge, hooks):
        logits = model.bridge(toks, return_type="logits")
    return got, logits


def _affine_in_norm(
    model: LoadedModel, toks: Tensor, idx: Tensor, last: Tensor, correct: Tensor, incorrect: Tensor, d_norm: int, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``(a, c)``: the logit difference as an affine function of the final norm's normalised output
    ``n`` at the last position: ``a = dLD/dn``, ``c = LD(n = 0)`` (float64)."""
    leaf = torch.zeros(len(idx), toks.shape[1], d_norm, dtype=dtype, device=model.device, requires_grad=True)

    def swap(x: Tensor, hook: Any = None) -> Tensor:
        return leaf

    with torch.enable_grad(), attached(model.bridge, [("ln_final.hook_normalized", swap)]), warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", UserWarning
        )  # the bridge notes that it rebuilds the norm's output from the edited value: that is the point
        out = model.bridge(toks, return_type="logits")
        c_ld = out[idx, last, correct] - out[idx, last, incorrect]
        (grad,) = torch.autograd.grad(c_ld.sum(), [leaf])
    return grad[idx, last].double(), c_ld.detach().double()


def _components(model: LoadedModel, got: dict[str, Tensor], direct: Callable[[Tensor], Tensor], dtype: torch.dtype) -> list[Tensor]:
    """Each component's direct share (``direct`` of its part of the stream), in the table's order
    but the final biases: the embeddings, then per layer its heads, its attention-output bias and
    its MLP; refused when the parts do not sum to the stream entering the final norm."""
    parts = [direct(got["blocks.0.hook_resid_pre"])]
    total = got["blocks.0.hook_resid_pre"].clone()
    for l in range(model.n_layers):
        o = model.bridge.blocks[l].attn.o.original_component
        z = got[f"z{l}"].to(dtype)  # [b, head, d_head]
        with torch.inference_mode():
            bias = o(torch.zeros_like(z.flatten(1))).double()
            for h in range(model.n_heads):
                zh = torch.zeros_like(z)
                zh[:, h] = z[:, h]
                parts.append(direct(o(zh.flatten(1)).double() - bias))
        parts.append(direct(bias))
        parts.append(direct(got[f"mlp{l}"]))
        total = total + got[f"attn{l}"] + got[f"mlp{l}"]
    x = got["ln_final.hook_in"]
    if float((total - x).abs().max()) > SUM_TOL * max(1.0, float(x.abs().max())):
        raise UnsupportedModelError(
            "direct logit attribution: the stream entering the final norm is not the sum of embeddings, attention and MLP outputs"
            " for this model"
        )
    return parts


def _dla_batch(model: LoadedModel, task: PairTask, ids: Tensor, rows: list[int], kind: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    """``(per component and item, the model's logit difference, the final norm's kind)`` for ``rows``."""
    lengths = task.lengths[rows]
    width = int(lengths.max())
    toks = ids[rows, :width].to(model.device)
    last = (lengths - 1).to(model.device)
    idx = torch.arange(len(rows), device=model.device)
    correct, incorrect = task.correct[rows].to(model.device), task.incorrect[rows].to(model.device)
    got, logits = _capture(model, toks, idx, last)
    final = logits[idx, last].double()
    ld = final[idx, correct] - final[idx, incorrect]
    a, c = _affine_in_norm(model, toks, idx, last, correct, incorrect, got["ln_final.hook_normalized"].shape[-1], logits.dtype)
    x, normed, scale = got["ln_final.hook_in"], got["ln_final.hook_normalized"], got["ln_final.hook_scale"]
    kind = kind or _final_norm_kind(x, normed, scale)

    def direct(v: Tensor) -> Tensor:
        v = v - v.mean(-1, keepdim=True) if kind == "layernorm" else v
        return ((v / scale) * a).sum(-1)

    parts = _components(model, got, direct, logits.dtype)
    parts.append(c)
    stacked = torch.stack(parts).cpu().numpy()  # [component, item]
    if float(np.abs(stacked.sum(0) - ld.cpu().numpy()).max()) > SUM_TOL * max(1.0, float(ld.abs().max())):
        raise UnsupportedModelError(
            "direct logit attribution: the components do not sum to the model's logit difference"
            " (the output is not affine in the final norm's output: a logit softcap?)"
        )
    return stacked, ld.cpu().numpy(), kind


def _dla_table(values: np.ndarray, n_l: int, n_h: int) -> pd.DataFrame:
    labels: list[tuple[str, str, int | None, int | None]] = [("embeddings", "embeddings", None, None)]
    for l in range(n_l):
        labels += [(f"{l}.{h}", "head", l, h) for h in range(n_h)]
        labels += [(f"attn_bias.{l}", "bias", l, None), (f"mlp.{l}", "mlp", l, None)]
    labels.append(("final_biases", "bias", None, None))
    table = pd.DataFrame(labels, columns=["component", "kind", "layer", "head"])
    table = table.astype({"layer": "Int64", "head": "Int64"})  # whole numbers; <NA> where a component has no layer or head
    table["dla"] = values.mean(1)
    table["dla_sd"] = values.std(1, ddof=1) if values.shape[1] > 1 else np.nan
    return table


def run_dla(model: LoadedModel, task: PairTask, *, batch_size: int = 8, tokens: str = "clean") -> DLARun:
    """Per-component direct logit attribution on the ``tokens`` ("clean" or "corrupt") side of ``task``."""
    _check_model(model)
    ids = task.clean if tokens == "clean" else task.corrupt
    per_item: list[np.ndarray] = []
    model_ld: list[np.ndarray] = []
    kind = None
    for start in range(0, len(task), batch_size):
        rows = list(range(start, min(start + batch_size, len(task))))
        stacked, ld, kind = _dla_batch(model, task, ids, rows, kind)
        per_item.append(stacked)
        model_ld.append(ld)
    values = np.concatenate(per_item, axis=1)
    table = _dla_table(values, model.n_layers, model.n_heads)
    info = {"tokens": tokens, "final_norm": kind, "scale": "frozen at its value in the run", "n_pairs": len(task), "sum_tolerance": SUM_TOL}
    return DLARun(table=table, per_item=values, logit_diff=np.concatenate(model_ld), info=info)
