"""A click group that imports a command's module only when that command is asked for.

``headlens --help``, ``--version``, ``headlens CMD --help`` and usage errors answer without torch,
transformers, pandas or matplotlib: the group knows its commands by name (module, attribute) and
imports a command's module when the command is resolved (to run it, or to print its help).  The
command modules import at module level only light modules (click, the standard library, the CLI's
option sets); what a command runs, it imports inside its function (tests/test_cli_startup.py).

The ``headlens`` console script (``_headlens_cli``) defers the library's package namespaces
(``headlens/__init__`` and the three layers'); it passes, as the context object, a
:class:`CommandStart` whose ``before_command`` completes them once a command's arguments have
parsed and just before its function runs.  In-process callers (``CliRunner``, ``python -m
headlens``) pass nothing and nothing happens.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click

from headlens.reports.cli.common import HeadlensGroup

__all__ = ["LazyGroup", "CommandStart"]


@dataclass(frozen=True)
class CommandStart:
    """The context object of one ``headlens`` run: ``before_command`` runs (once per call it makes
    sure of that itself) right before a command's function, after its arguments have parsed."""

    before_command: Callable[[], None]


class _CommandContext(click.Context):
    """A command's context: before the command's own function runs, the run's
    :class:`CommandStart` (if any) is called; a group's function (``demo``) does not count."""

    def invoke(self, callback: Any, /, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self.command, click.Group) and not isinstance(callback, click.Command):
            start = self.find_object(CommandStart)
            if start is not None:
                start.before_command()
        return super().invoke(callback, *args, **kwargs)


class LazyGroup(HeadlensGroup):
    """A :class:`HeadlensGroup` whose commands are ``name -> (module, attribute)``, imported on first use.

    Commands added the usual way (``@group.command``) work too.  Every command it hands out is a
    shallow copy whose context calls the run's :class:`CommandStart` (the command objects
    themselves are never changed)."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy_commands:
            module, attribute = self.lazy_commands[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise TypeError(f"{module}.{attribute} is not the click command {cmd_name!r}")
        if command is None:
            return None
        started = copy.copy(command)
        started.context_class = _CommandContext
        return started
