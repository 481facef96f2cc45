"""The evaluation text of ablation, pruning and the report's stages: a user's ``--text-file``, else the
one rule choosing it (:func:`headlens.analyses.measure.texts.choose_text`).  Apart from
:mod:`headlens.reports.api.text_files` (reading the file), which the light command modules import."""

from __future__ import annotations

from headlens.analyses.measure.texts import TextChoice, choose_text
from headlens.reports.api.text_files import read_text_file

__all__ = ["text_choice"]


def text_choice(model: object, text_file: str | None = None) -> TextChoice:
    """The evaluation text for ``model``: ``text_file``'s text when given, else the model's own held-out
    text when it carries one (the demo model), else the built-in text (the rule is
    :func:`~headlens.analyses.measure.texts.choose_text`; this reads the file first)."""
    text = None if text_file is None else read_text_file(text_file)
    return choose_text(model, text, text_file=text_file)
