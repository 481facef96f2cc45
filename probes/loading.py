"""Load a model (Hugging Face id, local checkpoint folder or GGUF file) as a TransformerBridge.

Every load says which weights did not come from the checkpoint.  Transformers fills a
tensor the checkpoint lacks with a fresh random initialisation and carries on; headlens
reads transformers' own loading report (the ``LoadStateDictInfo`` it builds while
loading: missing, unexpected and mismatched tensor names, after tied weights, renamed
legacy keys and the base-model prefix are accounted for) and then

* refuses the load (:class:`ModelLoadError`, exit 3) when a weight of the network body
  (embeddings, attention, MLP, norms: everything under the base model) is new, unless
  ``ModelConfig(allow_new_weights=True)`` / ``--allow-new-weights``;
* allows, with a warning, an output head that is new (an LM or MLM head missing from a
  checkpoint saved from the base model, e.g. all-MiniLM-L6-v2 booted as
  ``BertForMaskedLM``): its logits are random, the attention heads are not;
* records both on :class:`LoadedModel` and in :meth:`LoadedModel.describe` (the manifest).

Weight files are checked before the boot (:mod:`headlens.probes.sources`: safetensors
headers, shard indexes, zip directories of ``pytorch_model.bin``), so a truncated or corrupt
file is a one-line :class:`ModelLoadError` naming it; the boot itself, with the libraries'
log records and loading report kept, is :mod:`headlens.probes.boot`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from headlens.probes.attention_rules import family_rules
from headlens.probes.boot import boot
from headlens.probes.config import ModelConfig
from headlens.probes.devices import resolve_device, resolve_dtype
from headlens.probes.errors import DeviceError, InputError, ModelLoadError, UnsupportedModelError
from headlens.probes.gguf import GgufFacts, gguf_checkpoint
from headlens.probes.head_lists import as_heads
from headlens.probes.placement import (
    Placement,
    check_module_names,
    compute_device,
    input_device,
    placement_in_force,
    placement_of,
    realized,
)
from headlens.probes.sources import check_weight_files, checkpoint_fingerprint, first_line, hub_snapshot, resolve_source
from headlens.probes.weight_report import mismatch_message, report_weights, weight_check

__all__ = ["LoadedModel", "load_model", "resolve_source", "check_layers_heads", "weights_fingerprint", "checkpoint_fingerprint"]

log = logging.getLogger(__name__)


@dataclass(repr=False)
class LoadedModel:
    """A booted TransformerBridge plus what a manifest needs to know about it."""

    bridge: Any
    tokenizer: Any
    config: ModelConfig
    source: str  # "local", "gguf" or "hub"
    path: str  # resolved folder for local models, the GGUF file for gguf ones, the id for hub models
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    n_heads: int
    d_head: int
    n_ctx: int
    bos_id: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Parameters and buffers (Hugging Face names) that are not in the checkpoint and were
    #: randomly initialised; tied weights whose source was loaded are not in it.
    new_weights: list[str] = field(default_factory=list)
    #: Checkpoint tensors the model did not use (e.g. BERT's pooler under BertForMaskedLM).
    unexpected_weights: list[str] = field(default_factory=list)
    #: Some weight of the output head (LM/MLM head, outside the base model) is new.
    head_is_new: bool = False
    #: False when transformers' loading report could not be read (then nothing above is known).
    weights_checked: bool = True
    #: Placement over several devices or offload (``device_map``/``max_memory``), None on one device.
    placement: Placement | None = None
    #: Where accelerate put each module (``hf_device_map``) when ``placement`` is set.
    device_map: dict[str, str] | None = None
    #: The GGUF file the weights were dequantized from (:mod:`headlens.probes.gguf`), None otherwise.
    gguf: GgufFacts | None = None
    #: :func:`weights_fingerprint`, computed once per load.
    _fingerprint: str | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.config.model

    def __repr__(self) -> str:
        """One short line (a notebook shows it; the bridge and tokenizer are not dumped)."""
        family = getattr(getattr(getattr(self.bridge, "original_model", None), "config", None), "model_type", None)
        d_model = getattr(getattr(self.bridge, "cfg", None), "d_model", None)
        dtype = str(self.dtype).removeprefix("torch.")
        return (
            f"<LoadedModel {self.name!r} ({family or 'unknown family'}): {self.n_layers} layers x {self.n_heads} heads,"
            f" d_model {d_model}, {self.device}, {dtype}>"
        )

    @property
    def n_kv_heads(self) -> int:
        """Key-value heads per layer: fewer than ``n_heads`` under grouped-query (or multi-query) attention.

        The one place this is read: the bridge's ``n_key_value_heads``, ``n_heads`` when it has none."""
        return int(getattr(self.bridge.cfg, "n_key_value_heads", None) or self.n_heads)

    @property
    def kv_group(self) -> int:
        """Query heads per key-value head (query head ``h`` reads key-value head ``h // kv_group``)."""
        return self.n_heads // self.n_kv_heads

    @property
    def is_encoder(self) -> bool:
        """True for bidirectional encoders (BERT family): every query sees every real key."""
        return is_encoder_config(getattr(self.bridge.original_model, "config", None))

    def frame(self, prepend_bos: bool) -> tuple[list[int], list[int]]:
        """Special token ids that wrap every prompt: ``(prefix, suffix)``.

        Decoders: ``[BOS]`` before the text when ``prepend_bos`` (TransformerLens' default),
        nothing after.  Encoders: the tokenizer's own ``[CLS] ... [SEP]`` when ``prepend_bos``
        (the CLI's ``--no-bos`` turns them off too).  Raises when the tokenizer lacks them.
        """
        if not prepend_bos:
            return [], []
        tok = self.tokenizer
        if self.is_encoder:
            cls_id, sep_id = getattr(tok, "cls_token_id", None), getattr(tok, "sep_token_id", None)
            if cls_id is None or sep_id is None:
                raise InputError("this encoder's tokenizer has no [CLS]/[SEP] tokens; run with prepend_bos=False")
            return [int(cls_id)], [int(sep_id)]
        if self.bos_id is None:
            raise InputError("this tokenizer has no BOS token; run with prepend_bos=False")
        return [int(self.bos_id)], []

    def framing(self, prepend_bos: bool) -> dict[str, Any]:
        """Manifest entry: the special tokens that wrap each prompt, by string and id."""
        prefix, suffix = self.frame(prepend_bos)
        conv = self.tokenizer.convert_ids_to_tokens
        return {"prefix": [conv(i) for i in prefix], "suffix": [conv(i) for i in suffix], "prefix_ids": prefix, "suffix_ids": suffix}

    def describe(self) -> dict[str, Any]:
        """Model facts for the manifest."""
        tok = self.tokenizer
        return {
            "model": self.config.model,
            "source": self.source,
            "path": self.path,
            "revision": self.config.revision,
            "commit": getattr(getattr(self.bridge.original_model, "config", None), "_commit_hash", None),
            "weights_sha256": _local_sha(self),
            "architecture": type(self.bridge.original_model).__name__,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "d_head": self.d_head,
            "n_ctx": self.n_ctx,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "placement": None if self.placement is None else {**self.placement.describe(), "realized": self.device_map},
            "gguf": None if self.gguf is None else self.gguf.describe(),
            "weights_checked": self.weights_checked,
            "new_weights": list(self.new_weights),
            "head_is_new": self.head_is_new,
            "unexpected_weights": list(self.unexpected_weights),
            "allow_new_weights": self.config.allow_new_weights,
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


#: Hugging Face ``model_type``s of bidirectional encoders headlens knows.
ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "electra", "albert", "xlm-roberta", "camembert", "mpnet"})


