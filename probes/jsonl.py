"""The one reader of the JSONL files users hand headlens (prompts, tasks, referent items, training logs)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from headlens.probes.errors import InputError

__all__ = ["read_text", "read_jsonl"]

log = logging.getLogger(__name__)


def _colon(path: str | Path, lineno: int) -> str:
    return f"{path}:{lineno}"


def read_text(path: str | Path, *, what: str, error: type[InputError] = InputError) -> str:
    """The UTF-8 text of the ``what`` file (e.g. ``"prompt file"``); a missing file, a folder or
    unreadable bytes raise ``error`` with one line naming the file."""
    p = Path(path)
    if not p.exists():
        raise error(f"{what} {path} does not exist", path=str(path))
    if p.is_dir():
        raise error(f"{what} {path} is a folder", path=str(path))
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc.__class__.__name__}: {exc}".splitlines()[0], path=str(path)) from exc


def read_jsonl(
    path: str | Path,
    *,
    what: str,
    error: type[InputError] = InputError,
    where: Callable[[str | Path, int], str] = _colon,
    text: str | None = None,
) -> Iterator[tuple[int, Any]]:
    """Yield ``(lineno, object)`` for every non-blank line of the JSONL ``what`` file.

    A line that is not JSON raises ``error`` with one line: ``where(path, lineno)`` (by default
    ``path:lineno``), ``not valid JSON`` and the parser's reason.  ``text`` skips reading the
    file (already read by the caller).
    """
    raw = read_text(path, what=what, error=error) if text is None else text
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where(path, lineno)}: not valid JSON ({exc.msg})", path=str(path), line=lineno) from exc
        yield lineno, obj
