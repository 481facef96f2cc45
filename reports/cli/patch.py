"""``headlens patch``: activation patching per head, path patching, attribution patching and direct logit attribution."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import HEADS, command_line, model_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)

#: The built-in tasks of ``--builtin``: :data:`headlens.reports.api.patch.BUILTINS`, written out so that
#: ``headlens patch --help`` imports no study (tests/reports/cli/test_startup.py checks the two are equal).
BUILTIN_TASKS = ("induction", "names", "referent")


@click.command("patch")
@model_options
@click.option(
    "--task",
    "task_file",
    default=None,
    type=click.Path(dir_okay=False),
    help=(
        'JSONL pairs: {"clean": ..., "corrupt": ..., "correct": " Mary", "incorrect": " John"} per line; clean and corrupt of the same '
        "token length, single-token answers."
    ),
)
@click.option(
    "--builtin",
    type=click.Choice(BUILTIN_TASKS),
    default=None,
    help="A built-in task instead of --task (default: induction): repeated random tokens, an IOI-style name task, or the referent pairs.",
)
@click.option(
    "--n-pairs",
    default=64,
    show_default=True,
    type=int,
    help=(
        "Pairs of a built-in task: at least 2 (the rule a --task file's pairs meet too), at most 1,000,000. Built-in rows are padded "
        "with the tokenizer's pad id (0 when it has none, as GPT-2's), after each row's last real token, where effects are read; "
        "padding is masked out of attention."
    ),
)
@click.option("--heads", type=HEADS, default=None, help="Only these heads (LAYER.HEAD,...); default every head.")
@click.option(
    "--direction",
    type=click.Choice(["both", "denoising", "noising"]),
    default="both",
    show_default=True,
    help="denoising: clean head output into the corrupted run; noising: corrupted into the clean run.",
)
@click.option("--per-position", is_flag=True, help="Patch each position of each head alone (a row per head and position).")
@click.option(
    "--path",
    "path_mode",
    is_flag=True,
    help="Also path patching: every earlier head -> each --receivers head's --receiver-input, other heads frozen at their corrupted value.",
)
@click.option("--receivers", type=HEADS, default=None, help="Receiver heads of path patching, LAYER.HEAD,... (implies --path).")
@click.option(
    "--receiver-input",
    type=click.Choice(["q", "k", "v"]),
    default="k",
    show_default=True,
    help="--path: which input of the receivers is patched.",
)
@click.option(
    "--attribution",
    is_flag=True,
    help=(
        "Also attribution patching (one forward and one backward; a first-order ESTIMATE of denoising), with its agreement with exact "
        "patching."
    ),
)
@click.option("--dla", is_flag=True, help="Also direct logit attribution per head on the clean inputs (decoders).")
@click.option("--no-bos", is_flag=True, help="Do not prepend BOS (for an encoder, no [CLS]/[SEP] either).")
@click.option(
    "--batch-size",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Pairs per forward (each holds one copy per patched head).",
)
@click.option(
    "--n-resamples",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Bootstrap resamples of the pairs for each interval (0: no intervals).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the built-in task and of the bootstrap.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def patch_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    task_file,
    builtin,
    n_pairs,
    heads,
    direction,
    per_position,
    path_mode,
    receivers,
    receiver_input,
    attribution,
    dla,
    no_bos,
    batch_size,
    n_resamples,
    seed,
    out_dir,
    overwrite,
    quiet,
):
    """Which heads carry a task: patch each head's output between clean and corrupted inputs.

    The effect is the logit difference (the embedding metric on encoders) normalised to
    0 = corrupted .. 1 = clean, with 95% bootstrap intervals over pairs.  Writes patching.csv
    (layer, head, denoising and noising with intervals), path_patching.csv with --path,
    heatmaps and manifest.json to --out.
    """
    from headlens.analyses.patching.activation import PatchConfig
    from headlens.reports.api.patch import patch
    from headlens.reports.render.figures.common import figures_text
    from headlens.reports.render.patching_tables import patch_lines

    if path_mode and not receivers:
        raise click.UsageError("--path needs --receivers LAYER.HEAD,...")
    # --receivers alone runs path patching, as headlens.patch(receivers=...) does (the library has no
    # path switch: receivers= is it); --path only says so explicitly
    directions = ("denoising", "noising") if direction == "both" else (direction,)
    out = check_out_dir(out_dir, overwrite=overwrite)
    config = PatchConfig(
        directions=directions, per_position=per_position, heads=heads, batch_size=batch_size, n_resamples=n_resamples, seed=seed
    )
    with progress_bars("patch", quiet=quiet) as progress:
        result = patch(
            model,
            config,
            task=task_file,
            builtin=builtin,
            n_pairs=n_pairs,
            receivers=receivers,
            receiver_input=receiver_input,
            attribution=attribution,
            dla=dla,
            prepend_bos=not no_bos,
            progress=progress,
            command=command_line(),
            device=device,
            dtype=dtype,
            revision=revision,
            allow_new_weights=allow_new_weights,
        )
    result.write(out)
    for line in patch_lines(result):
        click.echo(line)
    files = result.file_names()
    tables, figures = [f for f in files if f.endswith(".csv")], [f for f in files if not f.endswith(".csv")]
    click.echo(f"wrote {', '.join(tables)}, {figures_text(figures)} and manifest.json to {Path(out)}")


COMMANDS = [patch_cmd]
