"""The resolution rule of exact patching: a difference below what a float32 forward resolves is no change.

One rule for every path of :mod:`~headlens.analyses.circuits.exact` (the bridge's forwards and
:mod:`~headlens.probes.fast_blocks`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["FLOAT32_EPS", "RESOLUTION_EPS", "change", "share_resolution"]

#: A patched value within this many float32 machine epsilons, relative to ``max(1, |patched|, |base|)``, of the
#: value it is measured from is reported as no change (exactly 0): below what a float32 forward resolves.  Rows
#: that compute the same thing round apart by their place in a batch (batched kernels of tiny matrices), so an
#: edge that changes nothing would otherwise score noise.  float32's epsilon whatever the model's dtype: in
#: bfloat16 the same rule would zero genuine effects of 0.1 logits.
RESOLUTION_EPS = 4.0
#: float32's machine epsilon.
FLOAT32_EPS = float(torch.finfo(torch.float32).eps)


def change(patched: Tensor, base: Tensor, eps: float) -> Tensor:
    """``patched - base``, 0 where it is below the resolution (:data:`RESOLUTION_EPS`)."""
    d = patched - base
    tol = RESOLUTION_EPS * eps * torch.maximum(patched.abs(), base.abs()).clamp(min=1.0)
    return torch.where(d.abs() <= tol, torch.zeros_like(d), d)


def share_resolution(clean: np.ndarray, corrupt: np.ndarray, gap: float, eps: float = FLOAT32_EPS) -> float:
    """The smallest share of the gap exact patching resolves: :func:`change`'s tolerance at the largest metric
    value of the pairs, over ``|gap|`` (the mean clean-corrupt difference); inf when the gap is 0 or undefined."""
    vals = np.abs(np.concatenate([np.asarray(clean, dtype=float).ravel(), np.asarray(corrupt, dtype=float).ravel()]))
    vals = vals[np.isfinite(vals)]
    scale = max(1.0, float(vals.max())) if len(vals) else 1.0
    g = abs(float(gap))
    return RESOLUTION_EPS * eps * scale / g if np.isfinite(g) and g > 0 else float("inf")
