"""The token batches of a sink investigation: census sequences, long sequences, framed prompts.

* **Stimuli**: ``window`` tokens (64 in Gu et al.) cut from the evaluation text (the one
  :func:`headlens.analyses.measure.texts.choose_text` chooses, passed in as ``text``), with
  and without a prepended BOS (the BOS counts toward the window), up to ``n_prompts`` sequences
  (Gu et al. used about 100); or the user's prompts, each cut to ``window`` tokens.
* **Encoders** (BERT): every sequence is ``[CLS] text [SEP]`` (``window`` tokens in all;
  ``bos=True`` means the model's framing, :meth:`LoadedModel.frame`).
* Windowed attention reads ``n_long`` longer sequences of ``long_tokens`` tokens (:func:`long_batch`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import torch

from headlens.analyses.heads.stimulus_sets import model_frame
from headlens.analyses.sinks.config import DEFAULT_MAX_PROMPTS, SinkConfig
from headlens.analyses.stimuli import eval_text, text_windows
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.prompts import TokenBatch, tokenize_prompts

__all__ = ["census_batch", "long_batch", "long_length", "frame_tokens", "tokenize_framed", "n_windows"]

log = logging.getLogger(__name__)


def frame_tokens(model: LoadedModel, prepend_bos: bool) -> tuple[list[int], list[int]]:
    """The special-token ids the model puts before and after the text: ``([BOS] or [], [])`` or ``([CLS], [SEP])``."""
    return model_frame(model, prepend_bos)


def _tokens_batch(tokens: torch.Tensor, prepend_bos: bool, frame: tuple[list[int], list[int]] | None = None) -> TokenBatch:
    n, width = tokens.shape
    kwargs: dict[str, Any] = {
        "tokens": tokens,
        "lengths": torch.full((n,), width, dtype=torch.long),
        "strings": [[] for _ in range(n)],
        "prepend_bos": prepend_bos,
        "pad_id": 0,
    }
    if frame is not None and "n_prefix" in {f.name for f in dataclasses.fields(TokenBatch)}:
        kwargs.update(n_prefix=len(frame[0]), n_suffix=len(frame[1]))
    return TokenBatch(**kwargs)


def tokenize_framed(model: LoadedModel, prompts: Sequence[str], prepend_bos: bool, n_ctx: int, truncate: bool) -> TokenBatch:
    """Prompts wrapped in the model's framing (``[BOS] text``, ``[CLS] text [SEP]``), at most ``n_ctx`` tokens each."""
    return tokenize_prompts(
        model.tokenizer, list(prompts), prepend_bos=prepend_bos, n_ctx=n_ctx, truncate=truncate, frame=frame_tokens(model, prepend_bos)
    )


def _available_windows(model: LoadedModel, window: int, prepend_bos: bool, text: str | None = None) -> int:
    n_text = len(model.tokenizer(eval_text() if text is None else text, add_special_tokens=False, verbose=False)["input_ids"])
    prefix, suffix = frame_tokens(model, prepend_bos)
    return n_text // max(window - len(prefix) - len(suffix), 1)


def census_batch(model: LoadedModel, config: SinkConfig, prepend_bos: bool, text: str | None = None) -> TokenBatch:
    """The census sequences: ``config.prompts`` cut to ``window`` tokens, or evaluation-text windows.

    Without ``n_prompts`` limits, as many evaluation-text windows as the text holds for every
    BOS setting (the same count for each), at most ``n_prompts``.  ``text``: the text the windows
    are cut from (None: the built-in evaluation text).
    """
    if config.prompts is not None:
        batch = tokenize_framed(model, config.prompts, prepend_bos, config.window, True)
        return batch if config.n_prompts is None else batch.select(slice(0, config.n_prompts))
    n = n_windows(model, config, text)
    frame = frame_tokens(model, prepend_bos)
    tokens = text_windows(model.tokenizer, eval_text() if text is None else text, config.window, n, frame=frame)
    return _tokens_batch(tokens, prepend_bos, frame)


def n_windows(model: LoadedModel, config: SinkConfig, text: str | None = None) -> int:
    """How many evaluation-text windows the census uses (the same for every BOS setting); ``text``: as :func:`census_batch`."""
    n = min(_available_windows(model, config.window, b, text) for b in (*config.bos, False))
    if n < 1:
        raise InputError(f"the evaluation text holds no window of window={config.window} tokens; give a longer text=", window=config.window)
    if config.n_prompts is None:
        return min(n, DEFAULT_MAX_PROMPTS)
    if config.n_prompts > n:
        raise InputError(
            f"n_prompts={config.n_prompts}: the evaluation text holds only {n} windows of {config.window} tokens; ask for at most {n}",
            n_prompts=config.n_prompts,
        )
    return config.n_prompts


def long_length(model: LoadedModel, config: SinkConfig) -> int:
    """Tokens per long sequence of windowed attention: ``long_tokens``, default the context (at most 1024)."""
    return config.long_tokens or min(model.n_ctx, 1024)


def long_batch(model: LoadedModel, config: SinkConfig, prepend_bos: bool, text: str | None = None) -> TokenBatch:
    """Long evaluation sequences for windowed attention: ``n_long`` windows of ``long_tokens``
    (fewer when ``text`` holds fewer; ``text``: as :func:`census_batch`)."""
    length = long_length(model, config)
    n = min(config.n_long, max(1, _available_windows(model, length, prepend_bos, text)))
    frame = frame_tokens(model, prepend_bos)
    tokens = text_windows(model.tokenizer, eval_text() if text is None else text, length, n, frame=frame)
    return _tokens_batch(tokens, prepend_bos, frame)
