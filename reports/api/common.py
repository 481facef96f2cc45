"""What every study call shares: its config from ``config`` and keyword arguments, the model from a
name or a loaded model, and the command recorded in the manifest.

A study's signature lists its settings as keyword parameters whose names, types and defaults are its
config dataclass's fields (plus the loading keywords, :class:`~headlens.probes.config.ModelConfig`'s
fields) and :func:`study` checks and completes a call of it (``tests/meta/test_settings_once.py``
compares the signature with the fields)::

    @study("census", CensusConfig)
    def census(model, config=None, /, *, n_prompts: int = 100, ..., device: str = "auto", ...,
               progress: Progress | None = None, command: list[str] | None = None) -> CensusResult:
        config = config_of(CensusConfig, locals())
        load = loading_of(locals())
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, Union

from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.loading import LoadedModel
from headlens.probes.settings import settings_of

log = logging.getLogger(__name__)

__all__ = [
    "study",
    "config_of",
    "config_from_record",
    "loading_of",
    "study_config",
    "loading_settings",
    "python_command",
    "coerce_setting",
    "LOAD_FIELDS",
    "UNRECORDED",
]

C = TypeVar("C")
F = TypeVar("F", bound=Callable[..., Any])

#: Keyword arguments of a study that load the model when it is given by name (ModelConfig's fields).
LOAD_FIELDS = tuple(f for f in ModelConfig.__dataclass_fields__ if f != "model")
_LOAD_DEFAULTS = {info.name: info.default for info in settings_of(ModelConfig) if info.name != "model"}

#: Keywords of a study that the manifest's Python command does not record (callables, the command itself).
UNRECORDED = ("progress", "command")


def study(verb: str, config: type | None = None) -> Callable[[F], F]:
    """Check and complete each call of a study function ``fn(model, config=None, /, *, settings...)``.

    The wrapped function keeps its signature (editors complete it, ``help()`` shows the defaults);
    on each call:

    * a keyword that is not a parameter is a one-line :class:`InputError` naming it (``census:
      unknown keyword n_promts=; choose from ...``), and a ``config`` that is not a ``config``
      instance is one too;
    * loading keywords (``device=``, ``dtype=``, ...: :data:`LOAD_FIELDS`) with a loaded model are refused;
    * each given setting of ``config`` is coerced to its field's type (:func:`coerce_setting`: a
      comma-separated str for a tuple, ``"5.1,5.5"`` for heads; one str is one item of a field
      whose setting has ``split=False``, as prompts);
    * with a ``config`` given positionally, every setting not given by keyword takes its value
      from it (keywords override the config), so the body sees the call's settings in its parameters
      and builds its config with :func:`config_of`;
    * ``command`` (when the function has one and it is None) becomes the Python call as the
      manifest records it (:func:`python_command`: the keywords given, less :data:`UNRECORDED`).
    """

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters
        keywords = [n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        fields = {info.name: info for info in settings_of(config)} if config is not None else {}
        missing = [n for n in fields if n not in keywords]
        if missing:  # a study whose signature lacks a setting of its config (the meta test says the same)
            raise TypeError(f"{fn.__name__}: no keyword parameter for {config.__name__}.{', '.join(missing)}")  # type: ignore[union-attr]

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            unknown = [k for k in kwargs if k not in keywords]
            if unknown:
                raise InputError(
                    f"{_at(verb)}unknown keyword {', '.join(f'{k}=' for k in unknown)}; choose from {', '.join(keywords)}",
                    keywords=unknown,
                )
            model = args[0] if args else None
            given_config = args[1] if len(args) > 1 else None
            if given_config is not None and config is not None and not isinstance(given_config, config):
                raise InputError(f"{_at(verb)}config must be a {config.__name__}, got {type(given_config).__name__}")
            load = [k for k in kwargs if k in LOAD_FIELDS]
            if load and isinstance(model, LoadedModel):
                raise InputError(
                    f"{', '.join(f'{k}=' for k in load)}: loading settings apply to a model given by name, not to a loaded model"
                )
            recorded = {k: v for k, v in kwargs.items() if k not in UNRECORDED}
            for name, value in list(kwargs.items()):
                if name in fields:
                    if isinstance(value, str) and not fields[name].split:
                        value = (value,)  # one text (a prompt may hold commas)
                    kwargs[name] = coerce_setting(verb, name, fields[name].type, value)
            if given_config is not None:
                for name in fields:
                    kwargs.setdefault(name, getattr(given_config, name))
            if "command" in keywords and kwargs.get("command") is None and model is not None:
                kwargs["command"] = python_command(verb, model, recorded)
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]  # functools.wraps keeps fn's signature

    return decorate


def config_of(cls: type[C], values: Mapping[str, Any], **extra: Any) -> C:
    """``cls`` built from the fields of ``cls`` found in ``values`` (a study's ``locals()``), plus ``extra``."""
    names = [info.name for info in settings_of(cls)]
    return cls(**{**{n: values[n] for n in names if n in values}, **extra})


def config_from_record(cls: type[C], record: Mapping[str, Any]) -> C:
    """``cls`` rebuilt from its manifest record (``dataclasses.asdict`` written as JSON: tuples came back as
    lists): each field the record holds, coerced to the field's type; a field it lacks takes its default."""
    fields = {info.name: info for info in settings_of(cls)}
    return cls(**{k: coerce_setting("", k, fields[k].type, v) for k, v in record.items() if k in fields})


def loading_of(values: Mapping[str, Any]) -> dict[str, Any]:
    """The loading keywords in ``values`` (a study's ``locals()``) that differ from ModelConfig's defaults."""
    return {k: values[k] for k in LOAD_FIELDS if k in values and values[k] != _LOAD_DEFAULTS[k]}


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
            f"{_at(verb)}unknown keyword {', '.join(f'{k}=' for k in unknown)}; choose from {', '.join(fields + list(allowed))}",
            keywords=unknown,
        )
    if config is not None and not isinstance(config, cls):
        raise InputError(f"{_at(verb)}config must be a {cls.__name__}, got {type(config).__name__}")
    hints = typing.get_type_hints(cls)
    own = {k: coerce_setting(verb, k, hints[k], v) for k, v in kwargs.items() if k in fields}
    if config is None:
        return cls(**own)
    return dataclasses.replace(config, **own) if own else config  # type: ignore[type-var]  # a dataclass instance


