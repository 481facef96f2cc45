"""Where headlens keeps files it makes or fetches for reuse: one folder, one rule.

``$HEADLENS_CACHE`` when set, else ``$XDG_CACHE_HOME/headlens``, else ``~/.cache/headlens``.
Inside it, each kind of file has its own sub-folder (:data:`GGUF_DIR`: checkpoints converted from
GGUF files, keyed by the file's sha256; :data:`FETCHED_DIR`: model files fetched from the package
index by name).  Nothing is ever installed into the Python environment.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "CACHE_ENV", "GGUF_DIR", "FETCHED_DIR"]

#: The environment variable that moves the cache.
CACHE_ENV = "HEADLENS_CACHE"
#: Checkpoint folders converted from GGUF files, one per file sha256.
GGUF_DIR = "gguf"
#: Files fetched from the package index for a named model, one folder per model.
FETCHED_DIR = "models"


def cache_root() -> Path:
    """The cache folder (not created here): ``$HEADLENS_CACHE``, ``$XDG_CACHE_HOME/headlens`` or ``~/.cache/headlens``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "headlens"
