"""The ``examples`` stage: every head's attention pattern on a few example prompts (the page
shows them token by token)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from headlens.probes.capture import tokenize_for
from headlens.probes.config import CaptureConfig
from headlens.probes.outputs import atomic_write, write_json
from headlens.reports.api.capture import capture
from headlens.reports.runs.report.context import Stage, StageContext

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["STAGE", "Example", "MAX_EXAMPLE_TOKENS"]

#: Tokens of an example prompt shown at most (longer prompts are cut, and the page says so).
MAX_EXAMPLE_TOKENS = 64


@dataclass
class Example:
    """An example prompt's tokens and every head's attention pattern ``[layer, head, q, k]``."""

    prompt: str
    tokens: list[str]
    pattern: np.ndarray
    truncated: bool = False


def _run_examples(ctx: StageContext) -> dict[str, Any]:
    loaded = ctx.model()
    prompts = list(ctx.settings.example_prompts)
    limit = min(MAX_EXAMPLE_TOKENS, loaded.n_ctx)
    bos = ctx.settings.prepend_bos
    # framed as every prompt is (LoadedModel.frame: [BOS] text, or [CLS] text [SEP] on an encoder)
    batch = tokenize_for(loaded, prompts, prepend_bos=bos, truncate=True, n_ctx=limit)
    n_frame = sum(len(ids) for ids in loaded.frame(bos))
    full_len = [len(loaded.tokenizer(p, add_special_tokens=False)["input_ids"]) + n_frame for p in prompts]
    config = CaptureConfig(what=("pattern",), prepend_bos=bos, batch_size=ctx.settings.batch_size)
    cap = capture(loaded, config, prompts=batch, command=ctx.command).capture
    assert cap is not None  # a computed result holds its Capture
    arrays = {}
    for i in range(len(prompts)):
        n = int(batch.lengths[i])
        arrays[f"p{i}"] = np.stack([cap.get(layer, "pattern")[i, :, :n, :n].float().numpy() for layer in range(loaded.n_layers)]).astype(
            np.float32
        )
    meta = {
        "prepend_bos": bos,
        "max_tokens": limit,
        "examples": [{"prompt": p, "tokens": batch.strings[i], "truncated": full_len[i] > limit} for i, p in enumerate(prompts)],
    }
    write_json(ctx.dir / "examples.json", meta)

    def save(path: Path) -> None:
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(ctx.dir / "patterns.npz", save)
    return {"n_examples": len(prompts), "max_tokens": limit}


def _load_examples(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    meta = json.loads((d / "examples.json").read_text(encoding="utf-8"))
    with np.load(d / "patterns.npz") as z:
        arrays = {k: z[k] for k in z.files}
    examples = [
        Example(prompt=e["prompt"], tokens=list(e["tokens"]), pattern=arrays[f"p{i}"], truncated=bool(e["truncated"]))
        for i, e in enumerate(meta["examples"])
    ]
    return {"examples": examples}


def _apply(report: Report, loaded: dict[str, Any]) -> None:
    report.examples = loaded["examples"]


STAGE = Stage(
    "examples",
    "attention on example prompts",
    _run_examples,
    _load_examples,
    # "framing": examples written before they were framed by LoadedModel.frame (an encoder's
    # [CLS] ... [SEP]) have another key and are recomputed, not resumed
    lambda s: {"prompts": list(s.example_prompts), "prepend_bos": s.prepend_bos, "max_tokens": MAX_EXAMPLE_TOKENS, "framing": "model"},
    _apply,
)
