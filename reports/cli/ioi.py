"""``headlens ioi``: Wang et al. 2022's IOI head classes, each named by its own evidence.

Module level is light (click, the CLI's light modules and the light config module); the study is imported when the command runs.
The options are generated from :class:`~headlens.analyses.patching.ioi_config.IOIConfig`'s fields.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from headlens.analyses.patching.ioi_config import IOIConfig
from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import command_line, echo_findings, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

__all__ = ["ioi_cmd"]


@click.command("ioi")
@model_options
@config_options(IOIConfig)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def ioi_cmd(model, device, dtype, revision, allow_new_weights, out_dir, overwrite, quiet, **settings):
    """Which heads do what in indirect-object identification (Wang et al. 2022): name movers,
    negative name movers, S-inhibition, induction and duplicate-token heads, each by its own
    evidence (attention, OV copying, direct effect, path patching) with 95% intervals over the
    pairs of the built-in ioi task; a class no head meets prints "none found" and why.

    Writes heads.csv, classes.csv, the path-patching tables, the ioi_heads figure and manifest.json to --out.
    """
    from headlens.reports.api.ioi import ioi

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = config_from(IOIConfig, settings)
    with progress_bars("ioi", quiet=quiet) as progress:
        result = ioi(
            model,
            config,
            progress=progress,
            command=command_line(),
            device=device,
            dtype=dtype,
            revision=revision,
            allow_new_weights=allow_new_weights,
        )
    result.save(out, overwrite=overwrite)
    echo_findings(result)
    click.echo(f"wrote {', '.join(f'{n}.csv' for n in result.tables)}, the ioi_heads figure and manifest.json to {Path(out)}")


COMMANDS = [ioi_cmd]
