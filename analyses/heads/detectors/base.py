"""What a detector is: a named, per-prompt reduction of one layer's attention pattern.

A detector never sees more than one batch of one layer's pattern ``[batch, head, q, k]``
(inside a hook), so a census over any number of prompts keeps only per-prompt scores.

Query blocks: a detector is ``partial(rows, ctx, q_offset) -> Sums`` over the pattern rows of
queries ``q_offset .. q_offset + block - 1`` (all keys), whose sums are added over blocks
(:func:`headlens.probes.engine.add_sums`), then ``finish(sums, ctx) -> DetectorOutput``:
a detector is a reducer of :func:`headlens.probes.engine.reduce_pass`, the one pass over
patterns.  The eager census hands the whole pattern as one block (``compute`` = :func:`whole_pattern`); the streaming census
(:mod:`headlens.probes.streaming`) hands blocks recomputed from q and k, so both paths share
the reduction code and never differ by more than float rounding.

Sliding windows: the census hands each layer's window (``BatchContext.window``, from
:func:`headlens.probes.attention.attention_spec`) to the detectors.  In such a layer query ``i`` sees
only keys ``i - window < j <= i``, so a uniform head gives ``1/min(i+1, window)`` to each of
them, and a target key outside the window cannot be attended at all: such positions are *not
measurable* and are left out of the average; a prompt with no measurable position scores NaN
(never 0).  :func:`headlens.probes.attention.visible` (the one visibility rule) and
:func:`uniform_weight` are the window rule;
:func:`mean_attention_at` applies it.

Bidirectional layers (encoders such as BERT; ``BatchContext.causal`` False): every query sees
every real key of its prompt, so a uniform head gives ``1/n`` to each key (``n`` = the prompt's
real length, special tokens included) and a target after the query (``A[i, i+1]``) is
measurable.  On causal attention such a target is masked: not measurable, NaN (never 0).
Encoders wrap each prompt in special tokens (``[CLS] ... [SEP]``): with
``BatchContext.exclude_frame`` those positions (the first ``offset`` and the last ``suffix``)
are neither queries nor targets of the positional detectors (previous/next token, duplicate,
induction); the sink still averages over every query.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jaxtyping import Bool, Float, Int
from torch import Tensor

from headlens.probes.attention import visible
from headlens.probes.engine import Sums, add_sums

__all__ = [
    "Detector",
    "BatchContext",
    "DetectorOutput",
    "mean_attention_at",
    "attention_sums_at",
    "mean_from_sums",
    "whole_pattern",
    "uniform_weight",
    "STIMULI",
]

#: Stimulus sets a detector can ask for.
STIMULI = ("repeated", "natural", "referent")


@dataclass
class BatchContext:
    """What a detector needs to know about the prompts in a batch (positions as the model saw them)."""

    lengths: Int[Tensor, " batch"]
    offset: int  # tokens before the text: 1 with a BOS (decoders) or [CLS] (encoders), else 0
    seq_len: int | None = None  # T, for repeated random sequences (x1..xT x1..xT)
    pronoun: Int[Tensor, " batch"] | None = None
    antecedent: Int[Tensor, " batch"] | None = None
    distractor: Int[Tensor, " batch"] | None = None
    #: the layer's sliding window in keys (query i sees keys i - window < j <= i); None: full causal
    window: int | None = None
    #: False for bidirectional attention (encoders): query i sees every real key j < length
    causal: bool = True
    #: special tokens after the text at the end of each real prompt (1 for an encoder's [SEP])
    suffix: int = 0
    #: the frame's special tokens (first ``offset``, last ``suffix``) are neither queries nor
    #: targets of positional detectors (encoders); False keeps a decoder's BOS as the first
    #: text token's previous token, as in TransformerLens
    exclude_frame: bool = False
    #: ``lengths`` on the host, for rules computed there (the sink baseline) without a
    #: device synchronisation per batch; None: copied from ``lengths`` when needed
    host_lengths: Int[Tensor, " batch"] | None = None

    def text_bounds(self) -> tuple[int, Int[Tensor, " batch"]]:
        """``(start, stop)``: the positions positional detectors use, ``start <= i < stop[b]``
        (all real positions unless ``exclude_frame``)."""
        if not self.exclude_frame:
            return 0, self.lengths
        return self.offset, self.lengths - self.suffix


@dataclass
class DetectorOutput:
    """Per-prompt, per-head score; the uniform-attention baseline for the same positions;
    optional extra per-prompt, per-head statistics (e.g. referent accuracy).  A prompt with
    no measurable position (its targets lie outside the layer's window) has NaN score and
    baseline."""

    score: Float[Tensor, "batch head"]
    baseline: Float[Tensor, " batch"]
    extra: dict[str, Float[Tensor, "batch head"]] = field(default_factory=dict)


def whole_pattern(partial: Callable[..., Sums], finish: Callable[..., DetectorOutput]) -> Callable[..., DetectorOutput]:
    """``compute(pattern, ctx)``: the whole pattern as one block of queries."""

    def compute(pattern: Tensor, ctx: BatchContext) -> DetectorOutput:
        return finish(add_sums(None, partial(pattern, ctx, 0)), ctx)

    return compute


@dataclass(frozen=True)
class Detector:
    name: str
    stimulus: str
    threshold: float
    summary: str
    #: sums over the rows of one block of queries ``(rows [batch, head, block, k], ctx, q_offset)``
    partial: Callable[[Float[Tensor, "batch head block k"], BatchContext, int], Sums]
    #: the per-prompt output from the sums added over every block
    finish: Callable[[Sums, BatchContext], DetectorOutput]
    #: extra statistics that also gate the role, as {name: minimum}
    extra_thresholds: dict[str, float] = field(default_factory=dict)
    #: what the detector measures in a sliding-window layer, for the census notes
    #: (``{window}`` and ``{T}`` are filled in); empty when its targets are always visible
    window_rule: str = ""
    #: non-empty when the detector's targets are masked on causal attention (it measures
    #: bidirectional layers only): the census note for causal layers
    causal_rule: str = ""

    def compute(self, pattern: Float[Tensor, "batch head q k"], ctx: BatchContext) -> DetectorOutput:
        """The detector on a whole pattern (one block holding every query)."""
        return whole_pattern(self.partial, self.finish)(pattern, ctx)


def uniform_weight(q_idx: Tensor, window: int | None, *, causal: bool = True, n_keys: Tensor | None = None) -> Tensor:
    """What a uniform head gives each key it sees at query ``q_idx``: ``1/(q+1)``, or
    ``1/min(q+1, window)`` in a sliding-window layer, or ``1/n_keys`` on a bidirectional layer
    (``n_keys``: the real length of the query's prompt, broadcast against ``q_idx``) (float32)."""
    if not causal:
        if n_keys is None:
            raise ValueError("a bidirectional layer's uniform weight needs n_keys (the prompt's real length)")
        return (1.0 / n_keys.float()).expand(q_idx.shape)
    if window is None:
        return 1.0 / (q_idx.float() + 1)
    return 1.0 / (q_idx.float() + 1).clamp(max=float(window))


def attention_sums_at(
    rows: Float[Tensor, "batch head block k"],
    q_idx: Int[Tensor, "batch m"],
    k_idx: Int[Tensor, "batch m"],
    valid: Bool[Tensor, "batch m"],
    *,
    q_offset: int = 0,
    window: int | None = None,
    causal: bool = True,
    lengths: Int[Tensor, " batch"] | None = None,
) -> Sums:
    """Sums for :func:`mean_from_sums` over the ``m`` positions whose query lies in this block
    (``q_offset <= q_idx < q_offset + block``): ``score`` ``[batch, head]`` (attention
    ``rows[b, :, q - q_offset, k]``), ``baseline`` and ``count`` ``[batch]``."""
    b, h, n_rows, width = rows.shape
    dev = rows.device
    q_idx, k_idx, valid = q_idx.to(dev), k_idx.to(dev), valid.to(dev)
    valid = valid & visible(q_idx, k_idx, window=window, causal=causal) & (q_idx >= q_offset) & (q_idx < q_offset + n_rows)
    local = (q_idx - q_offset).clamp(0, n_rows - 1)
    flat = rows.float().reshape(b, h, n_rows * width)
    lin = (local * width + k_idx.clamp(0, width - 1))[:, None, :].expand(b, h, -1)
    picked = flat.gather(2, lin)  # [b, h, m]
    w = valid.float()
    n_keys = lengths.to(dev)[:, None] if lengths is not None else None
    return {
        "score": (picked * w[:, None, :]).sum(-1),
        "baseline": (uniform_weight(q_idx, window, causal=causal, n_keys=n_keys) * w).sum(-1),
        "count": w.sum(-1),
    }


def mean_from_sums(sums: Sums) -> tuple[Float[Tensor, "batch head"], Float[Tensor, " batch"]]:
    """``(score, baseline)`` means from :func:`attention_sums_at` sums (float32); NaN where nothing counted."""
    total = sums["count"]
    count = total.clamp(min=1)
    score = (sums["score"] / count[:, None]).float()
    baseline = (sums["baseline"] / count).float()
    none = total == 0  # masked whether or not any is: no host synchronisation per batch
    return score.masked_fill(none[:, None], float("nan")), baseline.masked_fill(none, float("nan"))


def mean_attention_at(
    pattern: Float[Tensor, "batch head q k"],
    q_idx: Int[Tensor, "batch m"],
    k_idx: Int[Tensor, "batch m"],
    valid: Bool[Tensor, "batch m"],
    *,
    window: int | None = None,
    causal: bool = True,
    lengths: Int[Tensor, " batch"] | None = None,
) -> tuple[Float[Tensor, "batch head"], Float[Tensor, " batch"]]:
    """Mean over valid ``m`` of ``pattern[b, :, q_idx[b, m], k_idx[b, m]]``, and the same mean
    for a uniform head (:func:`uniform_weight`), in float32.

    Positions whose key the query cannot see (after it on causal attention, outside a sliding
    ``window``) are not measurable and do not count; a prompt with no counted position gets
    NaN (score and baseline).  ``causal=False`` (bidirectional) needs ``lengths``: the uniform
    weight is ``1/length``.  (:func:`attention_sums_at` over the whole pattern as one block.)
    """
    return mean_from_sums(attention_sums_at(pattern, q_idx, k_idx, valid, window=window, causal=causal, lengths=lengths))
