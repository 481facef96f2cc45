"""The head census: every registered detector, every head, one streaming pass per stimulus set.

For each stimulus set (repeated random tokens, natural-text windows, referent sentences)
the model runs once over batches; a hook on each layer's ``hook_pattern`` hands the
pattern to every detector that reads that stimulus, which reduces it to per-prompt,
per-head scores on the spot.  Only those ``[prompt, layer, head]`` numbers are kept.

Sliding windows: each layer's window (from :func:`headlens.probes.attention.attention_spec`) goes to
the detectors in ``BatchContext.window`` (unless it is at least as long as the longest prompt,
when it changes nothing).  On a window layer baselines are uniform over the
keys the window allows, and positions whose target lies outside it are not measurable: a
prompt with none left scores NaN, table means skip NaN prompts (``n`` counts the measured
ones), a cell with no measured prompt is NaN (never a role), and ``CensusRun.notes`` says
per window layer and detector what was and was not measured (also in the stimuli info as
``window_notes``, which the summary and the manifest carry).

Framing: every prompt is wrapped in the model's special tokens (:meth:`LoadedModel.frame`):
``[BOS] text`` on decoders (exactly the tokens of earlier versions), ``[CLS] text [SEP]`` on
encoders, nothing with ``prepend_bos=False``; natural-text windows hold ``window`` tokens with
the framing.  Every forward passes the batch's attention mask.

Bidirectional attention (encoders; :func:`layer_causal`): the detectors get
``BatchContext.causal=False`` there, so baselines are ``1/n`` for ``n`` real keys and the sink
alpha averages over every query; on encoders the framing tokens are neither queries nor
targets of the positional detectors (``exclude_frame``).  A detector that only measures
bidirectional attention (``Detector.causal_rule``: next-token) is not run by default when every
layer is causal; asked for by name, or on a model with some bidirectional layers, it is NaN on
causal layers, with a note in ``CensusRun.detector_notes`` and the stimuli info's ``notes``.

Eager or streaming (``CensusConfig.attention``; :mod:`headlens.analyses.heads.passes`): the
eager pass reads ``hook_pattern`` (``batch x head x n x n`` floats per layer); the streaming pass
runs the model's SDPA attention and recomputes each layer's pattern from its rotated q and k
in blocks of ``query_block`` queries (:mod:`headlens.probes.streaming`), so memory is linear in
``n``.  Every detector reduces blocks of query rows to sums (``Detector.partial``/``finish``),
so both passes share the reduction code and agree to float rounding (tests: 1e-5 on every
family).  ``auto`` streams when one layer's eager patterns would exceed
:data:`headlens.probes.streaming.DEFAULT_MEMORY_BUDGET` (2 GiB), logs the choice, and the stimuli
info (manifest) records ``attention`` and ``query_block`` per stimulus set.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from headlens.analyses.ablation.incremental import MAX_CACHE_BYTES, stream_bytes
from headlens.analyses.heads.census_config import CensusConfig
from headlens.analyses.heads.census_notes import bidirectional_notes as _bidirectional_notes
from headlens.analyses.heads.census_notes import causal_note as _causal_note
from headlens.analyses.heads.census_notes import window_notes as _window_notes
from headlens.analyses.heads.census_tables import Found, detector_rows, mean0, referent_stats, stimuli_info
from headlens.analyses.heads.detectors import census_detectors
from headlens.analyses.heads.detectors.referent import REFERENT_COLUMNS, min_referent_prompts
from headlens.analyses.heads.passes import run_pass
from headlens.analyses.heads.prefix import CensusPrefix
from headlens.analyses.heads.stimulus_sets import StimulusSet, batch_from_rows, batch_from_tokens, model_frame, wrap_note
from headlens.analyses.measure.stats import bootstrap_mean_ci
from headlens.analyses.stimuli import (
    eval_text,
    fit_referent_items,
    load_referent_file,
    random_repeated_tokens,
    referent_items,
    text_windows,
)
from headlens.probes.attention import attention_spec
from headlens.probes.counts import check_count
from headlens.probes.engine import layer_causal
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.patch import check_start
from headlens.probes.progress import Progress
from headlens.probes.streaming import choose_attention

__all__ = [
    "CensusConfig",
    "CensusRun",
    "check_census_settings",
    "build_stimuli",
    "run_census",
    "DetectRun",
    "layer_windows",
    "layer_causal",
    "SCORE_COLUMNS",
    "NOTE_COLUMNS",
]

SCORE_COLUMNS = ["layer", "head", "detector", "score", "baseline", "ci_low", "ci_high", "n", "accuracy"]
#: One row per (sliding-window layer, detector): ``n_measured`` of ``n`` prompts had a target inside the window.
NOTE_COLUMNS = ["layer", "detector", "window", "n_measured", "n", "note"]


@dataclass
class CensusRun:
    scores: pd.DataFrame
    per_prompt: dict[str, np.ndarray]  # detector -> [prompt, layer, head]
    stimuli: dict[str, dict[str, Any]]
    config: CensusConfig
    notes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=NOTE_COLUMNS))
    #: detector -> what it cannot measure (or measures differently) on this model, e.g.
    #: next_token on causal attention; also in ``stimuli[kind]["notes"]``
    detector_notes: dict[str, str] = field(default_factory=dict)
    #: per-head referent statistics (``headlens.analyses.heads.detectors.referent.REFERENT_TABLE_COLUMNS``:
    #: sign test over minimal pairs, intervals over pairs, held-out accuracy); None without it
    referent: pd.DataFrame | None = None


@dataclass(kw_only=True)
class DetectRun:
    """What ``headlens detect`` keeps of a :class:`CensusRun`: the config it ran with and its ``scores``
    (SCORE_COLUMNS); unlike the census run, rebuilt exactly from the saved table and manifest."""

    config: CensusConfig
    scores: pd.DataFrame


def layer_windows(model: LoadedModel, max_len: int | None = None) -> list[int | None]:
    """Each layer's sliding window in keys (None: full causal attention).  With ``max_len``, a
    window of at least ``max_len`` keys is None too: on prompts that short it changes nothing."""
    windows = [layer.window for layer in attention_spec(model).layers]
    if max_len is None:
        return windows
    return [w if w is not None and w < max_len else None for w in windows]


def build_stimuli(model: LoadedModel, config: CensusConfig, kinds: set[str]) -> dict[str, StimulusSet]:
    """Build the stimulus sets the chosen detectors need, checking they fit the model."""
    tok = model.tokenizer
    prefix, suffix = model_frame(model, config.prepend_bos)
    framed: dict[str, Any] = {"n_prefix": len(prefix), "n_suffix": len(suffix)}
    wrap = wrap_note(model, prefix, suffix)
    out: dict[str, StimulusSet] = {}
    if "repeated" in kinds:
        need = 2 * config.seq_len + len(prefix) + len(suffix)
        if need > model.n_ctx:
            raise InputError(f"seq_len={config.seq_len} needs {need} positions; the model's context is {model.n_ctx}")
        vocab = min(len(tok), int(getattr(model.bridge.cfg, "d_vocab", len(tok))))
        seqs = random_repeated_tokens(config.n_prompts, config.seq_len, config.seed, vocab, exclude=set(tok.all_special_ids), distinct=True)
        frame = [torch.tensor(ids, dtype=torch.long).expand(len(seqs), -1) for ids in (prefix, suffix)]
        tokens = torch.cat([frame[0], seqs, frame[1]], dim=1)
        out["repeated"] = StimulusSet(
            "repeated",
            batch_from_tokens(tokens, torch.full((len(seqs),), tokens.shape[1]), tok, config.prepend_bos, **framed),
            seq_len=config.seq_len,
            source=f"{config.n_prompts} sequences of {config.seq_len} distinct random tokens, repeated twice (seed {config.seed}){wrap}",
            **framed,
        )
    if "natural" in kinds:
        if config.window > model.n_ctx:
            raise InputError(f"window={config.window} is larger than the model's context of {model.n_ctx}")
        if config.window < len(prefix) + len(suffix) + 1:
            raise InputError(f"window={config.window} leaves no text token beside {len(prefix) + len(suffix)} special tokens")
        windows = text_windows(tok, eval_text(), config.window, None, frame=(prefix, suffix))[: config.n_prompts]
        rows = [w.tolist() for w in windows]
        out["natural"] = StimulusSet(
            "natural",
            batch_from_rows(rows, tok, config.prepend_bos, **framed),
            source=f"{len(rows)} consecutive {config.window}-token windows of headlens' evaluation text{wrap}",
            **framed,
        )
    if "referent" in kinds:
        # Items whose pronoun/antecedent/distractor is not one token for this tokenizer are
        # dropped (whole pairs), then the first n_prompts are kept, at least as many as a
        # head needs to be able to pass the sign test (whole pairs: an odd count takes one
        # more); each sentence is wrapped like every prompt (BOS, or [CLS] ... [SEP]).
        pool = load_referent_file(config.referent_file) if config.referent_file else referent_items(seed=config.seed)
        fitted = fit_referent_items(
            pool, tok, wrap=(prefix, suffix), n=max(config.n_prompts, min_referent_prompts(model.n_layers * model.n_heads))
        )
        located = fitted.located
        rows = [list(x.token_ids) for x in located]
        too_long = [i for i, r in enumerate(rows) if len(r) > model.n_ctx]
        if too_long:
            raise InputError(f"referent item {too_long[0]} is longer than the model's context of {model.n_ctx}")
        fit = fitted.info()
        source = (
            config.referent_file
            or f"{len(rows)} headlens referent sentences in {fit['pairs']} minimal pairs from {fit['frames']} frames (seed {config.seed})"
        )
        if fitted.dropped:
            source += (
                f"; {fitted.dropped} of {fitted.offered} items left out, a word not one token for this tokenizer: "
                f"{fitted.describe_dropped()}"
            )
        out["referent"] = StimulusSet(
            "referent",
            batch_from_rows(rows, tok, config.prepend_bos, **framed),
            positions={k: torch.tensor([getattr(x, k) for x in located]) for k in ("pronoun", "antecedent", "distractor")},
            source=source + wrap,
            meta={k: [getattr(x, k) for x in located] for k in ("pair", "frame", "kind")},
            info={"referent_items": fit},
            **framed,
        )
    return out


def _start_recording(model: LoadedModel, prefix: CensusPrefix, config: CensusConfig, stimuli: dict[str, StimulusSet], mode: str) -> None:
    """Keep the stimuli and settings; keep no streams (``prefix.refuse``) where they would not
    fit, the attention streams, or a continued forward does not reproduce a full one."""
    prefix.stimuli, prefix.config = stimuli, config
    if not prefix.layers:
        return
    if mode != "eager":
        prefix.refuse("the census streams its attention (a forward cannot be continued from a kept stream)")
        return
    size = stream_bytes(model, sum(len(s.batch) * int(s.batch.tokens.shape[1]) for s in stimuli.values()), len(prefix.layers))
    if size > MAX_CACHE_BYTES:
        prefix.refuse(f"the kept streams would take {size / 2**30:.1f} GiB")
        return
    # the longest prompt of any set, alone (no padding): a window longer than a sliding one shows a wrong cut
    stim = max(stimuli.values(), key=lambda s: int(s.batch.lengths.max()), default=None)
    longest = int(stim.batch.lengths.argmax()) if stim is not None else 0
    if stim is not None and not check_start(
        model, stim.batch.tokens[longest : longest + 1, : int(stim.batch.lengths[longest])], prefix.layers
    ):
        prefix.refuse("a forward continued from a kept stream does not reproduce a full forward on this model")


def check_census_settings(config: CensusConfig) -> None:
    """The settings' ranges, before any model work (the one check: the census and the study call run it)."""
    check_count("n_prompts", config.n_prompts, bytes_each=4 * 8 * (2 * max(int(config.seq_len), 1) + 2))  # token rows of the sets
    check_count("n_bootstrap", config.n_bootstrap, why="resamples for the intervals")
    if config.seq_len < 3:  # at T = 2 the induction target i - T + 1 is the previous token: the two roles coincide
        raise InputError(f"seq_len must be at least 3 (at 2 induction and previous-token targets are the same token), got {config.seq_len}")
    if config.window < 2:
        raise InputError(f"window must be at least 2, got {config.window}")
    if config.query_block < 1:
        raise InputError(f"query_block must be at least 1, got {config.query_block}")


