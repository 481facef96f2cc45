"""Settings defined once: each field of a config dataclass carries its type, default, help text and range.

A config dataclass declares its fields with :func:`setting`::

    @dataclass(frozen=True, kw_only=True)
    class CensusConfig:
        n_prompts: int = setting(100, help="Prompts per stimulus set.", minimum=1)

:func:`settings_of` reads them back (name, type, default, help, range, choices); the study
signatures of :mod:`headlens.reports.api` repeat the same names, types and defaults as keyword
parameters (``tests/meta/test_settings_once.py`` compares them), and the click options of
:mod:`headlens.reports.cli.options` are generated from them, so a default or a help text exists in
one place.  :func:`check_range` is the library's check of a field's range, the same bound the CLI's
``IntRange``/``FloatRange`` enforces.

This module is light (the standard library and :mod:`headlens.probes.errors`): ``headlens CMD
--help`` reads it.  The metadata lives under the key :data:`KEY` of each ``dataclasses.field``;
nothing else about the dataclass changes (it serialises to the manifest as before).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from headlens.probes.errors import InputError

__all__ = [
    "setting",
    "seed_setting",
    "check_seed",
    "SEED_MAX",
    "Setting",
    "SettingInfo",
    "settings_of",
    "setting_of",
    "check_range",
    "check_ranges",
    "KEY",
    "REQUIRED",
]

#: The key of a field's ``metadata`` under which :func:`setting` stores its :class:`Setting`.
KEY = "headlens"

#: The default of a setting that has none (a required field).
REQUIRED: Any = dataclasses.MISSING


@dataclass(frozen=True, kw_only=True)
class Setting:
    """What :func:`setting` records besides the default.

    ``help``: one sentence or two, in the library's words (the CLI shows it as the option's help).
    ``minimum``/``maximum``: the inclusive bounds of a number (``min_open``/``max_open``: exclusive);
    for a tuple of numbers, the bounds of each item.  ``choices``: the values a str (or each item of
    a tuple of str) may take.  ``flag``: the CLI's flag where it is not ``--`` + the field name with
    dashes (``"--no-bos"`` for ``prepend_bos``: a bool whose default is True is set off by the flag).
    ``metavar``: the CLI's placeholder of the value.  ``path``: ``"file"`` or ``"dir"`` for a str
    naming a file or a folder (the CLI checks its kind).  ``split=False``: a tuple of str given one
    str holds it as one item (a prompt, which may hold commas), not split at its commas.  ``cli=False``: a library-only setting that no
    command exposes by default (a command may still add it).
    """

    help: str
    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    max_open: bool = False
    choices: tuple[Any, ...] | None = None
    flag: str | None = None
    metavar: str | None = None
    path: str | None = None
    split: bool = True
    cli: bool = True


@dataclass(frozen=True, kw_only=True)
class SettingInfo:
    """One field of a config dataclass as :func:`settings_of` reads it."""

    name: str
    #: the field's type, resolved (``int``, ``tuple[int, ...] | None``)
    type: Any
    #: the default (``default_factory()`` for a mutable one); :data:`REQUIRED` when there is none
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    min_open: bool = False
    max_open: bool = False
    choices: tuple[Any, ...] | None = None
    flag: str | None = None
    metavar: str | None = None
    path: str | None = None
    split: bool = True
    cli: bool = True

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def has_range(self) -> bool:
        return self.minimum is not None or self.maximum is not None

    def range_text(self) -> str:
        """The range in words, as the library's error says it: ``at least 1``, ``above 0``, ``between 0 and 1``."""
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            if self.min_open and self.max_open:
                return f"strictly between {_num(lo)} and {_num(hi)}"
            return f"between {_num(lo)} and {_num(hi)}" + (" (excluded)" if self.min_open or self.max_open else "")
        if lo is not None:
            return f"above {_num(lo)}" if self.min_open else f"at least {_num(lo)}"
        if hi is not None:
            return f"below {_num(hi)}" if self.max_open else f"at most {_num(hi)}"
        return ""


def setting(
    default: Any = REQUIRED,
    *,
    help: str,
    minimum: float | None = None,
    maximum: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    choices: Sequence[Any] | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    path: str | None = None,
    split: bool = True,
    cli: bool = True,
) -> Any:
    """A dataclass field with its default and :class:`Setting` (help, range, choices, CLI flag).

    A mutable default (list, dict, set) becomes a ``default_factory`` returning a copy; a required
    field is ``setting(help=...)`` without a default.  Typed ``Any`` so that ``n: int = setting(1, help=...)``
    type-checks, as ``dataclasses.field`` does.
    """
    meta = Setting(
        help=help,
        minimum=minimum,
        maximum=maximum,
        min_open=min_open,
        max_open=max_open,
        choices=tuple(choices) if choices is not None else None,
        flag=flag,
        metavar=metavar,
        path=path,
        split=split,
        cli=cli,
    )
    if path not in (None, "file", "dir"):
        raise ValueError(f"path={path!r}: 'file' or 'dir'")
    metadata = {KEY: meta}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: copy.copy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


