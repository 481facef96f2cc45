"""GGUF files in: a quantized checkpoint (llama.cpp's format) becomes a cached Hugging Face folder.

A GGUF file (``--model FILE.gguf``, or a folder holding one and no ``config.json``) is read by
transformers (``from_pretrained(folder, gguf_file=name)``, with the ``gguf`` package), which
dequantizes every tensor to float32; the model and its tokenizer are saved once into
``<cache>/gguf/<sha256 of the file>-<conversion key>/`` (:mod:`headlens.probes.cache`; the key names
the transformers and gguf versions and headlens' conversion steps), so a second load of the same file
is a plain folder load.  ``--dtype`` then applies to the folder as to any checkpoint
(a float32 copy cast on load is the same as dequantizing to that dtype: transformers dequantizes
to float32 first).

Before anything is converted the file's header is read (:func:`read_gguf_header`): a file that
is not GGUF, is truncated or corrupt, or holds an architecture transformers cannot read (or one
headlens refuses: state-space and encoder-decoder models) is a one-line :class:`ModelLoadError`
(exit 3) and nothing is cached.  The conversion is written aside and moved into place whole.

The tokenizer is saved so that it adds no BOS (headlens frames BOS itself,
:meth:`headlens.probes.loading.LoadedModel.frame`); what it does after saving is checked and
recorded.  :class:`GgufFacts` is what the manifest records: the file, its sha256, the
quantization types, that the weights were dequantized, the tokenizer's BOS behaviour.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from headlens.probes.cache import CACHE_ENV
from headlens.probes.errors import ModelLoadError
from headlens.probes.sources import conversion_key, converted_folder, file_sha256, first_line

__all__ = ["GgufFacts", "FACTS_FILE", "read_gguf_header", "gguf_checkpoint"]

log = logging.getLogger(__name__)

#: Written into a converted folder last: its presence marks a finished conversion.
FACTS_FILE = "headlens_gguf.json"
#: GGUF architectures transformers reads but headlens cannot analyse, with the reason.
REFUSED_ARCHITECTURES = {
    "mamba": "a state-space model (no attention heads)",
    "t5": "an encoder-decoder model",
    "umt5": "an encoder-decoder model",
}
_CONVERT_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True)
class GgufFacts:
    """What the manifest records about a model that came from a GGUF file."""

    file: str
    sha256: str
    size_bytes: int
    architecture: str
    name: str | None
    license: str | None
    #: Tensor count per GGUF tensor type (``{"Q4_1": 210, "F32": 61, "Q8_0": 1}``).
    quantization: dict[str, int]
    #: Always True: the weights were dequantized (to float32) by transformers before headlens saw them.
    dequantized: bool = True
    #: Whether the saved tokenizer adds a BOS token by itself (headlens frames BOS itself either way).
    tokenizer_adds_bos: bool | None = None
    #: The transformers version that dequantized the file.
    converted_by: str | None = None
    #: The cached checkpoint folder.
    checkpoint: str | None = None

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_gguf_header(path: Path, spec: str) -> GgufFacts:
    """The file's facts from its header and tensor table; one-line :class:`ModelLoadError` when unusable."""
    try:
        import gguf
    except ImportError as exc:
        raise ModelLoadError(f"model={spec!r}: reading GGUF files needs the gguf package (pip install gguf)", model=spec) from exc
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    try:
        reader = gguf.GGUFReader(str(path))
        arch = str(_field(reader, "general.architecture"))
        kinds = collections.Counter(t.tensor_type.name for t in reader.tensors)
        name, licence = _field(reader, "general.name"), _field(reader, "general.license")
    except (ValueError, OSError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelLoadError(
            f"model={spec!r}: {path} is not a readable GGUF file (corrupt or truncated: {first_line(exc)})", model=spec, path=str(path)
        ) from exc
    readable = sorted(set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"})
    if arch in REFUSED_ARCHITECTURES:
        raise ModelLoadError(
            f"model={spec!r}: the GGUF file holds {arch}, {REFUSED_ARCHITECTURES[arch]}; headlens cannot analyse it", model=spec
        )
    if arch not in readable:
        raise ModelLoadError(
            f"model={spec!r}: the GGUF file holds architecture {arch!r}, which transformers cannot read from GGUF "
            f"(it reads {', '.join(a for a in readable if a not in REFUSED_ARCHITECTURES)})",
            model=spec,
        )
    return GgufFacts(
        file=str(path.resolve()),
        sha256=file_sha256(path),
        size_bytes=path.stat().st_size,
        architecture=arch,
        name=None if name is None else str(name),
        license=None if licence is None else str(licence),
        quantization=dict(sorted(kinds.items())),
    )


def gguf_checkpoint(path: Path, spec: str) -> tuple[Path, GgufFacts]:
    """The cached checkpoint folder converted from the GGUF file ``path``, converting it first if needed.

    Keyed by the file's sha256 and :func:`conversion_key`: another transformers, gguf or conversion step
    converts again.  A cache that cannot be written is a one-line :class:`ModelLoadError`."""
    sha = file_sha256(path)
    folder = converted_folder(sha)
    facts = _cached_facts(folder)
    if facts is not None:
        log.debug("%s: converted checkpoint found in %s", path, folder)
        return folder, replace(facts, file=str(path.resolve()))  # the file as given now (a copy has the same sha256)
    header = read_gguf_header(path, spec)
    with _CONVERT_LOCK:
        facts = _cached_facts(folder)
        if facts is None:
            try:
                facts = _convert(path, header, folder, spec)
            except OSError as exc:
                raise ModelLoadError(
                    f"model={spec!r}: cannot write the converted checkpoint into {folder.parent} ({first_line(exc)}); "
                    f"set ${CACHE_ENV} to a writable folder",
                    model=spec,
                ) from exc
    return folder, facts


def _cached_facts(folder: Path) -> GgufFacts | None:
    try:
        raw = json.loads((folder / FACTS_FILE).read_text(encoding="utf-8"))
        return GgufFacts(**{**raw, "checkpoint": str(folder)})
    except (OSError, ValueError, TypeError):
        return None


def _convert(path: Path, header: GgufFacts, folder: Path, spec: str) -> GgufFacts:
    """Dequantize and save into a folder beside ``folder``, then move it into place whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    # Once per file and machine, and long (SmolLM2-135M: about 20 s on 2 cores): said up front, in the CLI too.
    log.warning(
        "converting %s (%s, %.0f MB) into a checkpoint in %s, once (later loads read that folder)",
        path.name,
        header.architecture,
        header.size_bytes / 1e6,
        folder,
    )
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    tmp.chmod(0o755)  # mkdtemp's 0o700 would hide a shared cache's checkpoint from other users
    try:
        adds_bos, version = _dequantize_and_save(path, tmp, spec)
        converted_by = f"transformers {version}, conversion key {conversion_key()}"
        facts = GgufFacts(**{**asdict(header), "tokenizer_adds_bos": adds_bos, "converted_by": converted_by})
        (tmp / FACTS_FILE).write_text(json.dumps({**facts.describe(), "checkpoint": None}, indent=2) + "\n", encoding="utf-8")
        if folder.exists() and _cached_facts(folder) is None:  # a conversion that never finished (no facts file)
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished the same file first: keep its folder
            if _cached_facts(folder) is None:
                raise
            log.debug("%s was converted by another process meanwhile", path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    done = _cached_facts(folder)
    if done is None:
        raise ModelLoadError(f"model={spec!r}: the converted checkpoint in {folder} could not be read back", model=spec)
    return done


@contextlib.contextmanager
def _quiet_progress() -> Iterator[None]:
    """transformers' progress bars off while converting, as they were after: its own (writing shards) by
    its switch, and the dequantizing loop's plain ``tqdm`` (no switch) by sending ``sys.stderr`` aside
    (log records still go to their handlers' streams; what was sent aside is logged at DEBUG)."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    aside = io.StringIO()
    try:
        with contextlib.redirect_stderr(aside):
            yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        if aside.getvalue().strip():
            log.debug("transformers' output while converting: %s", aside.getvalue().strip().replace("\r", " ")[-500:])


def _dequantize_and_save(path: Path, out: Path, spec: str) -> tuple[bool, str]:
    """Read the GGUF with transformers (dequantized to float32), save model and tokenizer into ``out``."""
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _quiet_progress():
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            # A GGUF-loaded model refuses save_pretrained ("quantized with gguf") while its quantizer is set:
            # the weights in memory are already dequantized float32.
            setattr(model, "hf_quantizer", None)  # noqa: B010 - torch's Module.__setattr__ types refuse a plain None
            if hasattr(model.config, "quantization_config"):
                delattr(model.config, "quantization_config")
            model.save_pretrained(out)
            tokenizer.save_pretrained(out)
    except (ValueError, KeyError, RuntimeError, NotImplementedError, OSError, TypeError) as exc:
        raise ModelLoadError(f"model={spec!r}: transformers could not convert {path.name} ({first_line(exc)})", model=spec) from exc
    return _tokenizer_without_bos(out), transformers.__version__


def _tokenizer_without_bos(folder: Path) -> bool:
    """Make the saved tokenizer add no BOS where it would; return whether it still does."""
    from transformers import AutoTokenizer

    def adds_bos() -> bool:
        tok = AutoTokenizer.from_pretrained(folder)
        ids = tok("a")["input_ids"]
        return tok.bos_token_id is not None and len(ids) > 0 and ids[0] == tok.bos_token_id

    if not adds_bos():
        return False
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["add_bos_token"] = False
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    still = adds_bos()
    if still:
        log.warning("the tokenizer saved from the GGUF file still adds BOS; headlens frames prompts without it (add_special_tokens=False)")
    return still
