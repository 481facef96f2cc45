"""Click options generated from a config dataclass's settings (:mod:`headlens.probes.settings`).

The flag, type, default, range, choices and help of each option come from the field, so they exist
once, in the dataclass::

    @click.command("detect")
    @model_options
    @config_options(CensusConfig, exclude=("n_bootstrap", "ablate"))
    def detect_cmd(model, ..., **settings):
        config = config_from(CensusConfig, settings)

How a field becomes an option (:func:`option_for`):

* the flag is ``--`` + the name with dashes (``n_prompts`` -> ``--n-prompts``), or the field's
  ``flag`` (``prepend_bos`` -> ``--no-bos``), or the command's ``rename``; the command receives the
  value under the field's name (``prepend_bos=False`` for ``--no-bos``);
* ``bool``: a flag (``--truncate`` sets True; a field whose default is True is set False by its flag);
* ``int``/``float``: ``IntRange``/``FloatRange`` from ``minimum``/``maximum`` (plain ``INTEGER``/``FLOAT``
  without a range); ``str`` with ``choices``: ``click.Choice``; ``path="file"|"dir"``: ``click.Path``;
* ``tuple[int, ...]``, ``tuple[float, ...]``, ``tuple[str, ...]``: one comma-separated value
  (``--layers 0,3``; items checked against the range or choices), the default shown the same way;
* ``tuple[tuple[int, int], ...]``: heads as ``LAYER.HEAD,...`` (:data:`headlens.reports.cli.common.HEADS`);
* ``X | None`` with default None: the option may be left out (the help says what None means).

``overrides`` gives one option click keywords of its own (``{"text": {"decls": ("--text", "-t")}}``,
``{"bos": {"type": ..., "default": ...}}``) where a command's flag differs from its field; every
difference from the field is listed in ``tests/meta/test_settings_once.py``'s registry.

Light: click, :mod:`headlens.probes.settings` and the config's own (light) module; ``headlens CMD
--help`` imports no torch.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Union

import click

from headlens.probes.settings import REQUIRED, SettingInfo, settings_of
from headlens.reports.cli.common import HEADS

__all__ = ["config_options", "option_for", "config_from", "CommaList", "flag_of", "cli_default"]

F = typing.TypeVar("F", bound=Callable[..., Any])


class CommaList(click.ParamType):
    """``0,3`` -> ``(0, 3)``: one comma-separated value of ``item`` (int, float or str) items, each
    checked against ``minimum``/``maximum`` or ``choices``; an empty item is a usage error."""

    def __init__(
        self, item: type, *, minimum: float | None = None, maximum: float | None = None, choices: Iterable[Any] | None = None
    ) -> None:
        self.item = item
        self.minimum = minimum
        self.maximum = maximum
        self.choices = tuple(choices) if choices is not None else None
        self.name = {int: "N,...", float: "X,..."}.get(item, "NAME,...")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[Any, ...] | None:
        if value is None or isinstance(value, tuple):
            return value
        items = [v.strip() for v in str(value).split(",")]
        if not all(items):
            self.fail(f"empty item in {value!r}", param, ctx)
        out = []
        for v in items:
            try:
                x = self.item(v)
            except ValueError:
                what = {int: "whole numbers such as 0,3", float: "numbers such as 0.1,0.5"}.get(self.item, "items")
                self.fail(f"{value!r}: expected comma-separated {what}", param, ctx)
            if self.minimum is not None and x < self.minimum:
                self.fail(f"{v} is below {self.minimum:g}", param, ctx)
            if self.maximum is not None and x > self.maximum:
                self.fail(f"{v} is above {self.maximum:g}", param, ctx)
            if self.choices is not None and x not in self.choices:
                self.fail(f"{v!r}: choose from {', '.join(map(str, self.choices))}", param, ctx)
            out.append(x)
        return tuple(out)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str | None:  # type: ignore[override]
        if self.choices is not None:
            return "[" + "|".join(map(str, self.choices)) + "],..."
        return self.name


def flag_of(info: SettingInfo, rename: Mapping[str, str] | None = None) -> str:
    """The CLI flag of a setting: the command's ``rename``, else the field's ``flag``, else ``--name-with-dashes``."""
    if rename and info.name in rename:
        return rename[info.name]
    return info.flag or "--" + info.name.replace("_", "-")


def _bare(hint: Any) -> tuple[Any, bool]:
    """``(type, optional)``: ``int | None`` -> ``(int, True)``."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        return (args[0] if len(args) == 1 else hint), optional
    return hint, False


