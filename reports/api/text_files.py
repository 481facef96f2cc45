"""The evaluation text of ablation, pruning and the report: reading a user's ``--text-file``, and the
one rule choosing the text when none is given (:func:`headlens.analyses.ablation.texts.choose_text`)."""

from __future__ import annotations

import logging
from pathlib import Path

from headlens.analyses.ablation.texts import TextChoice, choose_text
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["read_text_file", "text_choice"]


def read_text_file(text_file: str) -> str:
    """The text of ``--text-file`` (UTF-8); a missing, unreadable or empty file is a one-line :class:`InputError`.

    Shared by ``ablate``, ``prune`` and ``report``.
    """
    p = Path(text_file)
    if not p.is_file():
        raise InputError(f"--text-file {text_file} does not exist", path=text_file)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read --text-file {text_file}: {exc}".splitlines()[0], path=text_file) from exc
    if not text.strip():
        raise InputError(f"--text-file {text_file} is empty", path=text_file)
    return text


def text_choice(model: object, text_file: str | None = None) -> TextChoice:
    """The evaluation text for ``model``: ``text_file``'s text when given, else the model's own held-out
    text when it carries one (the demo model), else the built-in text.
    The rule is :func:`headlens.analyses.ablation.texts.choose_text`; this reads the file first."""
    text = None if text_file is None else read_text_file(text_file)
    return choose_text(model, text, text_file=text_file)
