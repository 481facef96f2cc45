"""``headlens.load_model``, ``headlens.models()`` and ``headlens.fetch_model``: models by name (``demo``, ``minilm``,
``smollm2``), folder, GGUF file or Hub id, from Python."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.gguf import gguf_checkpoint
from headlens.probes.loading import LoadedModel
from headlens.probes.loading import load_model as _load_checkpoint
from headlens.probes.settings import check_seed
from headlens.reports.api.common import LOAD_FIELDS, loading_of
from headlens.reports.api.named_models import NamedModel, named_model_list, named_models

log = logging.getLogger(__name__)

__all__ = ["load_model", "models", "as_loaded", "fetch_model"]

F = TypeVar("F", bound=Callable[..., Any])


def _keywords_known(fn: F) -> F:
    """Refuse a keyword ``fn`` does not take with a one-line :class:`InputError` naming it and the
    keywords it does take (Python's own TypeError names neither the choices nor the parameter)."""
    names = [n for n, p in inspect.signature(fn).parameters.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            choices = ", ".join(sorted(LOAD_FIELDS))
            raise InputError(f"{fn.__name__}: unknown keyword {', '.join(map(repr, unknown))}; choose from {choices}")
        return fn(*args, **kwargs)

    return call  # type: ignore[return-value]  # functools.wraps keeps fn's signature


@_keywords_known
def load_model(
    model: str | ModelConfig,
    *,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
) -> LoadedModel:
    """Load a model: a named model (``"demo"``: the small GPT-2 shipped with headlens, ``"minilm"``, ``"smollm2"``;
    :func:`models` lists them), a local checkpoint folder, a GGUF file or a Hugging Face id.

    The keywords are :class:`~headlens.probes.config.ModelConfig`'s fields, with its defaults:

    * ``device``: ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``;
    * ``dtype``: ``"float32"``, ``"bfloat16"`` or ``"float16"``;
    * ``revision``: the Hub revision (branch, tag or commit);
    * ``allow_new_weights``: load even when weights of the network body are missing from the
      checkpoint (randomly initialised, listed in the manifest) instead of refusing it;
    * ``device_map`` (``"auto"``, ``"balanced"``, ``"sequential"``, a ``{module: device}`` mapping or a
      JSON file of one), ``max_memory`` (``{device: size}``) and ``offload_folder``: place a model
      larger than one device with accelerate.

    ``model`` may also be a whole :class:`~headlens.probes.config.ModelConfig` (then no keyword may
    differ from its default) and may be given by keyword (``load_model(model="demo")``).  A name close
    to a named model (``"dmeo"``) is refused with the name it is close to; an unknown keyword is a
    one-line :class:`~headlens.probes.errors.InputError` naming it.
    """
    settings = {k: v for k, v in locals().items() if k in LOAD_FIELDS}
    if isinstance(model, ModelConfig):
        given = sorted(loading_of(settings))
        if given:
            raise TypeError(f"load_model: pass either a ModelConfig or keyword arguments ({', '.join(given)}), not both")
        config = model
    elif isinstance(model, str):
        config = ModelConfig(model=model, **settings)
    else:
        raise TypeError(f"load_model: model must be a name, folder or Hugging Face id (a str), got {type(model).__name__}")
    return _load_checkpoint(config, named=named_models())


def as_loaded(model: LoadedModel | str, load: dict[str, Any] | None = None, *, seed: int | None = None) -> LoadedModel:
    """``model`` itself when already loaded, else :func:`load_model` with ``load`` (ModelConfig fields),
    torch seeded with ``seed`` first (weights missing from a checkpoint are drawn reproducibly)."""
    if seed is not None:
        check_seed(seed)
    if isinstance(model, LoadedModel):
        if load:
            raise InputError(
                f"{', '.join(f'{k}=' for k in sorted(load))}: loading settings apply to a model given by name, not to a loaded model"
            )
        return model
    if seed is not None:
        torch.manual_seed(seed)
    return load_model(model, **(load or {}))


def models() -> list[NamedModel]:
    """The named models: what each is, and where its files are here (or why it cannot be loaded)."""
    return named_model_list()


def fetch_model(name: str) -> NamedModel:
    """Bring a named model's files here now (``smollm2``: fetch its GGUF file, then convert it once),
    so that the first study does not wait for it; a model already here costs a checksum.  Returns its
    :class:`NamedModel` entry.  Raises :class:`~headlens.probes.errors.InputError` for an unknown name and
    :class:`~headlens.probes.errors.ModelLoadError` when its files cannot be had."""
    named = named_models()
    if name not in named:
        raise InputError(f"name={name!r} is not a named model; choose from {', '.join(named)}")
    found = named[name]()
    if found.is_file():
        gguf_checkpoint(found, name)
    return next(m for m in named_model_list() if m.name == name)
