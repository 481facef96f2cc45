"""Writing a :class:`~headlens.probes.capture.Capture` to disk, and reading it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from headlens.probes.capture import Capture, hook_name, padded_width
from headlens.probes.errors import InputError
from headlens.probes.outputs import atomic_write, write_json
from headlens.probes.prompts import TokenBatch

__all__ = ["save_capture", "load_capture", "capture_entry", "tokens_entry", "load_activations", "saved_keys"]

#: The manifest's ``capture`` entry's keys that are not :attr:`Capture.info`'s (:func:`capture_entry`).
ENTRY_KEYS = ("heads", "kv_heads", "what", "keys", "n_prompts")
#: What ``tokens.json`` records of the batch besides its prompts (:func:`tokens_entry`).
BATCH_KEYS = ("prepend_bos", "pad_id", "n_prefix", "n_suffix")


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
    """``tokens.json``: ``prepend_bos``, the padding id, the framing's special tokens before and after each
    prompt (``n_prefix``, ``n_suffix``) and per prompt its token strings and ids (padding left out)."""
    batch = capture.batch
    prompts = [{"tokens": s, "ids": batch.tokens[i, : int(batch.lengths[i])].tolist()} for i, s in enumerate(batch.strings)]
    return {"prepend_bos": batch.prepend_bos, "pad_id": int(batch.pad_id), **batch.framing, "prompts": prompts}


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


def load_capture(folder: str | Path, entry: dict[str, Any]) -> Capture:
    """The :class:`Capture` :func:`save_capture` wrote in ``folder``, given the manifest's ``capture`` entry:
    the tensors in the entry's order, the batch from ``tokens.json`` (padded with its ``pad_id`` to the
    tensors' width), heads, KV heads, what and info from the entry.  A ``tokens.json`` written before it
    recorded the padding id and framing is refused in one line."""
    path = Path(folder) / "tokens.json"
    tokens = json.loads(path.read_text(encoding="utf-8"))
    missing = [k for k in BATCH_KEYS if k not in tokens]
    if missing:
        raise InputError(
            f"{path}: no {', '.join(missing)} (written by an older headlens): capture again to load it as a result; "
            "its tensors read with safetensors.torch.load_file",
            path=str(path),
        )
    saved = load_activations(Path(folder) / "activations.safetensors")
    what = tuple(entry["what"])
    tensors = {name: saved[name] for name in entry["keys"] if name != "lengths"}
    heads = {int(k): list(v) for k, v in entry["heads"].items()}
    width = padded_width(what[0], tensors[hook_name(next(iter(heads)), what[0])])
    prompts = tokens["prompts"]
    ids = torch.full((len(prompts), width), int(tokens["pad_id"]), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, : len(prompt["ids"])] = torch.tensor(prompt["ids"], dtype=torch.long)
    batch = TokenBatch(
        tokens=ids,
        lengths=saved["lengths"],
        strings=[list(p["tokens"]) for p in prompts],
        prepend_bos=bool(tokens["prepend_bos"]),
        pad_id=int(tokens["pad_id"]),
        n_prefix=int(tokens["n_prefix"]),
        n_suffix=int(tokens["n_suffix"]),
    )
    return Capture(
        tensors=tensors,
        batch=batch,
        heads=heads,
        what=what,
        info={k: v for k, v in entry.items() if k not in ENTRY_KEYS},
        kv_heads={int(k): list(v) for k, v in entry["kv_heads"].items()},
    )