def python_command(verb: str, model: LoadedModel | str | os.PathLike, kwargs: dict[str, Any]) -> list[str]:
    """The manifest's ``command`` for a call from Python: ``["python", "headlens.census('demo', n_prompts=20)"]``."""
    name = model.name if isinstance(model, LoadedModel) else str(model)
    args = ", ".join([repr(name), *(f"{k}={v!r}" for k, v in kwargs.items())])
    return ["python", f"headlens.{verb}({args})"]


def coerce_setting(verb: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` as the field typed ``hint`` takes it: for a tuple field a str is its comma-separated
    items (heads as ``"L.H,L.H"``) and a single value a one-item tuple; items and scalars of the
    wrong type are a one-line :class:`InputError` naming ``name``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return coerce_setting(verb, name, rest[0], value) if len(rest) == 1 else value
    if origin is tuple:
        item = args[0] if args else Any
        if typing.get_origin(item) is tuple:  # heads: the one head-list parser
            try:
                return as_heads(value, name=name)
            except InputError as exc:
                raise InputError(f"{_at(verb)}{exc}", parameter=name) from None
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",")]
            if not all(items):
                raise InputError(f"{_at(verb)}{name}={value!r} has an empty item; separate items with commas", parameter=name)
        elif isinstance(value, (list, tuple)):
            items = list(value)
        elif isinstance(value, (numbers.Number, bool)):
            items = [value]
        else:
            raise InputError(
                f"{_at(verb)}{name}= must be a tuple, a list or a comma-separated str, got {type(value).__name__}", parameter=name
            )
        return tuple(_coerce_item(verb, name, item, v) for v in items)
    return _check_scalar(verb, name, hint, value)


def _coerce_item(verb: str, name: str, hint: Any, value: Any) -> Any:
    """One item of a tuple setting; a str item (from a comma-separated str) becomes the item's type."""
    if isinstance(value, str) and hint in (int, float):
        try:
            return hint(value)
        except ValueError:
            what = "an int" if hint is int else "a number"
            raise InputError(f"{_at(verb)}{name}= item {value!r} is not {what}", parameter=name) from None
    if isinstance(value, str) and hint is bool:
        words = {"true": True, "false": False}
        if value.lower() not in words:
            raise InputError(f"{_at(verb)}{name}= item {value!r} is not true or false", parameter=name)
        return words[value.lower()]
    return _check_scalar(verb, name, hint, value)


def _check_scalar(verb: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` when it is of type ``hint`` (an int for a float; a path for a str), else a one-line InputError."""
    given: Any = value  # the checks below narrow ``value``, not ``given``
    checks: dict[Any, tuple[str, bool]] = {
        bool: ("true or false", isinstance(value, bool)),
        int: ("an int", isinstance(value, numbers.Integral) and not isinstance(value, bool)),
        float: ("a number", isinstance(value, numbers.Real) and not isinstance(value, bool)),
        str: ("a str", isinstance(value, (str, os.PathLike))),
    }
    if hint not in checks:
        return value
    what, ok = checks[hint]
    if not ok:
        raise InputError(f"{_at(verb)}{name}= must be {what}, got {type(value).__name__} {value!r}", parameter=name)
    if hint is int:
        return int(given)
    return float(given) if hint is float else given


def _at(verb: str) -> str:
    """The prefix of a message about one study's settings (none without a study)."""
    return f"{verb}: " if verb else ""
