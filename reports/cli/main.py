"""The ``headlens`` command line: a thin click layer over the library.

Exit codes: 0 success; 1 a check failed; 2 bad input or usage; 3 model could not be
loaded; 4 output exists or cannot be written; 5 device or dtype not available;
130 interrupted.

The group is lazy (:class:`headlens.reports.cli.lazy.LazyGroup`): :data:`COMMANDS` names each
command's module, imported only when that command is asked for, so ``--help``, ``--version``,
``CMD --help`` and usage errors answer without importing torch.
"""

from __future__ import annotations

from importlib import metadata

import click

from headlens.reports.cli.common import CONTEXT_SETTINGS, setup_logging
from headlens.reports.cli.lazy import LazyGroup

__all__ = ["cli", "main", "COMMANDS"]

#: Every command: its name -> (module, the click command in it).  A new command is one line here;
#: its module imports heavy modules (studies, torch, pandas) inside the command's function
#: (tests/reports/cli/test_startup.py checks that ``headlens CMD --help`` imports no torch).
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("headlens.reports.cli.capture", "capture_cmd"),
    "verify": ("headlens.reports.cli.capture", "verify_cmd"),
    "tiny-model": ("headlens.reports.cli.capture", "tiny_model_cmd"),
    "detect": ("headlens.reports.cli.detect", "detect_cmd"),
    "classify": ("headlens.reports.cli.detect", "classify_cmd"),
    "selftest": ("headlens.reports.cli.detect", "selftest_cmd"),
    "sinks": ("headlens.reports.cli.sinks", "sinks_cmd"),
    "ablate": ("headlens.reports.cli.ablate", "ablate_cmd"),
    "prune": ("headlens.reports.cli.ablate", "prune_cmd"),
    "report": ("headlens.reports.cli.report", "report_cmd"),
    "demo": ("headlens.reports.cli.demo", "demo_group"),
    "sweep": ("headlens.reports.cli.sweep", "sweep_cmd"),
    "kv": ("headlens.reports.cli.design", "kv_cmd"),
    "gqa": ("headlens.reports.cli.design", "gqa_cmd"),
    "projections": ("headlens.reports.cli.design", "projections_cmd"),
    "patch": ("headlens.reports.cli.patch", "patch_cmd"),
    "circuit": ("headlens.reports.cli.circuit", "circuit_cmd"),
    "composition": ("headlens.reports.cli.composition", "composition_cmd"),
    "ioi": ("headlens.reports.cli.ioi", "ioi_cmd"),
    "models": ("headlens.reports.cli.models", "models_cmd"),
    "tracr-model": ("headlens.reports.cli.tracr", "tracr_model_cmd"),
}


def _version() -> str:
    try:
        return metadata.version("headlens")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.version_option(_version(), "--version", "-V", prog_name="headlens")
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


def main() -> None:
    cli.main(prog_name="headlens")


if __name__ == "__main__":
    main()
