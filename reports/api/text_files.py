"""Reading a user's ``--text-file`` (the evaluation text of ablation, pruning and the report)."""

from __future__ import annotations

import logging
from pathlib import Path

from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["read_text_file"]


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
