"""Small GPT-2-shaped checkpoints built locally (random weights, real GPT-2 tokenizer).

They exist so that tests and the offline quickstart run the exact code path that real
GPT-2 takes: a Hugging Face ``save_pretrained`` folder booted by TransformerBridge.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from headlens.analyses.synthetic.tiny_spec import TinySpec
from headlens.probes.scoped import torch_seed
from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

__all__ = ["TinySpec", "build_tiny_checkpoint"]


def build_tiny_checkpoint(folder: str | Path, spec: TinySpec | None = None) -> Path:
    """Write a randomly initialised GPT-2 checkpoint plus the GPT-2 tokenizer to ``folder``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    spec = spec or TinySpec()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = GPT2Config(
        n_layer=spec.n_layer,
        n_head=spec.n_head,
        n_embd=spec.d_model,
        n_positions=spec.n_ctx,
        vocab_size=50257,
        bos_token_id=50256,
        eos_token_id=50256,
    )
    with torch_seed(spec.seed):  # the caller's random stream is left as it was
        model = GPT2LMHeadModel(config)
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bar
        model.save_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_offline_gpt2_tokenizer(tmp)
        tokenizer.save_pretrained(folder)
    (folder / "headlens_tiny.json").write_text(json.dumps(asdict(spec)) + "\n")
    return folder
