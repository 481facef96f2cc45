"""``headlens tracr-model`` from Python: a tracr program compiled into a checkpoint headlens loads.

The compiler and the conversion are :mod:`headlens.analyses.tracr` (the ``circuits-bench`` extra);
this is the verb the command calls.
"""

from __future__ import annotations

from pathlib import Path

from headlens.analyses.tracr.build import TracrModel, build_tracr_model

__all__ = ["tracr_model"]


def tracr_model(program: str, out_dir: str | Path, *, overwrite: bool = False, max_seq_len: int | None = None) -> TracrModel:
    """Compile tracr's ``program`` (causal attention) into a GPT-2 checkpoint in ``out_dir``, with its
    word-level tokenizer, ``program.py``, ``ground_truth.json`` and ``agreement.json``; the folder is
    moved into place only after the checkpoint agrees with the RASP program on every test input."""
    return build_tracr_model(program, out_dir, overwrite=overwrite, max_seq_len=max_seq_len)