def is_encoder_config(hf_config: Any) -> bool:
    """True when a Hugging Face config describes a bidirectional encoder (not a decoder)."""
    if hf_config is None or getattr(hf_config, "is_decoder", False):
        return False
    return str(getattr(hf_config, "model_type", "")) in ENCODER_TYPES


def _local_sha(model: LoadedModel) -> str | None:
    """The manifest's ``weights_sha256``: the fingerprint of a local checkpoint with weight files, the GGUF
    file's sha256 for a model converted from one, else None."""
    if model.gguf is not None:
        return model.gguf.sha256  # the GGUF file's bytes, which the converted checkpoint is a function of
    fp = weights_fingerprint(model) if model.source == "local" else None
    return None if fp == "none" else fp


def weights_fingerprint(model: LoadedModel) -> str:
    """:func:`checkpoint_fingerprint` of a loaded model, cached on it (computed once per load).

    The one fingerprint the manifests, the report's stage markers and the ablation and
    pruning journals use.
    """
    if model._fingerprint is None:
        commit = getattr(getattr(model.bridge.original_model, "config", None), "_commit_hash", None)
        model._fingerprint = checkpoint_fingerprint(model.source, model.path, revision=model.config.revision, commit=commit)
    return model._fingerprint


_CORRUPT_ERRORS = ("SafetensorError", "UnpicklingError", "BadZipFile", "EOFError")