def run_census(
    model: LoadedModel,
    config: CensusConfig | None = None,
    *,
    progress: Progress | None = None,
    prefix: CensusPrefix | None = None,
) -> CensusRun:
    """Score every head with every chosen detector; returns the long-form table.

    ``progress(stage, done, total)`` is called after each batch.  ``prefix``
    (:class:`~headlens.analyses.heads.prefix.CensusPrefix`): record what a later census of the
    same model changed at block ``L`` or later can reuse, or reuse it (``prefix.starting_at(L)``);
    the table is the one a full census gives.
    """
    config = config or CensusConfig()
    check_census_settings(config)
    causal = layer_causal(model)
    detectors = census_detectors(list(config.detectors) if config.detectors is not None else None, all_causal=all(causal))
    kinds = {d.stimulus for d in detectors}
    if prefix is not None and not prefix.recording:
        if prefix.config != config:
            raise ValueError("a continued census must use the recorded census's settings")
        stimuli = prefix.stimuli or {}
    else:
        stimuli = build_stimuli(model, config, kinds)
    width = max((int(s.batch.tokens.shape[1]) for s in stimuli.values()), default=1)
    mode = choose_attention(
        config.attention,
        batch=min(config.batch_size, max((len(s.batch) for s in stimuli.values()), default=1)),
        n_heads=model.n_heads,
        n=width,
    )
    if prefix is not None and prefix.recording:
        _start_recording(model, prefix, config, stimuli, mode)
    found = Found()
    for kind, stim in stimuli.items():
        cb = (lambda done, total, kind=kind: progress(kind, done, total)) if progress else None
        _score_set(model, config, stim, [d for d in detectors if d.stimulus == kind], causal, mode, cb, prefix, found)
    table = pd.DataFrame(found.rows, columns=SCORE_COLUMNS + (REFERENT_COLUMNS if found.referent is not None else []))
    order = {d.name: i for i, d in enumerate(detectors)}
    table = table.sort_values(
        ["detector", "layer", "head"], key=lambda c: c.map(order) if c.name == "detector" else c, kind="stable"
    ).reset_index(drop=True)
    return CensusRun(
        scores=table,
        per_prompt=found.per_prompt,
        stimuli=stimuli_info(model, config, stimuli, mode, found, {d.name: d.stimulus for d in detectors}),
        config=config,
        notes=pd.DataFrame(found.note_rows, columns=NOTE_COLUMNS),
        detector_notes=found.detector_notes,
        referent=found.referent,
    )


