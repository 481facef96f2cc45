"""A click group that imports a command's module only when that command is asked for.

``headlens --help``, ``--version``, ``headlens CMD --help`` and usage errors answer without torch,
transformers, pandas or matplotlib: the group knows its commands by name (module, attribute) and
imports a command's module when the command is resolved (to run it, or to print its help).  The
command modules import at module level only light modules (click, the standard library, the CLI's
option sets); what a command runs, it imports inside its function (tests/reports/cli/test_startup.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from headlens.reports.cli.common import HeadlensGroup

__all__ = ["LazyGroup"]


class LazyGroup(HeadlensGroup):
    """A :class:`HeadlensGroup` whose commands are ``name -> (module, attribute)``, imported on first use.

    Commands added the usual way (``@group.command``) work too."""

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
        return command
