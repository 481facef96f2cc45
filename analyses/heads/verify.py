"""The attention equation as a check on what the hooks captured.

From the captured q and k as they enter the dot product (``rot_q``/``rot_k``: after the
rotary embedding where the family has one), redo each layer's attention with the layer's
own rules (:mod:`headlens.probes.attention`): KV heads repeated under grouped- and multi-query
attention, the family's score scale (``1/sqrt(d_head)``, Gemma2's ``query_pre_attn_scalar``,
Granite's ``attention_multiplier``, none for GPT-Neo), ALiBi's position bias (Bloom, MPT), the
logit softcap (Gemma2), the causal mask (none in bidirectional encoders such
as BERT), a sliding window (Mistral, Gemma2's sliding layers, GPT-Neo's local layers) and
the padding mask of the batch; compare with the captured pattern.  From the captured
pattern and V, recompute ``pattern @ V`` and compare it with ``hook_z``.  Also check that
no attention falls on a key the masks forbid (padded keys included) and that every real
pattern row sums to 1.  Every real (unpadded) query counts, against every key of the
padded batch.

A family whose attention headlens does not know how to redo is refused with a one-line
error (:class:`~headlens.probes.errors.UnsupportedModelError`), never reported as a failed check.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from headlens.analyses.heads.verify_config import VerifyConfig
from headlens.probes.attention import LayerAttention, allowed_keys, attention_spec, pattern_from_qk, repeat_kv
from headlens.probes.capture import Capture, capture
from headlens.probes.config import CaptureConfig
from headlens.probes.devices import TOLERANCES
from headlens.probes.loading import LoadedModel

__all__ = ["VerifyRun", "run_verify", "verify_attention", "verify_capture", "DEFAULT_TOLERANCE", "recompute_pattern", "applied_rules"]

log = logging.getLogger(__name__)

#: Largest absolute error accepted, by dtype (:data:`headlens.probes.devices.TOLERANCES`, ``verify``).
DEFAULT_TOLERANCE: dict[str, float] = {name: tol["verify"] for name, tol in TOLERANCES.items()}

#: What verify captures.
VERIFY_WHAT = ("rot_q", "rot_k", "v", "pattern", "z")


def recompute_pattern(
    layer: LayerAttention,
    q: Float[Tensor, "q head d_head"],
    k: Float[Tensor, "k kv_head d_head"],
    key_mask: Bool[Tensor, " k"] | None = None,
) -> Float[Tensor, "head q k"]:
    """The layer's attention pattern for one prompt from its rotated q and k, in float32.

    ``key_mask`` (True on real keys) masks the batch's padding out, as the forward did.
    """
    return pattern_from_qk(layer, q, k, key_mask=key_mask)


def applied_rules(layer: LayerAttention) -> str:
    """A short description of what the recomputation applied in ``layer``."""
    rotary = {
        "hooks": "rotary (hook_rot_q/k)" if layer.rope_theta is not None else "no rotary in this layer (hook_rot_q/k)",
        "neox": f"{'partial ' if (layer.rotary_dim or layer.d_head) < layer.d_head else ''}rotary ({layer.rotary_dim}/{layer.d_head} dims)",
        "gptj": f"GPT-J rotary ({layer.rotary_dim}/{layer.d_head} dims)",
    }.get(layer.rotary, "no rotary")
    parts = [rotary]
    if layer.qk_norm is not None:
        parts.append("QK-norm per head" if layer.qk_norm == "head" else "QK-norm over the whole projection")
    parts.append(f"scale {layer.scale:.4g}" + (" (none)" if layer.scale == 1.0 else ""))
    if layer.alibi is not None:
        parts.append(f"ALiBi ({len(layer.alibi)} slopes)")
    if layer.group > 1:
        parts.append(f"GQA {layer.n_heads}q/{layer.n_kv_heads}kv")
    parts.append("causal" if layer.causal else "bidirectional")
    if layer.window is not None:
        parts.append(f"window {layer.window}")
    if layer.softcap is not None:
        parts.append(f"softcap {layer.softcap:g}")
    return ", ".join(parts)


def verify_capture(model: LoadedModel, cap: Capture, *, tolerance: float | None = None) -> pd.DataFrame:
    """One row per layer: largest errors of the recomputation, what it applied, and whether all are in tolerance."""
    spec = attention_spec(model)
    spec.require_reconstruction("verify")
    missing = [w for w in VERIFY_WHAT if w not in cap.what]
    if missing:
        raise ValueError(f"verify needs a capture of {', '.join(VERIFY_WHAT)}; missing {', '.join(missing)}")
    dtype_name = str(model.dtype).removeprefix("torch.")
    tol = DEFAULT_TOLERANCE.get(dtype_name, 1e-4) if tolerance is None else tolerance
    rows = []
    lengths = cap.batch.lengths.tolist()
    real = cap.batch.mask
    for layer in cap.heads:
        la = spec.layers[layer]
        if cap.heads[layer] != list(range(la.n_heads)) or cap.kv_heads[layer] != list(range(la.n_kv_heads)):
            raise ValueError("verify needs every head of each layer it checks")
        q, k, v = (cap.get(layer, w) for w in ("rot_q", "rot_k", "v"))
        pattern, z = cap.get(layer, "pattern"), cap.get(layer, "z")
        err_p = err_z = outside = row_sum = 0.0
        width = pattern.shape[-1]
        for i, n in enumerate(lengths):
            key_mask = real[i, :width].to(pattern.device)
            p_cap = pattern[i, :, :n, :].float()  # real queries against every key, padded ones included
            p_ref = recompute_pattern(la, q[i, :n], k[i, :width], key_mask)
            err_p = max(err_p, (p_cap - p_ref).abs().max().item())
            z_ref = torch.einsum("hqk,khd->qhd", p_cap, repeat_kv(v[i, :width].float(), la.group))
            err_z = max(err_z, (z[i, :n].float() - z_ref).abs().max().item())
            forbidden = ~allowed_keys(la, n, width, device=pattern.device, key_mask=key_mask)
            outside = max(outside, p_cap[:, forbidden].abs().max().item() if bool(forbidden.any()) else 0.0)
            row_sum = max(row_sum, (p_cap.sum(-1) - 1).abs().max().item())
        rows.append(
            {
                "layer": layer,
                "max_err_pattern": err_p,
                "max_err_z": err_z,
                "max_outside_mask": outside,
                "max_row_sum_err": row_sum,
                "tolerance": tol,
                "ok": max(err_p, err_z, outside, row_sum) <= tol,
                "applied": applied_rules(la),
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
    """Capture rotated q and k, v, pattern and z for every layer on ``prompts`` and check the equation."""
    attention_spec(model).require_reconstruction("verify")
    cap = capture(model, prompts, CaptureConfig(what=VERIFY_WHAT, prepend_bos=prepend_bos, batch_size=batch_size))
    return verify_capture(model, cap, tolerance=tolerance)


@dataclass(kw_only=True)
class VerifyRun:
    """What :func:`run_verify` ran with and found."""

    config: VerifyConfig
    #: One row per layer (:func:`verify_capture`'s table)
    table: pd.DataFrame


def run_verify(model: LoadedModel, config: VerifyConfig | None = None) -> VerifyRun:
    """:func:`verify_attention` on ``config``'s prompts with its settings (default :class:`VerifyConfig`)."""
    config = config or VerifyConfig()
    table = verify_attention(
        model, list(config.prompts), prepend_bos=config.prepend_bos, tolerance=config.tolerance, batch_size=config.batch_size
    )
    return VerifyRun(config=config, table=table)
