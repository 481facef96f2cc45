"""Natural text: the project's evaluation text and fixed-size token windows.

``analyses/data/eval_text.txt`` is original English prose written for this
project (see ``analyses/data/SOURCES.md``): explanations, a short story,
dialogue, lists and numbers, with paragraphs separated by blank lines.  It is
the evaluation text for next-token loss in ablation studies and the source of
natural-text windows for previous-token and attention-sink studies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import Any

import torch

from headlens.probes.errors import StimulusError

__all__ = ["EVAL_TEXT_RESOURCE", "eval_text", "text_windows"]

log = logging.getLogger(__name__)

EVAL_TEXT_RESOURCE = "data/eval_text.txt"  # relative to the ``analyses`` package


@lru_cache(maxsize=1)
def eval_text() -> str:
    """The project's evaluation text, read as package data (UTF-8)."""
    resource = resources.files("headlens.analyses").joinpath(EVAL_TEXT_RESOURCE)
    try:
        return resource.read_text(encoding="utf-8")
    except OSError as exc:  # pragma: no cover - broken install
        raise StimulusError(
            f"cannot read the evaluation text analyses/{EVAL_TEXT_RESOURCE}: {exc}; is the package data installed?"
        ) from exc


def _encode(tokenizer: Any, text: str) -> list[int]:
    # ``verbose=False`` silences the "longer than the model's maximum" warning:
    # the text is cut into windows afterwards.
    try:
        encoding = tokenizer(text, add_special_tokens=False, verbose=False)
    except TypeError as exc:
        if "verbose" not in str(exc):
            raise
        log.debug("tokenizer %s takes no verbose= (%s): encoding without it", type(tokenizer).__name__, exc)
        encoding = tokenizer(text, add_special_tokens=False)
    return [int(i) for i in encoding["input_ids"]]


def text_windows(
    tokenizer: Any,
    text: str,
    window: int,
    n: int | None = None,
    prepend_bos: bool = True,
    bos_id: int | None = None,
    *,
    frame: tuple[Sequence[int], Sequence[int]] | None = None,
) -> torch.Tensor:
    """Cut ``text`` into non-overlapping windows of exactly ``window`` tokens.

    The whole text is tokenized once (no special tokens) and split into
    consecutive chunks from the start; a trailing partial chunk is dropped.
    With ``prepend_bos`` each window is BOS followed by ``window - 1`` text
    tokens (the BOS counts toward ``window``); ``bos_id`` defaults to the
    tokenizer's ``bos_token_id``.  ``n=None`` returns every full window,
    otherwise the first ``n``.  Returns a ``LongTensor [n, window]``.

    ``frame`` = ``(prefix ids, suffix ids)`` (:meth:`headlens.probes.loading.LoadedModel.frame`:
    ``([BOS], [])`` on decoders, ``([CLS], [SEP])`` on encoders) replaces ``prepend_bos`` and
    ``bos_id``: each window is the prefix, ``window - len(prefix) - len(suffix)`` text tokens
    and the suffix (``window`` tokens in all).  ``frame=([bos], [])`` gives exactly the
    windows of ``prepend_bos=True, bos_id=bos``.

    Raises :class:`StimulusError` when the text is too short for one window,
    or for ``n`` windows.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise StimulusError(f"window must be a positive integer, got {window!r}")
    if frame is not None:
        prefix, suffix = [int(t) for t in frame[0]], [int(t) for t in frame[1]]
        if window < len(prefix) + len(suffix) + 1:
            raise StimulusError(
                f"window must be at least {len(prefix) + len(suffix) + 1} to hold {len(prefix) + len(suffix)} special tokens and some text"
            )
    elif prepend_bos and window < 2:
        raise StimulusError("window must be at least 2 when a BOS token is prepended")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise StimulusError(f"n must be a positive integer or None, got {n!r}")
    if not isinstance(text, str):
        raise StimulusError(f"text must be a string, got {type(text).__name__}")
    if frame is None and prepend_bos:
        if bos_id is None:
            bos_id = getattr(tokenizer, "bos_token_id", None)
        if bos_id is None:
            raise StimulusError("prepend_bos=True but no bos_id was given and the tokenizer has none")
        if isinstance(bos_id, bool) or not isinstance(bos_id, int) or bos_id < 0:
            raise StimulusError(f"bos_id must be a non-negative integer, got {bos_id!r}")

    if frame is None:
        prefix, suffix = ([int(bos_id)] if prepend_bos and bos_id is not None else []), []
    ids = _encode(tokenizer, text)
    per_window = window - len(prefix) - len(suffix)
    bos_note = (
        " (BOS plus text tokens)" if (frame is None and prepend_bos) else (" (special tokens plus text tokens)" if prefix or suffix else "")
    )
    available = len(ids) // per_window
    if available == 0:
        raise StimulusError(f"evaluation text has {len(ids)} tokens; need at least {per_window} for one window of {window}{bos_note}")
    if n is None:
        n = available
    elif n > available:
        raise StimulusError(
            f"evaluation text has {len(ids)} tokens, enough for {available} window(s) of "
            f"{window}{bos_note}; {n} were requested (need {n * per_window} tokens)"
        )
    body = torch.tensor(ids[: n * per_window], dtype=torch.long).view(n, per_window)
    parts = [torch.tensor(prefix, dtype=torch.long).expand(n, -1), body, torch.tensor(suffix, dtype=torch.long).expand(n, -1)]
    return torch.cat(parts, dim=1) if (prefix or suffix) else body
