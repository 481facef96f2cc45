"""What a detector is: a named, per-prompt reduction of one layer's attention pattern.

A detector never sees more than one batch of one layer's pattern ``[batch, head, q, k]``
(inside a hook), so a census over any number of prompts keeps only per-prompt scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["Detector", "BatchContext", "DetectorOutput", "mean_attention_at", "STIMULI"]

#: Stimulus sets a detector can ask for.
STIMULI = ("repeated", "natural", "referent")


@dataclass
class BatchContext:
    """What a detector needs to know about the prompts in a batch (positions as the model saw them)."""

    lengths: Int[Tensor, " batch"]
    offset: int  # 1 when a BOS token was prepended, else 0
    seq_len: int | None = None  # T, for repeated random sequences (x1..xT x1..xT)
    pronoun: Int[Tensor, " batch"] | None = None
    antecedent: Int[Tensor, " batch"] | None = None
    distractor: Int[Tensor, " batch"] | None = None


@dataclass
class DetectorOutput:
    """Per-prompt, per-head score; the uniform-attention baseline for the same positions;
    optional extra per-prompt, per-head statistics (e.g. referent accuracy)."""

    score: Float[Tensor, "batch head"]
    baseline: Float[Tensor, " batch"]
    extra: dict[str, Float[Tensor, "batch head"]] = field(default_factory=dict)


@dataclass(frozen=True)
class Detector:
    name: str
    stimulus: str
    threshold: float
    summary: str
    compute: Callable[[Float[Tensor, "batch head q k"], BatchContext], DetectorOutput]
    #: extra statistics that also gate the role, as {name: minimum}
    extra_thresholds: dict[str, float] = field(default_factory=dict)


def mean_attention_at(
    pattern: Float[Tensor, "batch head q k"],
    q_idx: Int[Tensor, "batch m"],
    k_idx: Int[Tensor, "batch m"],
    valid: Bool[Tensor, "batch m"],
) -> tuple[Float[Tensor, "batch head"], Float[Tensor, " batch"]]:
    """Mean over valid ``m`` of ``pattern[b, :, q_idx[b, m], k_idx[b, m]]``, and the same mean
    for a uniform head (``1 / (q + 1)``), in float32."""
    b, h = pattern.shape[:2]
    width = pattern.shape[-1]
    dev = pattern.device
    q_idx, k_idx, valid = q_idx.to(dev), k_idx.to(dev), valid.to(dev)
    flat = pattern.float().reshape(b, h, width * width)
    lin = (q_idx.clamp(0, width - 1) * width + k_idx.clamp(0, width - 1))[:, None, :].expand(b, h, -1)
    picked = flat.gather(2, lin)  # [b, h, m]
    w = valid.float()
    count = w.sum(-1).clamp(min=1)
    score = (picked * w[:, None, :]).sum(-1) / count[:, None]
    baseline = ((1.0 / (q_idx.float() + 1)) * w).sum(-1) / count
    return score, baseline
