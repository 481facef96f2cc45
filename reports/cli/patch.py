"""``headlens patch``: activation patching per head, path patching, attribution patching and direct logit attribution."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.analyses.patching.config import BUILTINS, DIRECTIONS, PairSource, PatchConfig, PatchExtras, PathConfig
from headlens.probes.outputs import check_out_dir
from headlens.probes.settings import settings_of
from headlens.reports.cli.common import command_line, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

#: The built-in tasks of ``--builtin`` (:data:`headlens.analyses.patching.config.BUILTINS`).
BUILTIN_TASKS = BUILTINS
#: ``--direction``: one direction, or both.
DIRECTION_CHOICES = ("both", *DIRECTIONS)


def _directions(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    """``--direction both`` -> every direction; ``noising`` -> ``("noising",)``."""
    return DIRECTIONS if value == "both" else (value,)


def pair_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Which pairs a run reads: ``--task``, ``--builtin``, ``--n-pairs`` (:class:`PairSource`'s fields;
    ``--no-bos`` is added where each command lists it)."""
    return config_options(PairSource, ("task", "builtin", "n_pairs"))(fn)


@click.command("patch")
@model_options
@pair_options
@config_options(
    PatchConfig,
    ("heads", "directions", "per_position"),
    rename={"directions": "--direction"},
    overrides={"directions": {"type": click.Choice(DIRECTION_CHOICES), "default": "both", "show_default": True, "callback": _directions}},
)
@config_options(PathConfig, ("receivers", "receiver_input"), overrides={"receivers": {"required": False}})
@config_options(PatchExtras)
@config_options(PairSource, ("prepend_bos",))
@config_options(PatchConfig, ("batch_size", "n_resamples", "seed"))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def patch_cmd(model, device, dtype, revision, allow_new_weights, out_dir, overwrite, quiet, **settings):
    """Which heads carry a task: patch each head's output between clean and corrupted inputs.

    The effect is the logit difference (the embedding metric on encoders) normalised to
    0 = corrupted .. 1 = clean, with 95% bootstrap intervals over pairs.  Writes patching.csv
    (layer, head, denoising and noising with intervals), path_patching.csv with --path,
    heatmaps and manifest.json to --out.
    """
    from headlens.reports.api.patch import patch
    from headlens.reports.render.figures.common import figures_text

    if settings["path"] and not settings["receivers"]:
        raise click.UsageError("--path needs --receivers LAYER.HEAD,...")
    # --receivers alone runs path patching, as headlens.patch(receivers=...) does; --path (path=) says so explicitly
    out = check_out_dir(out_dir, overwrite=overwrite)
    config = config_from(PatchConfig, settings)
    own = {info.name for info in settings_of(PatchConfig)}
    others = {k: v for k, v in settings.items() if k not in own}
    load = {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
    with progress_bars("patch", quiet=quiet) as progress:
        result = patch(model, config, progress=progress, command=command_line(), **others, **load)
    result.write(out)
    for line in result.findings().lines:  # patch_lines of its runs
        click.echo(line)
    files = result.file_names()
    tables, figures = [f for f in files if f.endswith(".csv")], [f for f in files if not f.endswith(".csv")]
    click.echo(f"wrote {', '.join(tables)}, {figures_text(figures)} and manifest.json to {Path(out)}")


COMMANDS = [patch_cmd]