def _score_set(
    model: LoadedModel,
    config: CensusConfig,
    stim: StimulusSet,
    dets: list[Any],
    causal: tuple[bool, ...],
    mode: str,
    progress: Callable[[int, int], None] | None,
    prefix: CensusPrefix | None,
    found: Found,
) -> None:
    """One stimulus set's pass, its bootstrap intervals (one draw of resamples for the set; each
    column's interval is its own) and its rows of every table, added to ``found``."""
    kind = stim.kind
    windows = layer_windows(model, int(stim.batch.lengths.max()))
    windows = [w if c else None for w, c in zip(windows, causal, strict=True)]
    encoder = bool(getattr(model, "is_encoder", False))
    scores, baselines, extras = run_pass(model, stim, dets, config, progress, windows, causal, encoder, attention=mode, prefix=prefix)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN cell's interval is NaN
        lows, highs = (
            bootstrap_mean_ci(np.stack([scores[d.name] for d in dets], axis=1), n_resamples=config.n_bootstrap, seed=config.seed)
            if dets
            else ((), ())
        )
    if not all(causal):
        frame_prefix, frame_suffix = model_frame(model, config.prepend_bos)
        found.stim_notes.setdefault(kind, []).extend(_bidirectional_notes(model, dets, causal, frame_prefix, frame_suffix))
    for det, low, high in zip(dets, lows, highs, strict=True):
        if det.causal_rule and any(causal):
            found.detector_notes[det.name] = _causal_note(det, causal)
            found.stim_notes.setdefault(kind, []).append(found.detector_notes[det.name])
        s = scores[det.name]
        found.per_prompt[det.name] = s
        acc = extras[det.name].get("accuracy")
        b = baselines[det.name]
        found.note_rows += _window_notes(windows, stim, det, b)
        more: dict[str, np.ndarray] = {}  # detector-specific columns of the scores table
        if det.name == "referent":
            found.referent, more = referent_stats(stim, s, extras[det.name], b, config)
        found.rows += detector_rows(det.name, s, b, low, high, mean0(acc) if acc is not None else None, more)
