"""The resolution rule of exact patching: a difference below what a float32 forward resolves is no change.

One rule for every path of :mod:`~headlens.analyses.circuits.exact` (the bridge's forwards and
:mod:`~headlens.analyses.circuits.own_blocks`).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["RESOLUTION_EPS", "change"]

#: A patched value within this many float32 machine epsilons, relative to ``max(1, |patched|, |base|)``, of the
#: value it is measured from is reported as no change (exactly 0): below what a float32 forward resolves.  Rows
#: that compute the same thing round apart by their place in a batch (batched kernels of tiny matrices), so an
#: edge that changes nothing would otherwise score noise.  float32's epsilon whatever the model's dtype: in
#: bfloat16 the same rule would zero genuine effects of 0.1 logits.
RESOLUTION_EPS = 4.0


def change(patched: Tensor, base: Tensor, eps: float) -> Tensor:
    """``patched - base``, 0 where it is below the resolution (:data:`RESOLUTION_EPS`)."""
    d = patched - base
    tol = RESOLUTION_EPS * eps * torch.maximum(patched.abs(), base.abs()).clamp(min=1.0)
    return torch.where(d.abs() <= tol, torch.zeros_like(d), d)