#: The one seed rule: ``0 <= seed <= SEED_MAX`` (``< 2**32``), what numpy's ``SeedSequence`` (no
#: negative), torch's ``manual_seed`` (at most 64 bits) and a 32-bit Mersenne twister all take.
SEED_MAX = 2**32 - 1


def seed_setting(default: int = 0, *, help: str) -> Any:
    """A ``seed`` field under the one seed rule (:data:`SEED_MAX`): the CLI's ``--seed`` gets the
    range as an ``IntRange``; a config's ``__post_init__`` calls :func:`check_seed`, the same bound."""
    return setting(default, help=help, minimum=0, maximum=SEED_MAX)


def check_seed(value: Any, name: str = "seed") -> int:
    """``value`` as an int when it is a seed under the one rule (:data:`SEED_MAX`), else a one-line
    :class:`InputError` naming the parameter: ``seed=-1: must be a whole number between 0 and 4294967295``."""
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not whole or not 0 <= int(value) <= SEED_MAX:
        raise InputError(f"{name}={value!r}: must be a whole number between 0 and {SEED_MAX}", parameter=name, value=value)
    return int(value)


def settings_of(cls: Any) -> tuple[SettingInfo, ...]:
    """Every init field of the config dataclass ``cls`` (a class or an instance), in order:
    name, resolved type, default, and the help, range and choices :func:`setting` gave it (a
    plain field has an empty help, no range and ``cli=False``)."""
    klass = cls if isinstance(cls, type) else type(cls)
    if not dataclasses.is_dataclass(klass):
        raise TypeError(f"{klass.__name__} is not a dataclass")
    hints = typing.get_type_hints(klass)
    out = []
    for f in dataclasses.fields(klass):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        meta: Setting = f.metadata.get(KEY) or Setting(help="", cli=False)  # a plain field: no option of its own
        out.append(
            SettingInfo(
                name=f.name,
                type=hints[f.name],
                default=default,
                help=meta.help,
                minimum=meta.minimum,
                maximum=meta.maximum,
                min_open=meta.min_open,
                max_open=meta.max_open,
                choices=meta.choices,
                flag=meta.flag,
                metavar=meta.metavar,
                path=meta.path,
                split=meta.split,
                cli=meta.cli,
            )
        )
    return tuple(out)


def setting_of(cls: Any, name: str) -> SettingInfo:
    """The :class:`SettingInfo` of one field of ``cls`` (KeyError naming it when there is none)."""
    for info in settings_of(cls):
        if info.name == name:
            return info
    klass = cls if isinstance(cls, type) else type(cls)
    raise KeyError(f"{klass.__name__} has no setting {name!r}")


def check_range(config: Any, name: str) -> None:
    """Refuse a value of field ``name`` of ``config`` outside its range or choices: a one-line
    :class:`InputError` naming the parameter (``n_prompts=0: must be at least 1``).  None passes
    (an optional setting left out); a tuple's items are checked one by one."""
    info = setting_of(config, name)
    value = getattr(config, name)
    for item in value if isinstance(value, (tuple, list)) else (value,):
        _check_item(info, item)


def check_ranges(config: Any) -> None:
    """:func:`check_range` on every field of ``config`` that has a range or choices."""
    for info in settings_of(config):
        if info.has_range or info.choices is not None:
            check_range(config, info.name)


def _check_item(info: SettingInfo, value: Any) -> None:
    if value is None:
        return
    if info.choices is not None and value not in info.choices:
        raise InputError(f"{info.name}={value!r}: choose from {', '.join(str(c) for c in info.choices)}", parameter=info.name, value=value)
    if not info.has_range:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        raise InputError(f"{info.name}={value!r}: must be a number {info.range_text()}", parameter=info.name, value=value)
    x, lo, hi = float(value), info.minimum, info.maximum
    below = lo is not None and (x <= lo if info.min_open else x < lo)
    above = hi is not None and (x >= hi if info.max_open else x > hi)
    if below or above:
        raise InputError(f"{info.name}={value!r}: must be {info.range_text()}", parameter=info.name, value=value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)
