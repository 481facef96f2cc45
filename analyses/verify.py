"""The attention equation as a check on what the hooks captured.

From captured Q and K, recompute ``softmax(Q K^T / sqrt(d_head) + causal mask)`` and
compare it with the captured pattern; from the captured pattern and V, recompute
``pattern @ V`` and compare it with ``hook_z``.  Also check that no attention falls
above the diagonal and that every real pattern row sums to 1.  Only real (unpadded)
positions count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from probes.capture import Capture, capture
from probes.config import CaptureConfig
from probes.loading import LoadedModel

__all__ = ["verify_attention", "verify_capture", "DEFAULT_TOLERANCE", "recompute_pattern"]

#: Largest absolute error accepted, by dtype.
DEFAULT_TOLERANCE: dict[str, float] = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}


def recompute_pattern(
    q: Float[Tensor, "pos head d_head"],
    k: Float[Tensor, "pos head d_head"],
    scale: float,
) -> Float[Tensor, "head q k"]:
    """``softmax(q k^T / scale + causal mask)`` for one prompt, in float32."""
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / scale
    n = q.shape[0]
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    return scores.softmax(dim=-1)


def _attn_scale(model: LoadedModel, layer: int) -> float:
    cfg = model.bridge.cfg
    scale = float(getattr(cfg, "attn_scale", -1.0) or -1.0)
    if scale <= 0:
        scale = math.sqrt(model.d_head)
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale *= layer + 1
    return scale


def verify_capture(model: LoadedModel, cap: Capture, *, tolerance: float | None = None) -> pd.DataFrame:
    """One row per layer: largest errors of the recomputation, and whether all are in tolerance."""
    dtype_name = str(model.dtype).removeprefix("torch.")
    tol = DEFAULT_TOLERANCE.get(dtype_name, 1e-4) if tolerance is None else tolerance
    rows = []
    lengths = cap.batch.lengths.tolist()
    for layer in cap.heads:
        q, k, v = (cap.get(layer, w) for w in ("q", "k", "v"))
        pattern, z = cap.get(layer, "pattern"), cap.get(layer, "z")
        scale = _attn_scale(model, layer)
        err_p = err_z = above = row_sum = 0.0
        for i, n in enumerate(lengths):
            p_cap = pattern[i, :, :n, :n].float()
            p_ref = recompute_pattern(q[i, :n], k[i, :n], scale)
            err_p = max(err_p, (p_cap - p_ref).abs().max().item())
            z_ref = torch.einsum("hqk,khd->qhd", p_cap, v[i, :n].float())
            err_z = max(err_z, (z[i, :n].float() - z_ref).abs().max().item())
            upper = torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)
            above = max(above, p_cap[:, upper].abs().max().item() if n > 1 else 0.0)
            row_sum = max(row_sum, (p_cap.sum(-1) - 1).abs().max().item())
        rows.append(
            {
                "layer": layer,
                "max_err_pattern": err_p,
                "max_err_z": err_z,
                "max_above_diagonal": above,
                "max_row_sum_err": row_sum,
                "tolerance": tol,
                "ok": max(err_p, err_z, above, row_sum) <= tol,
            }
        )
    return pd.DataFrame(rows)


def verify_attention(
    model: LoadedModel,
    prompts: Sequence[str],
    *,
    prepend_bos: bool = True,
    tolerance: float | None = None,
    batch_size: int = 8,
) -> pd.DataFrame:
    """Capture q, k, v, pattern and z for every layer on ``prompts`` and check the equation."""
    cap = capture(
        model,
        prompts,
        CaptureConfig(what=("q", "k", "v", "pattern", "z"), prepend_bos=prepend_bos, batch_size=batch_size),
    )
    return verify_capture(model, cap, tolerance=tolerance)
