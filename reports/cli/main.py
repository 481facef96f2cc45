"""The ``headlens`` command line: a thin click layer over the library.

Exit codes: 0 success; 1 a check failed; 2 bad input or usage; 3 model could not be
loaded; 4 output exists or cannot be written; 5 device or dtype not available;
130 interrupted.
"""

from __future__ import annotations

import importlib

import click

from headlens.probes.manifest import headlens_version
from headlens.reports.cli.common import CONTEXT_SETTINGS, HeadlensGroup, setup_logging

__all__ = ["cli", "main"]


@click.group(cls=HeadlensGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(headlens_version(), "--version", "-V", prog_name="headlens")
@click.option(
    "--verbose",
    "-v",
    count=True,
    help="More messages on stderr: -v info lines, -vv debug lines (library loading chatter included). "
    "Before the command: headlens -v capture ...",
)
@click.option("--quiet", "-q", count=True, help="Errors only on stderr: no warnings (a command's own -q silences its progress lines).")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: int) -> None:
    """headlens: what each attention head does, which heads matter, and where attention piles up.

    Warnings (e.g. weights missing from a checkpoint) go to stderr as one line each,
    'headlens: warning: ...'.

    Exit codes: 0 ok, 1 check failed, 2 bad input, 3 model not loadable,
    4 output exists or unwritable, 5 device/dtype unavailable, 130 interrupted.
    """
    ctx.call_on_close(setup_logging(verbose - quiet))


#: Modules whose ``COMMANDS`` list is added to the group (one line each).
_COMMAND_MODULES = (
    "headlens.reports.cli.capture",
    "headlens.reports.cli.detect",
    "headlens.reports.cli.sinks",
    "headlens.reports.cli.ablate",
    "headlens.reports.cli.report",
    "headlens.reports.cli.demo",
    "headlens.reports.cli.sweep",
    "headlens.reports.cli.design",
    "headlens.reports.cli.patch",
    "headlens.reports.cli.models",
)


def _register() -> None:
    for name in _COMMAND_MODULES:
        for command in importlib.import_module(name).COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli.main(prog_name="headlens")


if __name__ == "__main__":
    main()
