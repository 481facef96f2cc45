"""``headlens composition``: weight-based Q-, K- and V-composition between heads beside a random baseline, and OV copying scores.

Module level is light (click and the CLI's light modules); the study is imported when the command runs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click

from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import command_line, echo_findings, model_options, parse_csv
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

__all__ = ["composition_cmd", "MODES"]

#: ``--modes``: :data:`headlens.analyses.circuits.composition.MODES`, written out so that ``--help`` imports no analysis.
MODES = ("q", "k", "v")
#: The largest --n-baseline / --n-tokens (:data:`headlens.analyses.circuits.composition.MAX_BASELINE`).
MAX_SAMPLES = 100_000


def _modes(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    items = parse_csv(value) or []
    bad = [m for m in items if m not in MODES]
    if bad or not items or len(set(items)) != len(items):
        raise click.BadParameter(f"{value!r}: give one or more of {', '.join(MODES)}, comma-separated, each once")
    return tuple(items)


@click.command("composition")
@model_options
@click.option("--modes", default="q,k,v", show_default=True, callback=_modes, help="Which compositions: q, k and/or v, comma-separated.")
@click.option(
    "--no-fold-ln",
    is_flag=True,
    help="Score the raw weights; by default the norm gains are folded in and LayerNorm writers centred (TransformerLens' process_weights).",
)
@click.option(
    "--n-baseline",
    default=200,
    show_default=True,
    type=click.IntRange(min=2, max=MAX_SAMPLES),
    help="Random matrix samples per mode for the baseline (mean, sd, 99th percentile).",
)
@click.option(
    "--n-tokens",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0, max=MAX_SAMPLES),
    help="Tokens sampled for the diagonal copying score (0: none).",
)
@click.option("--no-copying", is_flag=True, help="No OV copying scores (they read the unembedding).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the baseline's random matrices and of the token sample.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def composition_cmd(
    model, device, dtype, revision, allow_new_weights, modes, no_fold_ln, n_baseline, n_tokens, no_copying, seed, out_dir, overwrite, quiet
):
    """Which heads compose, from the weights alone (no data): Q-, K- and V-composition of every
    earlier head into every later one, ||W_OV^A M_B||_F / (||W_OV^A||_F ||M_B||_F), beside the same
    score for random matrices of the same shapes, and each head's OV copying score.

    Writes composition.csv, baseline.csv, copying.csv, one heatmap per mode and manifest.json to --out.
    """
    from headlens.analyses.circuits.composition import CompositionConfig
    from headlens.reports.api.composition import composition

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = CompositionConfig(
        modes=modes, fold_ln=not no_fold_ln, n_baseline=n_baseline, n_tokens=n_tokens, copying=not no_copying, seed=seed
    )
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
