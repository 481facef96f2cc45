"""``headlens.load_model``, ``headlens.models()`` and ``headlens.fetch_model``: models by name (``demo``, ``minilm``,
``smollm2``), folder, GGUF file or Hub id, from Python."""

from __future__ import annotations

import logging
from typing import Any

import torch

from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.gguf import gguf_checkpoint
from headlens.probes.loading import LoadedModel
from headlens.probes.loading import load_model as _load_checkpoint
from headlens.probes.settings import check_seed
from headlens.reports.api.named_models import NamedModel, named_model_list, named_models

log = logging.getLogger(__name__)

__all__ = ["load_model", "models", "as_loaded", "fetch_model"]


def load_model(model: str | ModelConfig, **kwargs: Any) -> LoadedModel:
    """Load a model: a named model (``"demo"``: the small GPT-2 shipped with headlens, ``"minilm"``, ``"smollm2"``;
    :func:`models` lists them), a local checkpoint folder, a GGUF file or a Hugging Face id.

    ``kwargs`` are :class:`~headlens.probes.config.ModelConfig`'s fields: ``device`` (``"auto"``,
    ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``), ``dtype``, ``revision``, ``allow_new_weights``,
    ``device_map``, ``max_memory``, ``offload_folder``.  A name close to a named model
    (``"dmeo"``) is refused with the name it is close to.  ``model`` may be given by keyword
    (``load_model(model="demo")``).
    """
    if isinstance(model, ModelConfig):
        if kwargs:
            raise TypeError("load_model: pass either a ModelConfig or keyword arguments, not both")
        config = model
    else:
        if not isinstance(model, str):
            raise TypeError(f"load_model: model must be a name, folder or Hugging Face id (a str), got {type(model).__name__}")
        config = model_config(model, kwargs)
    return _load_checkpoint(config, named=named_models())


def model_config(model: str, kwargs: dict[str, Any]) -> ModelConfig:
    """A :class:`ModelConfig` from keyword arguments; an unknown keyword is a one-line InputError naming it."""
    fields = set(ModelConfig.__dataclass_fields__) - {"model"}
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise InputError(f"load_model: unknown keyword {', '.join(map(repr, unknown))}; choose from {', '.join(sorted(fields))}")
    return ModelConfig(model=model, **kwargs)


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
