"""Load a model (Hugging Face id or local checkpoint folder) as a TransformerBridge."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from probes.config import ModelConfig
from probes.devices import resolve_device, resolve_dtype
from probes.errors import InputError, ModelLoadError

__all__ = ["LoadedModel", "load_model", "resolve_source", "check_layers_heads"]

_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt")


@dataclass
class LoadedModel:
    """A booted TransformerBridge plus what a manifest needs to know about it."""

    bridge: Any
    tokenizer: Any
    config: ModelConfig
    source: str  # "local" or "hub"
    path: str  # resolved folder for local models, the id for hub models
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    n_heads: int
    d_head: int
    n_ctx: int
    bos_id: int | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.config.model

    def describe(self) -> dict[str, Any]:
        """Model facts for the manifest."""
        tok = self.tokenizer
        return {
            "model": self.config.model,
            "source": self.source,
            "path": self.path,
            "revision": self.config.revision,
            "commit": getattr(getattr(self.bridge.original_model, "config", None), "_commit_hash", None),
            "weights_sha256": _weights_digest(self.path) if self.source == "local" else None,
            "architecture": type(self.bridge.original_model).__name__,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "d_head": self.d_head,
            "n_ctx": self.n_ctx,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "tokenizer": {
                "class": type(tok).__name__,
                "name_or_path": getattr(tok, "name_or_path", None),
                "vocab_size": len(tok),
                "bos_token": getattr(tok, "bos_token", None),
                "bos_id": self.bos_id,
            },
        }

    def hook_names(self) -> set[str]:
        return set(self.bridge.hook_dict.keys())


def _weights_digest(folder: str | None) -> str | None:
    """sha256 over a local checkpoint's weight files (sorted by name): which weights a manifest's numbers came from."""
    if folder is None:
        return None
    files = sorted(p for p in Path(folder).iterdir() if p.suffix in {".safetensors", ".bin"} and p.is_file())
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _hub_like(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) <= 2 and all(parts) and not spec.startswith((".", "/", "~"))


def resolve_source(spec: str) -> tuple[str, str]:
    """Return ``("local", folder)`` or ``("hub", id)``, raising on missing folders.

    ``demo`` names the demo model shipped in ``probes/demo/model`` (unless a folder
    called ``demo`` exists here): a local checkpoint like any other.
    """
    path = Path(spec).expanduser()
    if not path.exists():
        from probes.demo import DEMO_SPEC, MODEL_DIR

        if spec == DEMO_SPEC:
            if not (MODEL_DIR / "config.json").is_file():
                raise ModelLoadError(f"--model demo: the shipped demo model is missing from {MODEL_DIR} (a broken install?)", model=spec)
            path = MODEL_DIR
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"--model {spec}: is a file; pass a checkpoint folder (Hugging Face save_pretrained layout) or a Hub id", model=spec)
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"--model {spec}: folder has no config.json; it is not a Hugging Face checkpoint folder", model=spec)
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            raise ModelLoadError(
                f"--model {spec}: folder has no tokenizer (tokenizer.json or vocab.json + merges.txt); save the tokenizer into it with tokenizer.save_pretrained(folder)",
                model=spec,
            )
        return "local", str(path.resolve())
    if not _hub_like(spec):
        raise ModelLoadError(f"--model {spec}: no such folder, and not a Hugging Face id", model=spec)
    return "hub", spec


def _boot(name: str, device: torch.device, dtype: torch.dtype, revision: str | None) -> Any:
    from transformer_lens.model_bridge import TransformerBridge

    # TransformerLens and transformers log loading chatter; keep library output quiet.
    for logger in ("transformers", "transformer_lens", "huggingface_hub"):
        logging.getLogger(logger).setLevel(logging.ERROR)
    sink = io.StringIO()
    with contextlib.redirect_stderr(sink):
        kwargs: dict[str, Any] = {"device": str(device), "dtype": dtype}
        if revision is not None:
            kwargs["revision"] = revision
        return TransformerBridge.boot_transformers(name, **kwargs)


def load_model(config: ModelConfig | None = None, /, **kwargs: Any) -> LoadedModel:
    """Load ``config.model`` (Hub id or local folder) on the chosen device and dtype, in eval mode.

    Either pass a :class:`ModelConfig` or its fields as keywords:
    ``load_model(model="gpt2", device="auto", dtype="float32")``.
    """
    if config is None:
        config = ModelConfig(**kwargs)
    elif kwargs:
        raise TypeError("pass either a ModelConfig or keyword arguments, not both")
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    source, path = resolve_source(config.model)
    try:
        bridge = _boot(path, device, dtype, config.revision)
    except OSError as exc:
        if source == "hub":
            raise ModelLoadError(
                f"could not load {config.model!r}: its weights are not in the local Hugging Face cache and the Hub could not be reached"
                " (offline, or no such model); pass a local checkpoint folder instead: --model path/to/folder",
                model=config.model,
            ) from exc
        raise ModelLoadError(f"could not load {config.model!r}: {_first_line(exc)}", model=config.model) from exc
    except (ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
        raise ModelLoadError(f"could not load {config.model!r}: {_first_line(exc)}", model=config.model) from exc
    bridge.eval()
    cfg = bridge.cfg
    tokenizer = bridge.tokenizer
    if tokenizer is None:
        raise ModelLoadError(f"could not load {config.model!r}: no tokenizer came with it", model=config.model)
    bos_id = tokenizer.bos_token_id
    return LoadedModel(
        bridge=bridge,
        tokenizer=tokenizer,
        config=config,
        source=source,
        path=path,
        device=device,
        dtype=dtype,
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        d_head=int(cfg.d_head),
        n_ctx=int(cfg.n_ctx),
        bos_id=None if bos_id is None else int(bos_id),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_layers_heads(
    model: LoadedModel,
    layers: tuple[int, ...] | None,
    heads: tuple[tuple[int, int], ...] | None,
) -> dict[int, list[int]]:
    """Validate layer and head indices; return ``{layer: [heads...]}`` in order."""
    n_l, n_h = model.n_layers, model.n_heads
    for layer in layers or ():
        if not 0 <= layer < n_l:
            raise InputError(f"layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
    for layer, head in heads or ():
        if not 0 <= layer < n_l:
            raise InputError(f"head {layer}.{head}: layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
        if not 0 <= head < n_h:
            raise InputError(f"head {layer}.{head}: head {head} is out of range: this model has heads 0..{n_h - 1} in each layer", head=head)
    if heads:
        chosen: dict[int, list[int]] = {}
        for layer, head in heads:
            if layers and layer not in layers:
                continue
            chosen.setdefault(layer, [])
            if head not in chosen[layer]:
                chosen[layer].append(head)
        if not chosen:
            raise InputError("--heads and --layers select no head together", heads=heads, layers=layers)
        return {layer: sorted(hs) for layer, hs in sorted(chosen.items())}
    return {layer: list(range(n_h)) for layer in (sorted(set(layers)) if layers else range(n_l))}
