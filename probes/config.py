"""Keyword-only configuration dataclasses; each serialises into the manifest."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from headlens.probes.settings import check_range, setting

__all__ = ["ModelConfig", "CaptureConfig", "CAPTURABLE", "to_dict"]

#: Short names accepted by ``--what`` and the hook each one reads.
CAPTURABLE: dict[str, str] = {
    "q": "hook_q",
    "k": "hook_k",
    "v": "hook_v",
    # q and k as they enter the dot product (after the rotary embedding where the family has one).
    "rot_q": "hook_rot_q",
    "rot_k": "hook_rot_k",
    "pattern": "hook_pattern",
    "attn_scores": "hook_attn_scores",
    "z": "hook_z",
}


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """What model to load and where.

    ``model`` is a Hugging Face id (``gpt2``), a local checkpoint folder, a GGUF file (or a folder
    holding one: :mod:`headlens.probes.gguf`) or a named model.
    ``device`` is ``auto`` (CUDA, then MPS, then CPU) or an explicit torch device.
    ``allow_new_weights`` loads a checkpoint that lacks weights of the network body
    (they are randomly initialised and listed in the manifest) instead of refusing it;
    a missing output head alone is always allowed, with a warning.
    ``device_map`` (``auto``, ``balanced``, a ``{module: device}`` mapping or a JSON file of
    one) and ``max_memory`` (``{device: size}``) place a model larger than one device with
    accelerate (:mod:`headlens.probes.placement`); ``offload_folder`` holds disk-offloaded weights.
    """

    model: str = setting(
        help="Hugging Face id (gpt2, EleutherAI/pythia-70m), a local checkpoint folder, a GGUF file (dequantized and "
        "cached once), or a named model: demo (the small GPT-2 shipped with headlens), minilm, smollm2 (SmolLM2-135M, "
        "fetched on first use; 'headlens models' lists them)."
    )
    device: str = setting("auto", help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps.")
    dtype: str = setting(
        "float32",
        help="Weights and activations dtype; bfloat16/float16 on the CPU where this torch runs them.",
        choices=("float32", "bfloat16", "float16"),
    )
    revision: str | None = setting(None, help="Hub revision (branch, tag or commit) of the model.")
    allow_new_weights: bool = setting(
        False,
        help="Load the model even when weights of the network body are missing from the checkpoint (they are randomly "
        "initialised and listed in the manifest); without it that fails with exit 3. A missing output head is always "
        "allowed, with a warning.",
    )
    device_map: Any = setting(
        None,
        help="Place a model larger than one device with accelerate: auto, balanced, sequential, or a JSON file mapping module names to "
        "devices (0, cuda:1, cpu, disk); replaces --device. Offloaded layers (cpu, disk) give the same numbers, slower.",
        metavar="auto|balanced|FILE",
    )
    max_memory: Any = setting(
        None,
        help="With --device-map: the most memory accelerate may use per device, e.g. 0=20GiB,cpu=60GiB (GPU index, cpu, mps).",
        metavar="DEVICE=SIZE,...",
    )
    offload_folder: str | None = setting(None, help="Folder for weights offloaded to disk by --device-map.", cli=False)


@dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    """What to capture.

    ``layers=None`` means every layer; ``heads`` (``(layer, head)`` pairs) restricts the
    heads kept and, when given, implies the layers.  ``prepend_bos`` follows
    TransformerLens' default (True); Hugging Face and most papers use False.

    Under grouped-query attention ``k``, ``v`` and ``rot_k`` have the model's KV heads,
    and ``heads`` selects the KV heads that the chosen query heads read;
    ``kv_per_query_head=True`` instead stores one K/V column per chosen query head (the
    KV head it reads, repeated), explicitly.  ``rot_q``/``rot_k`` are q and k as they
    enter ``q . k``: after the rotary embedding (the bridge's ``hook_rot_*``, or the
    rotation applied to ``hook_q``/``hook_k`` where the bridge has no such hook), equal
    to ``q``/``k`` in families without one.
    """

    what: tuple[str, ...] = setting(
        ("q", "k", "v", "pattern"),
        help="Any of q,k,v,rot_q,rot_k,pattern,attn_scores,z. q,k are before the rotary embedding; rot_q,rot_k are what enters q.k.",
    )
    layers: tuple[int, ...] | None = setting(None, help="Comma-separated layers, e.g. 0,3 (default: all).")
    heads: tuple[tuple[int, int], ...] | None = setting(None, help="Comma-separated heads as LAYER.HEAD, e.g. 5.1,5.5 (default: all).")
    prepend_bos: bool = setting(
        True,
        help="Do not prepend BOS (TransformerLens prepends it; Hugging Face and most papers do not). On encoders (BERT): "
        "no [CLS]/[SEP] around the text.",
        flag="--no-bos",
    )
    batch_size: int = setting(8, help="Prompts per forward pass.", minimum=1)
    truncate: bool = setting(False, help="Cut prompts longer than the context instead of failing.")
    kv_per_query_head: bool = setting(
        False,
        help="Under grouped-query attention, store k/v/rot_k once per chosen query head (its KV head repeated) "
        "instead of once per KV head.",
    )

    def __post_init__(self) -> None:
        check_range(self, "batch_size")


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config dataclass (tuples become lists)."""
    return json_ready(dataclasses.asdict(config))


def json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
