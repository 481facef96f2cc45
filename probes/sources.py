"""Where a model's weights come from, checked before anything boots.

* :func:`resolve_source`: a ``--model`` value -> ``("local", folder)``, ``("gguf", file)`` or ``("hub", id)``;
  named models (``demo``, ``minilm``) are resolved by the caller's ``named`` mapping (the
  CLI passes :func:`headlens.reports.api.named_models.named_models`), so this layer knows no model by name.
* the weight files' headers (safetensors, shard indexes, zip directories): a truncated or
  corrupt file is a one-line :class:`ModelLoadError` naming it;
* :func:`checkpoint_fingerprint`: the one full-file fingerprint of a checkpoint's weights.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import threading
import zipfile
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from safetensors import safe_open

from headlens.probes.cache import GGUF_DIR, cache_root
from headlens.probes.errors import ModelLoadError

__all__ = [
    "resolve_source",
    "find_gguf",
    "GGUF_SUFFIX",
    "file_sha256",
    "close_names",
    "checkpoint_fingerprint",
    "check_weight_files",
    "hub_snapshot",
    "first_line",
    "WEIGHT_SUFFIXES",
]

log = logging.getLogger(__name__)

_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt")

#: A GGUF file (llama.cpp's quantized format; headlens.probes.gguf converts it).
GGUF_SUFFIX = ".gguf"
#: Files whose bytes are the weights of a local checkpoint.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_DIGESTS: dict[tuple[Any, ...], str] = {}  # (named, (path, size, mtime) of every file) -> digest: one hash per process
_DIGESTS_LOCK = threading.Lock()


def _local_digest(folder: Path) -> str | None:
    """sha256 over every byte of a local checkpoint's weight files, in name order (``name NUL bytes`` each)."""
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    return _digest(files, named=True) if files else None


