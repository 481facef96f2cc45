"""Positions shared by the detectors that read repeated random sequences."""

from __future__ import annotations

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from headlens.analyses.heads.detectors.base import BatchContext

__all__ = ["second_copy_queries"]


def second_copy_queries(pattern: Tensor, ctx: BatchContext) -> tuple[Int[Tensor, "batch T"], Bool[Tensor, "batch T"]]:
    """Query positions of the second copy (``offset+T .. offset+2T-1``), and which are real
    (before any suffix such as an encoder's ``[SEP]`` when ``ctx.exclude_frame``)."""
    if ctx.seq_len is None:
        raise ValueError("repeated-sequence detectors need BatchContext.seq_len")
    T, o = ctx.seq_len, ctx.offset
    _, stop = ctx.text_bounds()
    q = torch.arange(o + T, o + 2 * T, device=pattern.device)[None, :].expand(pattern.shape[0], -1)
    valid = q < stop.to(pattern.device)[:, None]
    return q, valid
