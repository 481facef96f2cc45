"""What one census keeps so later censuses of the same model, changed at block ``L`` or later, rerun only blocks ``L..``.

A change confined to block ``L`` and later (a projection knockout of layer ``L``, say) leaves
every layer before ``L`` as it was: the same stimuli, the same residual stream entering block
``L`` and the same per-prompt results for layers ``0..L-1``.  :class:`CensusPrefix` records them
during one census (``record``) and hands them to the next (:meth:`CensusPrefix.starting_at`): its
forwards continue from the kept stream (:class:`headlens.probes.patch.Start`) and
its rows for layers before ``L`` are the recorded ones.  Intervals and tables are computed from
those arrays as in any census, so the result is the census a full run gives (tested against full
runs: every number equal).

Kept only when it fits (:data:`headlens.analyses.ablation.incremental.MAX_CACHE_BYTES`), the
attention is eager and a continued forward reproduces a full one
(:func:`headlens.probes.patch.check_start`); otherwise each census runs whole,
with a log line saying why (:attr:`CensusPrefix.why_not`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from torch import Tensor

__all__ = ["CensusPrefix", "Arrays"]

log = logging.getLogger(__name__)

#: Per detector: per-prompt scores ``[prompt, layer, head]``, baselines ``[prompt, layer]``, extras.
Arrays = tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]


@dataclass
class CensusPrefix:
    """``layers``: the blocks a later census may start at.  ``start`` 0 records (the census run
    with it keeps stimuli, streams and arrays); ``starting_at(L)`` gives the view a census with a
    change at block ``L`` uses (``L`` 0: only the stimuli are reused)."""

    layers: tuple[int, ...]
    start: int = 0
    recording: bool = True
    stimuli: dict[str, Any] | None = None
    resid: dict[tuple[str, int, int], Tensor] = field(default_factory=dict)  # (kind, batch, layer) -> [batch, pos, d_model]
    arrays: dict[str, Arrays] = field(default_factory=dict)  # kind -> the recorded census's per-prompt arrays
    why_not: str | None = None  # why streams are not kept (every census then runs whole)
    config: Any = None  # the recorded census's settings: a continued census must use the same

    def starting_at(self, layer: int) -> CensusPrefix:
        """The view for a census whose change starts at block ``layer`` (shares what was recorded)."""
        if self.recording and self.stimuli is None:
            raise ValueError("nothing recorded yet: run the unchanged census with this prefix first")
        usable = self.why_not is None and layer in self.layers
        return replace(self, start=layer if usable else 0, recording=False)

    def keeps(self) -> Sequence[int]:
        """Blocks whose entering stream the recording census keeps."""
        return self.layers if self.recording and self.why_not is None else ()

    def refuse(self, why: str) -> None:
        """Keep no streams (every later census runs whole), logged once."""
        if self.why_not is None:
            self.why_not = why
            self.resid.clear()
            log.info("knockout censuses run every block: %s", why)

    def merge(self, kind: str, arrays: Arrays) -> Arrays:
        """The recording census's arrays kept; a continued census's arrays with layers before
        ``start`` taken from the recorded ones."""
        if self.recording:
            self.arrays[kind] = arrays
            return arrays
        if self.start == 0:
            return arrays
        scores, baselines, extras = arrays
        kept_s, kept_b, kept_e = self.arrays[kind]
        cut = self.start
        for name in scores:
            scores[name][:, :cut] = kept_s[name][:, :cut]
            baselines[name][:, :cut] = kept_b[name][:, :cut]
            for key, kept in kept_e[name].items():
                buf = extras[name].setdefault(key, np.full_like(kept, np.nan))
                buf[:, :cut] = kept[:, :cut]
        return scores, baselines, extras
