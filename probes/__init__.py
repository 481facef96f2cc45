"""probes: load models, attach hooks, capture per-head activations.

The public names below are imported explicitly, so an IDE and a type checker see their real types.
The function :func:`headlens.probes.capture.capture` is not among them: ``headlens.probes.capture``
stays the module (a function of that name here would shadow it); the notebook verb is
:func:`headlens.capture`.
"""

from __future__ import annotations

from headlens.probes.capture import Capture, hook_name
from headlens.probes.capture_io import save_capture
from headlens.probes.config import CaptureConfig, ModelConfig
from headlens.probes.errors import HeadlensError
from headlens.probes.hooks import attached
from headlens.probes.loading import LoadedModel, load_model
from headlens.probes.manifest import build_manifest
from headlens.probes.prompts import TokenBatch, read_prompts, tokenize_prompts

__all__ = [
    "ModelConfig",
    "CaptureConfig",
    "LoadedModel",
    "load_model",
    "Capture",
    "hook_name",
    "attached",
    "TokenBatch",
    "read_prompts",
    "tokenize_prompts",
    "save_capture",
    "build_manifest",
    "HeadlensError",
]
