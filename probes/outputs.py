"""Output folders and files that appear atomically and never clobber by surprise."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from headlens.probes.errors import OutputError, OutputExistsError

__all__ = ["check_out_dir", "check_out_file", "atomic_write", "atomic_dir", "write_json", "write_text"]


def check_out_dir(path: str | Path, *, overwrite: bool) -> Path:
    """Refuse a non-empty folder (or a file in the way) unless ``overwrite``; create nothing yet."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputExistsError(f"output {path} exists and is not a folder", path=str(path))
    if p.is_dir() and any(p.iterdir()) and not overwrite:
        raise OutputExistsError(f"output folder {path} is not empty; pass --overwrite to replace its files", path=str(path))
    return p


def check_out_file(path: str | Path, *, overwrite: bool) -> Path:
    p = Path(path)
    if p.is_dir():
        raise OutputExistsError(f"output {path} is a folder, expected a file", path=str(path))
    if p.exists() and not overwrite:
        raise OutputExistsError(f"output file {path} exists; pass --overwrite to replace it", path=str(path))
    return p


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp_path)`` then rename the temporary file onto ``path``.

    A crash leaves either the old file or the new one, never half of one.  The temporary
    file is created with the mode of any new file (``0o666`` less the umask, as ``open``
    gives), not ``mkstemp``'s owner-only ``0o600``, so results on a shared file system stay
    readable by the group the umask allows.
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.parent / f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        os.replace(tmp_path, p)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return p


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a new temporary sibling folder of ``path`` to fill; when the block ends normally it
    replaces ``path`` (a folder already there is removed first), on any exception it is removed.

    A crash leaves either the old folder or the complete new one, never half of one.  The
    folder gets the mode of any new folder (``0o777`` less the umask), not ``mkdtemp``'s ``0o700``.
    """
    p = Path(path)
    tmp = p.parent / f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    try:
        yield tmp
        if p.exists():
            shutil.rmtree(p)
        os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda t: t.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
