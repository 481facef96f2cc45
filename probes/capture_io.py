"""Writing a :class:`~headlens.probes.capture.Capture` to disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from headlens.probes.capture import Capture
from headlens.probes.outputs import atomic_write, write_json

__all__ = ["save_capture", "capture_entry", "tokens_entry", "load_activations", "saved_keys"]


def save_capture(capture: Capture, out_dir: str | Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Write ``activations.safetensors``, ``tokens.json`` and ``manifest.json`` atomically."""
    out = Path(out_dir)
    tensors = {name: t.contiguous() for name, t in capture.tensors.items()}
    tensors["lengths"] = capture.batch.lengths.contiguous()
    meta = {
        "heads": json.dumps({str(k): v for k, v in capture.heads.items()}),
        "kv_heads": json.dumps({str(k): v for k, v in capture.kv_heads.items()}),
        "prepend_bos": str(capture.batch.prepend_bos),
    }
    paths = {
        "activations": atomic_write(out / "activations.safetensors", lambda p: save_file(tensors, str(p), metadata=meta)),
        "tokens": write_json(out / "tokens.json", tokens_entry(capture)),
    }
    paths["manifest"] = write_json(out / "manifest.json", {**manifest, "capture": capture_entry(capture)})
    return paths


def tokens_entry(capture: Capture) -> dict[str, Any]:
    """``tokens.json``: ``prepend_bos`` and per prompt its token strings and ids (padding left out)."""
    batch = capture.batch
    prompts = [{"tokens": s, "ids": batch.tokens[i, : int(batch.lengths[i])].tolist()} for i, s in enumerate(batch.strings)]
    return {"prepend_bos": batch.prepend_bos, "prompts": prompts}


def capture_entry(capture: Capture) -> dict[str, Any]:
    """The manifest's ``capture`` entry: heads, KV heads, what, the saved keys and their shapes."""
    keys = {name: list(t.shape) for name, t in capture.tensors.items()}
    keys["lengths"] = list(capture.batch.lengths.shape)
    return {
        "heads": {str(k): v for k, v in capture.heads.items()},
        # k, v and rot_k columns: the KV heads read by the chosen query heads (or one per query head).
        "kv_heads": {str(k): v for k, v in capture.kv_heads.items()},
        **capture.info,
        "what": list(capture.what),
        "keys": keys,
        "n_prompts": len(capture.batch),
    }


def saved_keys(path: str | Path) -> list[str]:
    """The names of the tensors in a safetensors file (read from its header, no tensor loaded):
    what :func:`save_capture` wrote, the captured tensors plus ``lengths``."""
    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def load_activations(path: str | Path) -> dict[str, Any]:
    return load_file(str(path))