def load_model(
    config: ModelConfig | None = None, /, *, named: Mapping[str, Callable[[], Path]] | None = None, **kwargs: Any
) -> LoadedModel:
    """Load ``config.model`` (Hub id, local folder or GGUF file) on the chosen device and dtype, in eval mode.

    Either pass a :class:`ModelConfig` or its fields as keywords:
    ``load_model(model="gpt2", device="auto", dtype="float32")``.  ``named`` resolves model
    names to local folders (:func:`headlens.probes.sources.resolve_source`; the CLI passes
    :func:`headlens.reports.api.named_models.named_models` for ``demo`` and ``minilm``).
    ``device_map``/``max_memory``/``offload_folder`` place a model larger than one device with
    accelerate (:mod:`headlens.probes.placement`); ``LoadedModel.device`` is then where inputs
    go (the embedding's device) and ``LoadedModel.device_map`` where each module went.

    A GGUF file (or a folder holding one) is dequantized and saved once into a cached checkpoint
    keyed by its sha256 (:mod:`headlens.probes.gguf`); ``LoadedModel.gguf`` and the manifest say so.

    Raises :class:`ModelLoadError` when the weights cannot be read, or when weights of the
    network body are not in the checkpoint (unless ``allow_new_weights``); a new output
    head is allowed with a warning.  See the module docstring.
    """
    if config is None:
        config = ModelConfig(**kwargs)
    elif not isinstance(config, ModelConfig):
        raise TypeError(f"load_model: config must be a ModelConfig, got {type(config).__name__} (pass the model as model={config!r})")
    elif kwargs:
        raise TypeError(f"load_model: pass either a ModelConfig or keyword arguments ({', '.join(sorted(kwargs))}), not both")
    config = placement_in_force(config)
    placement = placement_of(config.device_map, config.max_memory, config.offload_folder, device=config.device)
    device = resolve_device(config.device) if placement is None else compute_device(placement)
    dtype = resolve_dtype(config.dtype, device)
    source, path = resolve_source(config.model, named)
    folder, gguf = _checked_folder(source, path, config)
    if placement is not None:
        check_module_names(placement, folder, config.revision, config.model)
    bridge, reports = _boot(folder, device, dtype, config, placement, source)
    hf_model = bridge.original_model
    device_map = None if placement is None else realized(hf_model, placement)
    device = device if placement is None else input_device(bridge)
    check = weight_check(reports.for_model(hf_model) if reports.hooked else None)
    report_weights(check, config, type(hf_model).__name__)
    _check_analysable(bridge, config.model, dtype)
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
        new_weights=check.new,
        unexpected_weights=check.unexpected,
        head_is_new=bool(check.head_new),
        weights_checked=check.checked,
        placement=placement,
        device_map=device_map,
        gguf=gguf,
    )


def _checked_folder(source: str, path: str, config: ModelConfig) -> tuple[str, GgufFacts | None]:
    """What boots (the folder, the Hub id, or the checkpoint converted from a GGUF file, with that file's facts),
    its weight files checked first (a Hub model's where the local cache holds a snapshot)."""
    gguf: GgufFacts | None = None
    folder = path
    if source == "gguf":
        converted, gguf = gguf_checkpoint(Path(path), config.model)
        folder = str(converted)
    if source in ("local", "gguf"):
        check_weight_files(Path(folder), config.model, complete=True)
    else:
        snapshot = hub_snapshot(path, config.revision)
        if snapshot is not None:
            check_weight_files(snapshot, config.model, complete=False)
    return folder, gguf


