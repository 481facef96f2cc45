"""``headlens.capture``: per-head Q, K, V and attention patterns of a model on prompts.

The files are ``headlens capture``'s: ``activations.safetensors`` (TransformerLens hook names, plus
``lengths``), ``tokens.json`` and ``manifest.json``; with ``verify=True`` also ``verify.csv``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from headlens.analyses.heads.verify import verify_attention
from headlens.analyses.synthetic.planted import PLANTED_ROLES, build_planted_checkpoint
from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint
from headlens.probes.capture import Capture
from headlens.probes.capture import capture as run_capture
from headlens.probes.capture_io import capture_entry, load_capture, save_capture, tokens_entry
from headlens.probes.config import CaptureConfig, ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.probes.prompts import TokenBatch
from headlens.reports.api.common import config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_manifest
from headlens.reports.api.verify import check_prompts
from headlens.reports.render.finding_lines import Findings, capture_findings

log = logging.getLogger(__name__)

__all__ = ["capture", "CaptureResult", "tiny_checkpoint", "planted_checkpoint", "PLANTED_ROLES", "ACTIVATIONS_FILE", "TOKENS_FILE"]

ACTIVATIONS_FILE = "activations.safetensors"
TOKENS_FILE = "tokens.json"


@dataclass(kw_only=True, repr=False)
class CaptureResult(Result):
    """Captured tensors by hook name (``blocks.0.attn.hook_pattern``: ``[prompt, head, query, key]``;
    q, k, v, z: ``[prompt, pos, head, d_head]``), the prompts' tokens, and with ``verify`` the
    verify table."""

    kind = "capture"
    marker_files = (ACTIVATIONS_FILE, TOKENS_FILE)

    #: The :class:`~headlens.probes.capture.Capture` itself; read back from a folder it is rebuilt from
    #: ``activations.safetensors``, ``tokens.json`` and the manifest's ``capture`` entry (:meth:`from_folder`).
    capture: Capture

    def __getitem__(self, name: str) -> Any:
        """A table (``result["verify"]``) or a captured tensor by hook name (``result["blocks.0.attn.hook_pattern"]``)."""
        if name in self.tensors:
            return self.tensors[name]
        return super().__getitem__(name)

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.capture_findings`)."""
        return capture_findings(self.capture, self.verify)

    @property
    def tensors(self) -> dict[str, torch.Tensor]:
        """The captured tensors by hook name, and ``lengths`` (as ``activations.safetensors`` holds them)."""
        return {**self.capture.tensors, "lengths": self.capture.batch.lengths}

    @property
    def tokens(self) -> dict[str, Any]:
        """``tokens.json``: ``prepend_bos``, ``pad_id``, ``n_prefix``, ``n_suffix`` and per prompt its token strings and ids."""
        return tokens_entry(self.capture)

    @property
    def lengths(self) -> torch.Tensor:
        """Real tokens of each prompt (the rest is padding)."""
        return self.capture.batch.lengths

    @property
    def verify(self) -> pd.DataFrame | None:
        return self.tables.get("verify")

    def pattern(self, layer: int) -> torch.Tensor:
        """``[prompt, head, query, key]`` attention pattern of one layer (the captured heads)."""
        name = f"blocks.{layer}.attn.hook_pattern"
        if name not in self.capture.tensors:
            raise InputError(f"layer={layer}: no pattern captured there (captured: {', '.join(self.capture.tensors)})", layer=layer)
        return self.capture.tensors[name]

    def _shapes(self) -> str:
        tables = super()._shapes() if self.tables else ""
        return f"{len(self.capture.tensors)} tensors on {len(self.capture.batch)} prompt(s)" + (f", {tables}" if tables else "")

    def _write_extra(self, folder: Path) -> None:
        save_capture(self.capture, folder, self.manifest)

    @classmethod
    def from_folder(cls, folder: str | Path) -> CaptureResult:
        """The saved result, its capture rebuilt (:func:`~headlens.probes.capture_io.load_capture`)."""
        p = Path(folder)
        manifest = read_manifest(p)
        return cls(tables=cls.read_tables(p), manifest=manifest, capture=load_capture(p, manifest["capture"]))


@study("capture", CaptureConfig)
def capture(
    model: LoadedModel | str,
    config: CaptureConfig | None = None,
    /,
    *,
    prompts: str | Sequence[str] | TokenBatch,
    what: tuple[str, ...] = CaptureConfig.what,
    layers: tuple[int, ...] | None = CaptureConfig.layers,
    heads: tuple[tuple[int, int], ...] | None = CaptureConfig.heads,
    prepend_bos: bool = CaptureConfig.prepend_bos,
    batch_size: int = CaptureConfig.batch_size,
    truncate: bool = CaptureConfig.truncate,
    kv_per_query_head: bool = CaptureConfig.kv_per_query_head,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    seed: int = 0,
    verify: bool = False,
    tolerance: float | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> CaptureResult:
    """Capture ``what`` (hook names' short forms: q, k, v, rot_q, rot_k, pattern, attn_scores, z) of
    ``layers`` and ``heads`` (default all) on ``prompts`` (one text, several, or a tokenized
    ``TokenBatch``): a :class:`CaptureResult`.  The settings are
    :class:`~headlens.probes.config.CaptureConfig`'s fields (or ``config``, keywords overriding it);
    ``device=``, ``dtype=`` ... load a model given by name.  ``verify=True`` also checks the
    model's attention on the same prompts (``result.verify``; ``tolerance``).  ``seed`` seeds torch
    and is recorded in the manifest; ``progress("capture", done, total)`` is called after each batch."""
    config = config_of(CaptureConfig, locals())
    load = loading_of(locals())
    texts = prompts if isinstance(prompts, TokenBatch) else list(check_prompts(prompts))
    if verify and isinstance(texts, TokenBatch):
        raise InputError("verify=True needs the prompts as texts, not a TokenBatch", prompts=None)
    loaded = as_loaded(model, load, seed=seed)
    cap = run_capture(loaded, texts, config, progress=progress)
    manifest = build_manifest(model=loaded, command=command, seed=seed, prepend_bos=config.prepend_bos, configs={"capture": config})
    manifest["capture"] = capture_entry(cap)
    tables = {}
    if verify and not isinstance(texts, TokenBatch):  # a TokenBatch with verify is refused above
        tables["verify"] = verify_attention(
            loaded, texts, prepend_bos=config.prepend_bos, tolerance=tolerance, batch_size=config.batch_size
        )
    return CaptureResult(tables=tables, manifest=manifest, capture=cap)


def tiny_checkpoint(
    folder: str | Path,
    *,
    n_layer: int = TinySpec.n_layer,
    n_head: int = TinySpec.n_head,
    d_model: int = TinySpec.d_model,
    n_ctx: int = TinySpec.n_ctx,
    seed: int = TinySpec.seed,
) -> Path:
    """A small GPT-2-shaped checkpoint in ``folder`` (random weights seeded by ``seed``, the real GPT-2
    tokenizer), built offline (``headlens tiny-model``); its path."""
    if d_model % n_head:
        raise InputError(f"d_model={d_model} must be a multiple of n_head={n_head}", parameter="d_model")
    return Path(build_tiny_checkpoint(folder, TinySpec(n_layer=n_layer, n_head=n_head, d_model=d_model, n_ctx=n_ctx, seed=seed)))


def planted_checkpoint(folder: str | Path) -> Path:
    """The planted-head checkpoint in ``folder`` (2 layers x 4 heads whose roles,
    :data:`PLANTED_ROLES`, are set by hand; ``headlens tiny-model --planted``); its path."""
    return Path(build_planted_checkpoint(folder))
