"""Output folders and files that appear atomically and never clobber by surprise."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from headlens.probes.errors import OutputError, OutputExistsError

__all__ = ["check_out_dir", "check_out_file", "atomic_write", "atomic_dir", "make_dir", "normal_modes", "write_json", "write_text"]


def check_out_dir(path: str | Path, *, overwrite: bool) -> Path:
    """Refuse a non-empty folder (or a file in the way) unless ``overwrite``; create nothing yet."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputExistsError(f"output {path} exists and is not a folder", path=str(path))
    if p.is_dir() and any(p.iterdir()) and not overwrite:
        raise OutputExistsError(f"output folder {path} is not empty; pass overwrite=True to replace its files", path=str(path))
    return p


def check_out_file(path: str | Path, *, overwrite: bool) -> Path:
    p = Path(path)
    if p.is_dir():
        raise OutputExistsError(f"output {path} is a folder, expected a file", path=str(path))
    if p.exists() and not overwrite:
        raise OutputExistsError(f"output file {path} exists; pass overwrite=True to replace it", path=str(path))
    return p


def make_dir(path: str | Path) -> Path:
    """Make the folder ``path`` names (and its parents) if it is not there: through a symlink, the
    folder it points to (a dangling one's is made; ``Path.mkdir`` refuses the link itself).  A
    one-line :class:`OutputError` when it cannot be made."""
    real = Path(os.path.realpath(path))
    try:
        real.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    return Path(path)


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp_path)`` then rename the temporary file onto ``path``.

    A crash leaves either the old file or the new one, never half of one.  The file gets the
    mode of any new file (:func:`normal_modes`), whatever ``write`` did: safetensors writes
    through its own owner-only (``0o600``) temporary file renamed onto the path it is given.
    """
    p = Path(path)
    make_dir(p.parent)
    try:
        tmp = p.parent / f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        normal_modes(tmp_path)
        os.replace(tmp_path, p)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return p


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a new temporary folder to fill; when the block ends normally its files replace
    ``path``'s (a folder already there is emptied first), on any exception it is removed.

    A crash leaves either the old folder or the complete new one, never half of one.  ``path``
    may be a symlink (to a folder, or dangling: the folder it names is made) or a mount point (a
    container volume): the folder it names is written, the link or the mount stays; a mount
    point cannot be renamed onto, so the temporary folder is made inside it and each file is
    moved into place whole.  If that last move fails, the complete result stays in the
    temporary folder and the error says where: nothing computed is lost.  The folder and
    everything written in it get the modes of any new folder and file (:func:`normal_modes`),
    not ``mkdtemp``'s ``0o700`` or safetensors' ``0o600``.
    """
    real = Path(os.path.realpath(path))  # a symlink's target, made when dangling; the link stays
    inside = real.is_dir() and os.path.ismount(real)
    home = real if inside else real.parent
    tmp = home / f".{real.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        home.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from exc
    try:
        yield tmp
        normal_modes(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _move_into(tmp, real, inside=inside)
    except OSError as exc:
        raise OutputError(
            f"cannot move the finished result into {path}: {exc.strerror or exc}; it is complete in {tmp}", path=str(path)
        ) from exc


def _move_into(tmp: Path, real: Path, *, inside: bool) -> None:
    """``tmp``'s files in place of ``real``'s: the folder renamed onto ``real`` where it can be (new
    or emptied first), else (a mount point, or a folder that cannot be replaced) each entry renamed
    into ``real`` and ``real``'s other entries removed."""
    if not inside:
        if real.is_dir() and any(real.iterdir()):
            shutil.rmtree(real)
        try:
            os.replace(tmp, real)  # onto an empty folder too (POSIX rename)
            return
        except OSError:
            if not real.is_dir():
                raise
    written = {q.name for q in tmp.iterdir()}
    for q in real.iterdir():
        if q != tmp and q.name not in written:
            shutil.rmtree(q) if q.is_dir() and not q.is_symlink() else q.unlink()
    for q in tmp.iterdir():
        dest = real / q.name
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(q, dest)
    tmp.rmdir()


def _umask() -> int:
    """The process's umask, read without changing it (Linux's ``/proc``; elsewhere set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def normal_modes(path: str | Path) -> Path:
    """Give ``path`` (a file, or a folder and everything under it) the mode of a new file
    (``0o666`` less the umask; execute bits kept where the umask allows) or folder (``0o777``
    less the umask): every output, however it was written, is readable as every other is.

    The one place output modes are set: some writers make owner-only files (safetensors'
    ``save_file`` and so ``save_pretrained``: ``0o600``; ``mkdtemp``: ``0o700``).
    """
    mask = _umask()
    file_mode, dir_mode = 0o666 & ~mask, 0o777 & ~mask
    root = Path(path)
    paths = [root, *root.rglob("*")] if root.is_dir() and not root.is_symlink() else [root]
    for q in paths:
        st = os.lstat(q)
        if stat.S_ISDIR(st.st_mode):
            mode = dir_mode | (stat.S_IMODE(st.st_mode) & stat.S_ISGID)  # a shared folder's group inheritance stays
        elif stat.S_ISREG(st.st_mode):
            mode = file_mode | (stat.S_IMODE(st.st_mode) & 0o111 & dir_mode)
        else:
            continue  # links and special files keep theirs
        if stat.S_IMODE(st.st_mode) != mode:
            os.chmod(q, mode)
    return root


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda t: t.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")