def _boot(folder: str, device: torch.device, dtype: torch.dtype, config: ModelConfig, placement: Placement | None, source: str) -> Any:
    """:func:`~headlens.probes.boot.boot` with its failures as one-line errors: :class:`ModelLoadError` (weights
    not in the cache and the Hub unreachable, unreadable, mismatched or corrupt weights) or :class:`DeviceError`
    (a placement transformer-lens refuses)."""
    try:
        return boot(folder, device, dtype, config.revision, placement)
    except OSError as exc:
        if source == "hub":
            raise ModelLoadError(
                f"could not load {config.model!r}: its weights are not in the local Hugging Face cache and the Hub could not be reached"
                " (offline, or no such model); pass a local checkpoint folder instead: model=path/to/folder",
                model=config.model,
            ) from exc
        raise ModelLoadError(f"could not load {config.model!r}: {first_line(exc)}", model=config.model) from exc
    except (ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
        if placement is not None and "device_map" in str(exc):  # transformer-lens refuses this placement
            raise DeviceError(f"device_map={config.device_map!r}: {first_line(exc)}", model=config.model) from exc
        seen = getattr(exc, "headlens_load_reports", None)
        info = seen.reports[-1][1] if seen is not None and seen.reports else None  # mismatched shapes raise after the report
        message = mismatch_message(config.model, info) if info is not None else None
        raise ModelLoadError(message or f"could not load {config.model!r}: {first_line(exc)}", model=config.model) from exc
    except Exception as exc:
        if type(exc).__name__ not in _CORRUPT_ERRORS:
            raise
        raise ModelLoadError(
            f"could not load {config.model!r}: a weights file is corrupt or truncated ({first_line(exc)})", model=config.model
        ) from exc


def _check_analysable(bridge: Any, spec: str, dtype: torch.dtype) -> None:
    """Refuse, in one line, a model whose attention heads headlens cannot reach.

    Encoder-decoder models (T5, BART: two stacks and cross-attention) and models whose
    blocks have no attention component (state-space models such as Mamba) are named, as is a
    family whose forward fails in half precision (``FamilyRules.half``) loaded in it.
    """
    hf_model = bridge.original_model
    arch = type(hf_model).__name__
    hf_config = getattr(hf_model, "config", None)
    rules = family_rules(str(getattr(hf_config, "model_type", "")))
    if rules is not None and rules.half and dtype in (torch.float16, torch.bfloat16):
        raise UnsupportedModelError(
            f"model={spec!r}: dtype={str(dtype).removeprefix('torch.')}: {rules.half}; load it with dtype='float32'",
            model=spec,
            architecture=arch,
        )
    if getattr(hf_config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"model={spec!r}: {arch} is an encoder-decoder model; headlens analyses decoder-only and encoder-only models",
            model=spec,
            architecture=arch,
        )
    blocks = getattr(bridge, "_modules", {}).get("blocks")
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) == 0:
        raise UnsupportedModelError(
            f"model={spec!r}: {arch} has no stack of transformer blocks that headlens can hook", model=spec, architecture=arch
        )
    for i, block in enumerate(blocks):
        attn = getattr(block, "_modules", {}).get("attn")
        if attn is None or getattr(attn, "original_component", None) is None:
            raise UnsupportedModelError(
                f"model={spec!r}: block {i} of {arch} has no attention component (not a transformer attention layer); headlens cannot "
                "analyse it",
                model=spec,
                architecture=arch,
            )


def check_layers_heads(
    model: LoadedModel,
    layers: tuple[int, ...] | None,
    heads: Any,
) -> dict[int, list[int]]:
    """Validate layer and head indices; return ``{layer: [heads...]}`` in order.  ``heads``: any
    head list :func:`headlens.probes.head_lists.as_heads` takes (``"1.3,1.2"``, ``[(1, 3)]``, ...)."""
    heads = as_heads(heads, name="heads") if heads is not None else None
    n_l, n_h = model.n_layers, model.n_heads
    for layer in layers or ():
        if not 0 <= layer < n_l:
            raise InputError(f"layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
    for layer, head in heads or ():
        if not 0 <= layer < n_l:
            raise InputError(f"head {layer}.{head}: layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
        if not 0 <= head < n_h:
            raise InputError(
                f"head {layer}.{head}: head {head} is out of range: this model has heads 0..{n_h - 1} in each layer", head=head
            )
    if heads:
        chosen: dict[int, list[int]] = {}
        for layer, head in heads:
            if layers and layer not in layers:
                continue
            chosen.setdefault(layer, [])
            if head not in chosen[layer]:
                chosen[layer].append(head)
        if not chosen:
            raise InputError("heads= and layers= select no head together", heads=heads, layers=layers)
        return {layer: sorted(hs) for layer, hs in sorted(chosen.items())}
    return {layer: list(range(n_h)) for layer in (sorted(set(layers)) if layers else range(n_l))}
