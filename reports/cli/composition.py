"""``headlens composition``: weight-based Q-, K- and V-composition between heads beside a random baseline, and OV copying scores.

Module level is light (click, the CLI's light modules and the light config module); the study is imported when the command runs.
The options are generated from :class:`~headlens.analyses.circuits.config.CompositionConfig`'s fields.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from headlens.analyses.circuits.config import MODES, CompositionConfig
from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import command_line, echo_findings, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

__all__ = ["composition_cmd", "MODES"]


@click.command("composition")
@model_options
@config_options(CompositionConfig)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def composition_cmd(model, device, dtype, revision, allow_new_weights, out_dir, overwrite, quiet, **settings):
    """Which heads compose, from the weights alone (no data): Q-, K- and V-composition of every
    earlier head into every later one, ||W_OV^A M_B||_F / (||W_OV^A||_F ||M_B||_F), beside the same
    score for random matrices of the same shapes, and each head's OV copying score.

    Writes composition.csv, baseline.csv, copying.csv, one heatmap per mode and manifest.json to --out.
    """
    from headlens.reports.api.composition import composition

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = config_from(CompositionConfig, settings)
    with progress_bars("composition", quiet=quiet) as progress:
        result = composition(
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
    click.echo(f"wrote {', '.join(f'{n}.csv' for n in result.tables)}, heatmaps and manifest.json to {Path(out)}")


COMMANDS = [composition_cmd]
