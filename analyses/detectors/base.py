"""What a detector is: a named, per-prompt reduction of one layer's attention pattern.

A detector never sees more than one batch of one layer's pattern ``[batch, head, q, k]``
(inside a hook), so a census over any number of prompts keeps only per-prompt scores.

Sliding windows: the census hands each layer's window (``BatchContext.window``, from
:func:`probes.attention.attention_spec`) to the detectors.  In such a layer query ``i`` sees
only keys ``i - window < j <= i``, so a uniform head gives ``1/min(i+1, window)`` to each of
them, and a target key outside the window cannot be attended at all: such positions are *not
measurable* and are left out of the average; a prompt with no measurable position scores NaN
(never 0).  :func:`visible` and :func:`uniform_weight` are the window rule;
:func:`mean_attention_at` applies it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

__all__ = ["Detector", "BatchContext", "DetectorOutput", "mean_attention_at", "visible", "uniform_weight", "STIMULI"]

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
    #: the layer's sliding window in keys (query i sees keys i - window < j <= i); None: full causal
    window: int | None = None


@dataclass
class DetectorOutput:
    """Per-prompt, per-head score; the uniform-attention baseline for the same positions;
    optional extra per-prompt, per-head statistics (e.g. referent accuracy).  A prompt with
    no measurable position (its targets lie outside the layer's window) has NaN score and
    baseline."""

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
    #: what the detector measures in a sliding-window layer, for the census notes
    #: (``{window}`` and ``{T}`` are filled in); empty when its targets are always visible
    window_rule: str = ""


def visible(q_idx: Tensor, k_idx: Tensor, window: int | None) -> Tensor:
    """Whether key ``k_idx`` lies inside query ``q_idx``'s sliding window (``k > q - window``,
    ``k <= q``); all True when ``window`` is None (full causal attention)."""
    if window is None:
        return torch.ones(torch.broadcast_shapes(q_idx.shape, k_idx.shape), dtype=torch.bool, device=q_idx.device)
    return (k_idx <= q_idx) & (k_idx > q_idx - window)


def uniform_weight(q_idx: Tensor, window: int | None) -> Tensor:
    """What a uniform head gives each key it sees at query ``q_idx``: ``1/(q+1)``, or
    ``1/min(q+1, window)`` in a sliding-window layer (float32)."""
    if window is None:
        return 1.0 / (q_idx.float() + 1)
    return 1.0 / (q_idx.float() + 1).clamp(max=float(window))


def mean_attention_at(
    pattern: Float[Tensor, "batch head q k"],
    q_idx: Int[Tensor, "batch m"],
    k_idx: Int[Tensor, "batch m"],
    valid: Bool[Tensor, "batch m"],
    *,
    window: int | None = None,
) -> tuple[Float[Tensor, "batch head"], Float[Tensor, " batch"]]:
    """Mean over valid ``m`` of ``pattern[b, :, q_idx[b, m], k_idx[b, m]]``, and the same mean
    for a uniform head (:func:`uniform_weight`), in float32.

    With a sliding ``window``, positions whose key is outside the query's window are not
    measurable and do not count; a prompt with no counted position gets NaN (score and baseline).
    """
    b, h = pattern.shape[:2]
    width = pattern.shape[-1]
    dev = pattern.device
    q_idx, k_idx, valid = q_idx.to(dev), k_idx.to(dev), valid.to(dev)
    if window is not None:
        valid = valid & visible(q_idx, k_idx, window)
    flat = pattern.float().reshape(b, h, width * width)
    lin = (q_idx.clamp(0, width - 1) * width + k_idx.clamp(0, width - 1))[:, None, :].expand(b, h, -1)
    picked = flat.gather(2, lin)  # [b, h, m]
    w = valid.float()
    total = w.sum(-1)
    count = total.clamp(min=1)
    score = (picked * w[:, None, :]).sum(-1) / count[:, None]
    baseline = (uniform_weight(q_idx, window) * w).sum(-1) / count
    none = total == 0
    if bool(none.any()):
        score = score.masked_fill(none[:, None], float("nan"))
        baseline = baseline.masked_fill(none, float("nan"))
    return score, baseline
