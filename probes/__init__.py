"""probes: load models, attach hooks, capture per-head activations.

The public names below are imported lazily on first use, so ``import probes`` is cheap.
"""

from __future__ import annotations

from probes._lazy import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
