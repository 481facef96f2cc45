"""The census's notes: what each detector measured on sliding-window, causal and bidirectional layers."""

from __future__ import annotations

from typing import Any

import numpy as np

from headlens.analyses.heads.detectors import Detector
from headlens.analyses.heads.stimulus_sets import StimulusSet
from headlens.probes.loading import LoadedModel

__all__ = ["POSITIONAL", "window_notes", "causal_note", "bidirectional_notes"]


def window_notes(windows: list[int | None], stim: StimulusSet, det: Detector, baselines: np.ndarray) -> list[dict[str, Any]]:
    """One note per sliding-window layer: what ``det`` could measure there."""
    rows = []
    for layer, w in enumerate(windows):
        if w is None:
            continue
        n = int(baselines.shape[0])
        measured = int(np.isfinite(baselines[:, layer]).sum())
        of = f" of T={stim.seq_len} repeats" if stim.seq_len is not None else ""
        if measured == 0:
            status = f"{det.name} targets{of} lie outside it: not measurable"
        elif measured < n:
            status = (
                f"{n - measured} of {n} prompts have no {det.name} target inside it and are left out; "
                f"baseline uniform over the keys it allows, 1/min(i+1, {w})"
            )
        else:
            status = f"baseline uniform over the keys it allows, 1/min(i+1, {w})"
        parts = [f"layer {layer}: sliding window of {w} keys", status]
        if det.window_rule:
            parts.append(det.window_rule.format(window=w, T=stim.seq_len))
        rows.append({"layer": layer, "detector": det.name, "window": w, "n_measured": measured, "n": n, "note": "; ".join(parts)})
    return rows


#: Detectors that read positions relative to each query; on encoders the framing tokens are
#: neither their queries nor their targets.
POSITIONAL = ("previous_token", "next_token", "duplicate_token", "induction")


def causal_note(det: Detector, causal: tuple[bool, ...]) -> str:
    """``det.causal_rule`` for the causal layers (all of them on a decoder)."""
    layers = [layer for layer, c in enumerate(causal) if c]
    where = "" if len(layers) == len(causal) else f" on layers {', '.join(map(str, layers))} (causal attention)"
    return f"{det.name}{where}: {det.causal_rule}"


def bidirectional_notes(
    model: LoadedModel, dets: list[Detector], causal: tuple[bool, ...], prefix: list[int], suffix: list[int]
) -> list[str]:
    """What the detectors of one stimulus set measure on bidirectional layers (one line each)."""
    bi = [layer for layer, c in enumerate(causal) if not c]
    which = "every layer" if len(bi) == len(causal) else "layers " + ", ".join(map(str, bi))
    notes = [
        f"bidirectional attention ({which}): every query sees every real key, so the uniform baseline gives 1/n to each of the n real keys "
        "of a prompt"
    ]
    names = [d.name for d in dets]
    framing = " and ".join(model.tokenizer.convert_ids_to_tokens(t) for t in [*prefix, *suffix])
    positional = [n for n in POSITIONAL if n in names]
    if positional and framing:
        notes.append(f"the framing tokens ({framing}) are neither queries nor targets of {', '.join(positional)}")
    if "sink" in names:
        notes.append("sink: alpha averages A[i, 0] over every real query" + (f", {framing} included" if framing else ""))
    return notes