def cli_default(info: SettingInfo) -> Any:
    """The field's default as the option gives it to click: a tuple as its comma-separated text
    (``(0, 1, 4)`` -> ``"0,1,4"``), heads as ``"L.H,..."``, an empty tuple as None."""
    value = info.default
    if value is REQUIRED:
        return None
    if isinstance(value, tuple):
        if not value:
            return None
        if all(isinstance(v, tuple) for v in value):
            return ",".join(f"{layer}.{head}" for layer, head in value)
        return ",".join(str(v) for v in value)
    return value


def _click_type(info: SettingInfo) -> Any:
    hint, _ = _bare(info.type)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is bool:
        return None
    if hint is int:
        if info.has_range:
            return click.IntRange(
                None if info.minimum is None else int(info.minimum),
                None if info.maximum is None else int(info.maximum),
                min_open=info.min_open,
                max_open=info.max_open,
            )
        return click.INT
    if hint is float:
        if info.has_range:
            return click.FloatRange(info.minimum, info.maximum, min_open=info.min_open, max_open=info.max_open)
        return click.FLOAT
    if hint is str:
        if info.choices is not None:
            return click.Choice([str(c) for c in info.choices])
        if info.path == "file":
            return click.Path(dir_okay=False)
        if info.path == "dir":
            return click.Path(file_okay=False)
        return click.STRING
    if origin is tuple and args:
        item = args[0]
        if typing.get_origin(item) is tuple:
            return HEADS
        if item in (int, float, str):
            return CommaList(item, minimum=info.minimum, maximum=info.maximum, choices=info.choices)
    raise TypeError(f"setting {info.name}: no click type for {hint!r}; give the option's type in overrides")


def option_for(info: SettingInfo, *, rename: Mapping[str, str] | None = None, **override: Any) -> Callable[[F], F]:
    """The ``click.option`` of one setting (``override``: click keywords of this command's own, and
    ``decls``, the flag and its short forms)."""
    hint, _ = _bare(info.type)
    decls = tuple(override.pop("decls", (flag_of(info, rename),)))
    kwargs: dict[str, Any] = {"help": info.help or None}
    if hint is bool and "type" not in override:
        kwargs.update(is_flag=True, default=bool(info.default is True))
        if info.default is True:
            kwargs["flag_value"] = False
    else:
        default = cli_default(info)
        kwargs.update(type=_click_type(info) if "type" not in override else None, default=default)
        kwargs["show_default"] = default is not None
        if info.required:
            kwargs["required"] = True
        if info.metavar:
            kwargs["metavar"] = info.metavar
    kwargs.update(override)
    return click.option(*decls, info.name, **kwargs)


def config_options(
    cls: Any,
    fields: Iterable[str] | None = None,
    *,
    exclude: Iterable[str] = (),
    rename: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Callable[[F], F]:
    """A decorator adding one option per setting of ``cls``: ``fields`` in that order (default:
    every field whose setting has ``cli=True``, in field order), less ``exclude``.  ``rename``:
    field -> flag where the command's flag is not the field's; ``overrides``: field -> click
    keywords of this command's own."""
    infos = {info.name: info for info in settings_of(cls)}
    names = list(fields) if fields is not None else [n for n, i in infos.items() if i.cli]
    unknown = [n for n in [*names, *exclude, *(rename or {}), *(overrides or {})] if n not in infos]
    if unknown:
        raise TypeError(f"{getattr(cls, '__name__', cls)} has no setting {', '.join(unknown)}")
    names = [n for n in names if n not in set(exclude)]
    options = [option_for(infos[n], rename=rename, **dict((overrides or {}).get(n, {}))) for n in names]

    def decorate(fn: F) -> F:
        for opt in reversed(options):  # click lists options in the order of the decorators, top first
            fn = opt(fn)
        return fn

    return decorate


def config_from(cls: Any, values: Mapping[str, Any], **extra: Any) -> Any:
    """``cls(**...)`` from a command's parameters: the fields of ``cls`` among ``values`` (None for
    an optional tuple left out stays None; an empty tuple default left out is ``()``), plus ``extra``."""
    infos = {info.name: info for info in settings_of(cls)}
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in infos:
            continue
        info = infos[name]
        if value is None and isinstance(info.default, tuple):
            value = info.default
        kwargs[name] = value
    kwargs.update(extra)
    return cls(**kwargs)
