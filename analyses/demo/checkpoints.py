"""The demo recipe's files: the finished checkpoint folder, the checkpoints kept during training, the recipe in a summary.

* :func:`save_checkpoint`: the folder ``headlens demo train --out DIR`` writes (weights,
  config, tokenizer, ``training_log.jsonl``, ``training_summary.json``);
* :func:`save_step_checkpoint`: a folder kept every ``--save-every`` steps (weights, config,
  tokenizer and ``checkpoint.json`` with the step, the run's name and the log row of that
  step), loadable with ``--model DIR`` and swept with ``headlens sweep``; written under a
  temporary name and renamed, so a crash never leaves half of one.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from headlens.analyses.demo.data import gpt2_tokenizer
from headlens.analyses.demo.recipe import RecipeConfig, TrainRun
from headlens.probes.outputs import atomic_dir

__all__ = ["save_checkpoint", "save_step_checkpoint", "config_from_summary", "config_dict", "step_folder_name", "CHECKPOINT_INFO"]

#: The file in a kept checkpoint folder that records its step (read by ``headlens sweep``).
CHECKPOINT_INFO = "checkpoint.json"


def step_folder_name(step: int) -> str:
    """``step-000100``: sorts by step as text too."""
    return f"step-{step:06d}"


def save_step_checkpoint(
    model: Any, folder: str | Path, *, step: int, run: str, row: dict[str, Any] | None = None, recipe: dict[str, Any] | None = None
) -> Path:
    """Write ``model`` at ``step`` to ``folder`` (replaced if it exists) with ``checkpoint.json``."""
    folder = Path(folder)
    with atomic_dir(folder) as tmp:
        with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress chatter
            model.save_pretrained(tmp, safe_serialization=True)
        gpt2_tokenizer().save_pretrained(tmp)
        info = {"step": step, "run": run, "log": row or {}, "recipe": recipe or {}}
        (tmp / CHECKPOINT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return folder


def config_dict(config: RecipeConfig) -> dict[str, Any]:
    d = asdict(config)
    d["kinds"] = list(config.kinds)
    d["warm_kinds"] = list(config.warm_kinds)
    d["betas"] = list(config.betas)
    d["random_span"] = list(config.random_span)
    d["vocab_schedule"] = None if config.vocab_schedule is None else list(config.vocab_schedule)
    d["batch_size"] = config.batch_size
    return d


def save_checkpoint(result: TrainRun, out: str | Path) -> Path:
    """Write the checkpoint folder: weights, config, tokenizer, log and summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = result.model
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress chatter
        model.save_pretrained(out, safe_serialization=True)
    gpt2_tokenizer().save_pretrained(out)
    with open(out / "training_log.jsonl", "w", encoding="utf-8") as fh:
        for row in result.log:
            fh.write(json.dumps(row) + "\n")
    (out / "training_summary.json").write_text(json.dumps(result.summary, indent=2) + "\n", encoding="utf-8")
    return out


def config_from_summary(summary: dict[str, Any]) -> RecipeConfig:
    """The :class:`RecipeConfig` recorded in a ``training_summary.json``."""
    rec = dict(summary["recipe"])
    rec.pop("batch_size", None)
    rec["kinds"] = tuple(rec["kinds"])
    rec["warm_kinds"] = tuple(rec["warm_kinds"])
    rec["betas"] = tuple(rec["betas"])
    rec["random_span"] = tuple(rec["random_span"])
    if rec.get("vocab_schedule") is not None:
        rec["vocab_schedule"] = tuple(rec["vocab_schedule"])
    return replace(RecipeConfig(), **rec)
