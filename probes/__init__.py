"""probes: load models, attach hooks, capture per-head activations.

The public names below are imported lazily on first use, so ``import probes`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ModelConfig": "probes.config",
    "CaptureConfig": "probes.config",
    "LoadedModel": "probes.loading",
    "load_model": "probes.loading",
    "Capture": "probes.capture",
    "capture": "probes.capture",
    "hook_name": "probes.capture",
    "attached": "probes.hooks",
    "TokenBatch": "probes.prompts",
    "read_prompts": "probes.prompts",
    "tokenize_prompts": "probes.prompts",
    "save_capture": "probes.capture_io",
    "build_manifest": "probes.manifest",
    "build_tiny_checkpoint": "probes.tiny",
    "TinySpec": "probes.tiny",
    "HeadlensError": "probes.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'probes' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
