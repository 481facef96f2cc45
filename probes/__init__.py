"""probes: load models, attach hooks, capture per-head activations.

The public names below are imported lazily on first use, so ``import probes`` is cheap.
"""

from __future__ import annotations

from headlens.probes._lazy import lazy_exports

_EXPORTS = {
    "ModelConfig": "headlens.probes.config",
    "CaptureConfig": "headlens.probes.config",
    "LoadedModel": "headlens.probes.loading",
    "load_model": "headlens.probes.loading",
    "Capture": "headlens.probes.capture",
    "capture": "headlens.probes.capture",
    "hook_name": "headlens.probes.capture",
    "attached": "headlens.probes.hooks",
    "TokenBatch": "headlens.probes.prompts",
    "read_prompts": "headlens.probes.prompts",
    "tokenize_prompts": "headlens.probes.prompts",
    "save_capture": "headlens.probes.capture_io",
    "build_manifest": "headlens.probes.manifest",
    "HeadlensError": "headlens.probes.errors",
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll] - the lazy-export table is the one list of names
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
