"""What every study call shares: its config from ``config`` and keyword arguments, the model from a
name or a loaded model, and the command recorded in the manifest."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, TypeVar

from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["study_config", "loading_settings", "python_command", "LOAD_FIELDS"]

C = TypeVar("C")

#: Keyword arguments of a study that load the model when it is given by name (ModelConfig's fields).
LOAD_FIELDS = tuple(f for f in ModelConfig.__dataclass_fields__ if f != "model")


def loading_settings(model: LoadedModel | str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the loading keywords (``device``, ``dtype``, ...) out of ``kwargs``; refused with a loaded model."""
    load = {k: kwargs.pop(k) for k in LOAD_FIELDS if k in kwargs}
    if load and isinstance(model, LoadedModel):
        raise InputError(f"{', '.join(f'{k}=' for k in load)}: loading settings apply to a model given by name, not to a loaded model")
    return load


def study_config(verb: str, cls: type[C], config: C | None, kwargs: dict[str, Any], *, allowed: tuple[str, ...] = ()) -> C:
    """``config`` (default ``cls()``) with ``kwargs`` (``cls``'s fields) applied; a keyword that is
    neither a field of ``cls`` nor in ``allowed`` is a one-line :class:`InputError` naming it."""
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # cls is a dataclass
    unknown = [k for k in kwargs if k not in fields and k not in allowed]
    if unknown:
        raise InputError(
            f"{verb}: unknown keyword {', '.join(f'{k}=' for k in unknown)}; choose from {', '.join(fields + list(allowed))}",
            keywords=unknown,
        )
    if config is not None and not isinstance(config, cls):
        raise InputError(f"{verb}: config must be a {cls.__name__}, got {type(config).__name__}")
    own = {k: v for k, v in kwargs.items() if k in fields}
    if config is None:
        return cls(**own)
    return dataclasses.replace(config, **own) if own else config  # type: ignore[type-var]  # a dataclass instance


def python_command(verb: str, model: LoadedModel | str, kwargs: dict[str, Any]) -> list[str]:
    """The manifest's ``command`` for a call from Python: ``["python", "headlens.census('demo', n_prompts=20)"]``."""
    name = model.name if isinstance(model, LoadedModel) else model
    args = ", ".join([repr(name), *(f"{k}={v!r}" for k, v in kwargs.items())])
    return ["python", f"headlens.{verb}({args})"]