def _digest(files: list[Path], *, named: bool) -> str:
    """sha256 over ``files``' bytes (each preceded by ``name NUL`` when ``named``), computed once per process
    while every file's size and mtime are unchanged: the one hashing loop and cache of this module."""
    stamp = (named, *((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    with _DIGESTS_LOCK:
        if stamp in _DIGESTS:
            return _DIGESTS[stamp]
    h = hashlib.sha256()
    for f in files:
        if named:
            h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    with _DIGESTS_LOCK:
        _DIGESTS[stamp] = digest
    return digest


def find_gguf(path: Path) -> Path | None:
    """The GGUF file ``path`` names: itself (``*.gguf``), or the one ``*.gguf`` of a folder with no config.json.

    None when ``path`` is neither; a folder with several GGUF files and no config.json is refused
    (which one is meant?).
    """
    if path.is_file():
        return path if path.suffix.lower() == GGUF_SUFFIX else None
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(p for p in path.iterdir() if p.suffix.lower() == GGUF_SUFFIX and p.is_file())
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ModelLoadError(f"model={str(path)!r}: folder holds {len(found)} GGUF files ({names}); pass one file", model=str(path))
    return found[0] if found else None


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, computed once per process while its size and mtime are unchanged."""
    return _digest([path], named=False)


#: headlens' own conversion steps (dropping the quantizer, the tokenizer's BOS rule, the facts file): a change
#: to them is a new number, so a checkpoint converted by the old steps is not reused.
CONVERT_VERSION = 1


def conversion_key() -> str:
    """What besides the file's bytes the converted checkpoint depends on: transformers' and gguf's versions
    (they dequantize and convert the tokenizer) and :data:`CONVERT_VERSION`; 12 hex digits."""

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "none"

    parts = {"transformers": installed("transformers"), "gguf": installed("gguf"), "headlens": CONVERT_VERSION}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def converted_folder(sha256: str) -> Path:
    """Where the checkpoint converted from a GGUF file of this sha256 lives (or will): the one rule for the cache's layout."""
    return cache_root() / GGUF_DIR / f"{sha256}-{conversion_key()}"


def _hub_fingerprint(repo: str, revision: str | None, commit: str | None) -> str:
    """``hub:<commit>:<digest of the snapshot's file names and sizes>`` from the local Hub cache."""
    files: list[tuple[str, int]] = []
    try:
        from huggingface_hub import snapshot_download

        snap = Path(snapshot_download(repo, revision=revision, local_files_only=True))
        commit = commit or snap.name
        files = sorted((str(p.relative_to(snap)), p.stat().st_size) for p in snap.rglob("*") if p.is_file())
    except Exception as exc:  # noqa: BLE001 - not cached (or no huggingface_hub): the commit alone names the weights
        log.info("%s: no cached snapshot to fingerprint (%s); using the commit only", repo, exc)
    listing = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]
    return f"hub:{repo}@{commit or revision or 'main'}:{listing}"


def checkpoint_fingerprint(source: str, path: str, *, revision: str | None = None, commit: str | None = None) -> str:
    """What names a checkpoint's weights, without loading it.

    Local folders: the full-file sha256 of the weight files (``.safetensors``, ``.bin``,
    ``.pt``, ``.pth``, name order), so any changed byte, a middle tensor of a fine-tune
    included, changes it; a folder with no weight file gives ``"none"``.  Hub models: the
    commit hash plus a digest of the cached snapshot's file names and sizes.  Computed once
    per process per file set (size and mtime unchanged).  A GGUF file: ``gguf:<its sha256>:<conversion key>``
    (the checkpoint converted from it is a function of its bytes and of :func:`conversion_key`).
    """
    if source == "local":
        return _local_digest(Path(path)) or "none"
    if source == "gguf":
        return f"gguf:{file_sha256(Path(path))}:{conversion_key()}"
    return _hub_fingerprint(path, revision, commit)


def _hub_like(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) <= 2 and all(parts) and not spec.startswith((".", "/", "~"))


def close_names(spec: str, named: Mapping[str, object] | None) -> list[str]:
    """The named models ``spec`` is probably a typo of (``dmeo`` -> ``["demo"]``), closest first.

    None when ``spec`` is a name, an existing path, a Hub id with an owner (``org/name``), or a
    model already in the local Hugging Face cache: only a bare word that nothing else can load
    and that is close to a name (:func:`difflib.get_close_matches`) is taken for a typo.
    """
    if not named or spec in named or "/" in spec or Path(spec).expanduser().exists():
        return []
    near = difflib.get_close_matches(spec.lower(), list(named), n=len(named), cutoff=_CLOSE)
    if not near or hub_snapshot(spec, None) is not None:
        return []
    return near


#: :func:`difflib.get_close_matches` cutoff: ``dmeo``/``demo`` 0.75, ``minlm``/``minilm`` 0.91, ``gpt2``/``demo`` 0.
_CLOSE = 0.6


def resolve_source(spec: str, named: Mapping[str, Callable[[], Path]] | None = None) -> tuple[str, str]:
    """Return ``("local", folder)``, ``("gguf", file)`` or ``("hub", id)``, raising on missing folders.

    A GGUF file, or a folder holding one and no config.json (:func:`find_gguf`), gives ``("gguf", file)``:
    :func:`headlens.probes.gguf.gguf_checkpoint` turns it into a checkpoint folder.

    ``named`` maps a model name (``demo``, ``minilm``) to a function giving its local
    checkpoint folder; a folder of that name in the current directory wins.  The function
    may raise :class:`ModelLoadError` (e.g. its package is not installed).  A bare word close to
    a name that is neither a folder nor a cached Hub model (:func:`close_names`) is refused
    with the names it is close to, before any download is tried.
    """
    near = close_names(spec, named)
    if near:
        raise ModelLoadError(
            f"model={spec!r} is not a folder, a named model or a cached Hugging Face model; did you mean {' or '.join(map(repr, near))}?"
            f" (named models: {', '.join(named or ())})",
            model=spec,
            suggestions=near,
        )
    path = Path(spec).expanduser()
    if not path.exists() and named and spec in named:
        path = named[spec]()
        log.debug("model=%r names the local checkpoint %s", spec, path)
    if path.exists():
        gguf_file = find_gguf(path)
        if gguf_file is not None:
            return "gguf", str(gguf_file.resolve())
        if not path.is_dir():
            raise ModelLoadError(
                f"model={spec!r}: is a file; pass a checkpoint folder (Hugging Face save_pretrained layout), a GGUF file or a Hub id",
                model=spec,
            )
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"model={spec!r}: folder has no config.json; it is not a Hugging Face checkpoint folder", model=spec)
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            raise ModelLoadError(
                f"model={spec!r}: folder has no tokenizer (tokenizer.json or vocab.json + merges.txt); save the tokenizer into it with "
                "tokenizer.save_pretrained(folder)",
                model=spec,
            )
        return "local", str(path.resolve())
    if not _hub_like(spec):
        raise ModelLoadError(f"model={spec!r}: no such folder, and not a Hugging Face id", model=spec)
    return "hub", spec


# ---------------------------------------------------------------------------
# Weight files: checked before the boot, so a corrupt file is one line naming it.


def check_weight_files(folder: Path, spec: str, *, complete: bool) -> None:
    """Raise :class:`ModelLoadError` naming the first weights file that cannot be read.

    Reads only headers: each ``*.safetensors`` header (safetensors itself refuses a file
    its header does not cover exactly, so a truncated file fails here), the shard index
    (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``) and the zip
    directory at the end of a ``pytorch_model.bin``.  ``complete=False`` (a Hub cache)
    skips files that are not there: transformers would download them.
    """
    for stem in ("model.safetensors", "pytorch_model.bin"):
        files: list[Path] = []
        single = folder / stem
        if single.is_file():
            files.append(single)
        index = folder / f"{stem}.index.json"
        if not files and index.is_file():  # transformers takes the single file when both are there
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
                if not all(isinstance(name, str) for name in shards):
                    raise ValueError("weight_map values must be file names")
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelLoadError(
                    f"model={spec!r}: shard index {index} is corrupt ({first_line(exc)})", model=spec, path=str(index)
                ) from exc
            for shard in shards:
                path = folder / shard
                if path.is_file():
                    files.append(path)
                elif complete:
                    raise ModelLoadError(
                        f"model={spec!r}: weights file {path} is missing (listed in {index.name})", model=spec, path=str(path)
                    )
        if not files:
            continue
        for path in files:
            _check_one_file(path, spec)
        return  # transformers reads safetensors when there are any, else pytorch_model.bin


def _check_one_file(path: Path, spec: str) -> None:
    why: str | None = None
    if path.suffix == ".safetensors":
        try:
            with safe_open(str(path), framework="pt") as fh:
                fh.keys()
        except Exception as exc:  # noqa: BLE001 - SafetensorError derives from Exception only
            why = first_line(exc)
    else:
        try:
            with open(path, "rb") as fh:
                magic = fh.read(1)
            if magic != b"\x80":  # b"\x80" starts a legacy (pre-zip) torch pickle: nothing cheap to check
                with zipfile.ZipFile(path) as zf:
                    zf.namelist()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            why = first_line(exc)
    if why is not None:
        raise ModelLoadError(
            f"model={spec!r}: weights file {path} is corrupt or truncated ({why}); save or download it again", model=spec, path=str(path)
        )


def hub_snapshot(name: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a Hub model already in the cache, else None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception as exc:  # noqa: BLE001 - a cache we cannot read is left to transformers
        log.debug("cannot look up %s in the Hugging Face cache (%s); leaving it to transformers", name, exc)
        return None
    return Path(found).parent if isinstance(found, str) else None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
