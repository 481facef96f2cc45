"""The key groups of the sink-target statistic.

**Sink targets** (``targets=True`` in :func:`headlens.analyses.sinks.stream.stream_sink_stats`;
Clark et al. 2019 report BERT's attention to ``[CLS]``, ``[SEP]`` and punctuation): per head,
the attention share ``sum over j in G of A[i, j]`` that a query gives to a group ``G`` of keys,
for three groups: ``first`` (position 0: BOS, ``[CLS]``, or the first text token), ``suffix``
(the special tokens after the text: ``[SEP]``; decoders have none: NaN) and ``punctuation``
(text tokens whose string is punctuation, e.g. "." and ",", by :func:`punctuation_ids`; never
position 0 or the suffix).  Averaged over the real queries that can see at least one key of
``G`` (for ``first`` that is exactly alpha(0)), per sequence, then over the sequences that have
such a query.  Uniform baseline: the share a uniform head gives ``G``, ``#(keys of G it sees) /
#(keys it sees)``, averaged the same way.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Any

import torch
from torch import Tensor

__all__ = ["TARGET_GROUPS", "punctuation_ids"]

log = logging.getLogger(__name__)

#: The key groups of the sink-target statistic (module docstring), in table order.
TARGET_GROUPS: tuple[str, ...] = ("first", "suffix", "punctuation")


def punctuation_ids(tokenizer: Any, ids: Tensor) -> Tensor:
    """The ids among ``ids`` whose token string is punctuation: decoded alone, stripped of
    spaces (and of WordPiece's ``##``), non-empty and made only of Unicode punctuation (P*);
    special tokens never are.  Returns a sorted LongTensor."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out = []
    for t in torch.unique(ids).tolist():
        if t in special:
            continue
        text = tokenizer.decode([int(t)]).strip()
        if text.startswith("##"):
            text = text[2:]
        if text and all(unicodedata.category(c).startswith("P") for c in text):
            out.append(int(t))
    return torch.tensor(out, dtype=torch.long)
