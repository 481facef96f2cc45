"""The census's tables from its passes' arrays: the scores table's rows (one per head and
detector), the referent statistics, and what each stimulus set's info says (the summary and the
manifest read it).  :func:`headlens.analyses.heads.census.run_census` runs the passes and calls these."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.heads.census_config import CensusConfig
from headlens.analyses.heads.detectors.referent import REFERENT_COLUMNS, SPLIT_SEED, referent_statistics
from headlens.analyses.heads.stimulus_sets import StimulusSet, model_framing
from headlens.probes.loading import LoadedModel

__all__ = ["Found", "mean0", "referent_stats", "detector_rows", "stimuli_info"]


@dataclass
class Found:
    """What the stimulus sets' passes add up to: the scores table's rows, the window notes' rows,
    the per-prompt scores, the notes per detector and per set, the referent table."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    note_rows: list[dict[str, Any]] = field(default_factory=list)
    per_prompt: dict[str, np.ndarray] = field(default_factory=dict)
    detector_notes: dict[str, str] = field(default_factory=dict)
    stim_notes: dict[str, list[str]] = field(default_factory=dict)
    referent: pd.DataFrame | None = None


def mean0(values: np.ndarray) -> np.ndarray:
    """Mean over prompts (axis 0); cells with NaN prompts (not measurable there) use the others,
    and a cell with none is NaN.  Cells without NaN are exactly ``values.mean(0)``."""
    if values.ndim == 1:  # one value, as a 0-d array
        if not np.isnan(values).any():
            return np.asarray(values.mean())
        return np.asarray(np.nanmean(values) if (~np.isnan(values)).any() else np.float64("nan"))
    out = values.mean(0)
    bad = np.isnan(out)
    if bad.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells stay NaN
            out[bad] = np.nanmean(values[:, bad], axis=0)
    return out


def referent_stats(
    stim: StimulusSet, to_ante: np.ndarray, extras: dict[str, np.ndarray], baselines: np.ndarray, config: CensusConfig
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The referent table and the referent columns of the scores table (``[layer, head]`` each);
    records the selection / held-out split of the frames in the set's info."""
    table, split = referent_statistics(
        to_ante,
        extras["distractor"],
        extras["accuracy"],
        baselines,
        stim.meta["pair"],
        stim.meta["frame"],
        stim.meta["kind"],
        n_bootstrap=config.n_bootstrap,
        seed=config.seed,
    )
    stim.info["referent_split"] = {"seed": SPLIT_SEED, **split}
    L, H = to_ante.shape[1:]
    return table, {col: table[col].to_numpy(dtype=np.float64).reshape(L, H) for col in REFERENT_COLUMNS}


def detector_rows(
    name: str,
    s: np.ndarray,
    b: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    acc_mean: np.ndarray | None,
    more: dict[str, np.ndarray],
) -> list[dict[str, Any]]:
    """One detector's rows of the scores table, one per head: the mean over measured prompts of
    ``s`` ``[prompt, layer, head]``, the layer's mean baseline (``b``: ``[prompt, layer]``), the
    interval, the count of measured prompts, the accuracy and the detector's own columns."""
    mean = mean0(s)
    measured = np.isfinite(s).sum(0)
    L, H = mean.shape
    rows = []
    for layer in range(L):
        base = float(mean0(np.ascontiguousarray(b[:, layer])))
        for head in range(H):
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "detector": name,
                    "score": float(mean[layer, head]),
                    "baseline": base,
                    "ci_low": float(low[layer, head]),
                    "ci_high": float(high[layer, head]),
                    "n": int(measured[layer, head]),
                    "accuracy": float(acc_mean[layer, head]) if acc_mean is not None else float("nan"),
                    **{k: float(v[layer, head]) for k, v in more.items()},
                }
            )
    return rows


def stimuli_info(
    model: LoadedModel, config: CensusConfig, stimuli: dict[str, StimulusSet], mode: str, found: Found, stimulus_of: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """Per stimulus set, what the summary and the manifest say about it: source, counts, attention
    path, framing, notes and window notes."""
    info = {
        k: {
            "source": v.source,
            "n": len(v.batch),
            "max_len": int(v.batch.lengths.max()),
            "seq_len": v.seq_len,
            "attention": mode,
            "query_block": config.query_block if mode == "streaming" else None,
            **v.info,
        }
        for k, v in stimuli.items()
    }
    if stimuli:
        framing = model_framing(model, config.prepend_bos)
        for k in info:
            info[k]["framing"] = framing
            if found.stim_notes.get(k):
                info[k]["notes"] = found.stim_notes[k]
    for kind in info:
        kind_notes = [r["note"] for r in found.note_rows if stimulus_of[r["detector"]] == kind]
        if kind_notes:
            info[kind]["window_notes"] = kind_notes
    return info
