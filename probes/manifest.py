"""The manifest written beside every output, so each number can be reproduced."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import platform
import sys
from importlib import metadata
from typing import Any

import torch

from headlens.probes.config import json_ready
from headlens.probes.errors import InputError

__all__ = ["package_versions", "build_manifest", "headlens_version"]

log = logging.getLogger(__name__)

_PACKAGES = ("headlens", "torch", "transformers", "transformer-lens", "pandas", "numpy", "seaborn", "safetensors", "click")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def headlens_version() -> str:
    return _version("headlens") or "0+unknown"


def package_versions() -> dict[str, str | None]:
    versions = {name: _version(name) for name in _PACKAGES}
    versions["python"] = platform.python_version()
    return versions


def _framing(model: Any, prepend_bos: bool) -> dict[str, Any] | None:
    """``model.framing(prepend_bos)``, or None where the model cannot say (no such tokens)."""
    framing = getattr(model, "framing", None)
    if not callable(framing):
        return None
    try:
        return json_ready(framing(bool(prepend_bos)))
    except InputError as exc:
        log.debug("no framing in the manifest: %s", exc)
        return None


def build_manifest(
    *,
    model: Any | None = None,
    command: list[str] | None = None,
    seed: int | None = None,
    prepend_bos: bool | None = None,
    configs: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A JSON-ready manifest.

    ``model`` is a :class:`headlens.probes.loading.LoadedModel` (its ``describe()`` goes in),
    ``command`` the command line (defaults to ``sys.argv``), ``configs`` any config
    dataclasses or dicts worth recording, ``extra`` analysis-specific facts.  With both
    ``model`` and ``prepend_bos``, ``framing`` records the special tokens that wrapped each
    prompt (:meth:`~headlens.probes.loading.LoadedModel.framing`: ``[BOS]`` on decoders,
    ``[CLS]``/``[SEP]`` on encoders, none with ``prepend_bos=False``).
    """
    manifest: dict[str, Any] = {
        "headlens_version": headlens_version(),
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": list(command) if command is not None else list(sys.argv),
        "model": model.describe() if model is not None else None,
        "prepend_bos": prepend_bos,
        "seed": seed,
        "versions": package_versions(),
        "platform": {
            "system": platform.platform(),
            "cuda": torch.version.cuda,
            "torch_threads": torch.get_num_threads(),
        },
    }
    if model is not None:
        manifest["dtype"] = manifest["model"]["dtype"]
        manifest["device"] = manifest["model"]["device"]
        manifest["placement"] = manifest["model"].get("placement")  # device_map/max_memory and where accelerate put each module
        if prepend_bos is not None:
            manifest["framing"] = _framing(model, prepend_bos)
    for key, value in (configs or {}).items():
        if hasattr(value, "__dataclass_fields__"):
            value = dataclasses.asdict(value)
        manifest.setdefault("config", {})[key] = json_ready(value)
    if extra:
        manifest.update(json_ready(extra))
    return manifest
