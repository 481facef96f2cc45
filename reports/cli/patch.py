"""``headlens patch``: activation patching per head, path patching, attribution patching and direct logit attribution."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from headlens.reports.cli.common import HEADS, model_options
from headlens.reports.models import named_models
from headlens.reports.progress import progress_bars

log = logging.getLogger(__name__)

BUILTINS = ("induction", "names", "referent")


def _load(model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False):
    from headlens.probes.config import ModelConfig
    from headlens.probes.loading import load_model

    return load_model(ModelConfig(model=model, device=device, dtype=dtype, revision=revision, allow_new_weights=allow_new_weights), named=named_models())


@click.command("patch")
@model_options
@click.option("--task", "task_file", default=None, type=click.Path(dir_okay=False), help='JSONL pairs: {"clean": ..., "corrupt": ..., "correct": " Mary", "incorrect": " John"} per line; clean and corrupt of the same token length, single-token answers.')
@click.option("--builtin", type=click.Choice(BUILTINS), default=None, help="A built-in task instead of --task (default: induction): repeated random tokens, an IOI-style name task, or the referent pairs.")
@click.option("--n-pairs", default=64, show_default=True, type=click.IntRange(min=2), help="Pairs of a built-in task.")
@click.option("--heads", type=HEADS, default=None, help="Only these heads (LAYER.HEAD,...); default every head.")
@click.option("--direction", type=click.Choice(["both", "denoising", "noising"]), default="both", show_default=True, help="denoising: clean head output into the corrupted run; noising: corrupted into the clean run.")
@click.option("--per-position", is_flag=True, help="Patch each position of each head alone (a row per head and position).")
@click.option("--path", "path_mode", is_flag=True, help="Also path patching: every earlier head -> each --receivers head's --receiver-input, other heads frozen at their corrupted value.")
@click.option("--receivers", type=HEADS, default=None, help="--path: receiver heads, LAYER.HEAD,...")
@click.option("--receiver-input", type=click.Choice(["q", "k", "v"]), default="k", show_default=True, help="--path: which input of the receivers is patched.")
@click.option("--attribution", is_flag=True, help="Also attribution patching (one forward and one backward; a first-order ESTIMATE of denoising), with its agreement with exact patching.")
@click.option("--dla", is_flag=True, help="Also direct logit attribution per head on the clean inputs (decoders).")
@click.option("--no-bos", is_flag=True, help="Do not prepend BOS (for an encoder, no [CLS]/[SEP] either).")
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Pairs per forward (each holds one copy per patched head).")
@click.option("--n-resamples", default=1000, show_default=True, type=click.IntRange(min=0), help="Bootstrap resamples of the pairs for each interval (0: no intervals).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the built-in task and of the bootstrap.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder (must be empty unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Write into a non-empty --out folder, replacing its files.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
def patch_cmd(model, device, dtype, revision, allow_new_weights, task_file, builtin, n_pairs, heads, direction, per_position, path_mode, receivers, receiver_input, attribution, dla, no_bos, batch_size, n_resamples, seed, out_dir, overwrite, quiet):
    """Which heads carry a task: patch each head's output between clean and corrupted inputs.

    The effect is the logit difference (the embedding metric on encoders) normalised to
    0 = corrupted .. 1 = clean, with 95% bootstrap intervals over pairs.  Writes patching.csv
    (layer, head, denoising and noising with intervals), path_patching.csv with --path,
    heatmaps and manifest.json to --out.
    """
    from headlens.analyses.patching.activation import PatchConfig, patch_heads
    from headlens.analyses.patching.builtin import builtin_task
    from headlens.analyses.patching.pairs import pair_task
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import check_out_dir, write_json
    from headlens.reports import patching_tables as pt
    from headlens.reports.figures.common import figures_text
    from headlens.reports.figures.patching import path_heatmap, patching_heatmaps

    if task_file is not None and builtin is not None:
        raise click.UsageError("give either --task FILE or --builtin NAME, not both")
    if path_mode and not receivers:
        raise click.UsageError("--path needs --receivers LAYER.HEAD,...")
    if receivers and not path_mode:
        raise click.UsageError("--receivers is for --path")
    out = check_out_dir(out_dir, overwrite=overwrite)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    prepend_bos = not no_bos
    if path_mode:
        from headlens.analyses.patching.path import check_receivers

        check_receivers(loaded, receivers)  # before any forward
    if task_file is not None:
        task = pair_task(loaded, task_file, prepend_bos=prepend_bos)
    else:
        task = builtin_task(loaded, builtin or "induction", n=n_pairs, seed=seed, prepend_bos=prepend_bos)
    directions = ("denoising", "noising") if direction == "both" else (direction,)
    if attribution and "denoising" not in directions:
        raise click.UsageError("--attribution estimates denoising: use --direction both or denoising")
    config = PatchConfig(directions=directions, per_position=per_position, heads=heads, batch_size=batch_size, n_resamples=n_resamples, seed=seed)
    tables, extra, figures = {}, {}, []
    lines: list[str] = []
    if dla:  # first: a model it refuses (e.g. a logit softcap) is refused before any patching runs
        from headlens.analyses.patching.dla import direct_logit_attribution

        d = direct_logit_attribution(loaded, task, batch_size=batch_size)
        extra["dla"] = d.info
    with progress_bars("patch", quiet=quiet) as progress:
        result = patch_heads(loaded, task, config, progress=progress)
        table = result.table
        lines.append(pt.gap_line(result.gap))
        extra["patching"] = result.info
        if attribution:
            from headlens.analyses.patching.attribution import agreement, attribution_patch

            est = attribution_patch(loaded, task, batch_size=batch_size, n_resamples=n_resamples, seed=seed, progress=progress)
            if not per_position:
                table = table.merge(est.table.drop(columns=["name"]), on=["layer", "head"], how="left")
                agree = agreement(est.table, result.table)
                extra["attribution"] = {**est.info, "agreement_with_exact": agree}
                lines.append(pt.agreement_line(agree))
            else:
                tables["attribution"] = est.table
                extra["attribution"] = est.info
        tables = {"patching": table, **tables}
        if path_mode:
            from headlens.analyses.patching.path import PathConfig, path_patch

            path = path_patch(loaded, task, PathConfig(receivers=receivers, receiver_input=receiver_input, batch_size=batch_size, n_resamples=n_resamples, seed=seed), progress=progress)
            tables["path_patching"] = path.table
            extra["path_patching"] = path.info
        if dla:
            tables["dla"] = d.table
    written = pt.write_tables(tables, out)
    if result.gap.defined:
        cols = [c for c in ("denoising", "noising", "attribution") if c in table]
        figures += patching_heatmaps(table, out, n_layers=loaded.n_layers, n_heads=loaded.n_heads, columns=cols)
        if path_mode:
            figures += path_heatmap(tables["path_patching"], out)
    manifest = build_manifest(
        model=loaded, command=["headlens", *sys.argv[1:]], seed=seed, prepend_bos=prepend_bos, configs={"patch": config},
        extra={**extra, "task_file": task_file, "files": sorted(p.name for p in [*written, *figures])},
    )  # fmt: skip
    write_json(out / "manifest.json", manifest)
    for col in directions:
        top = pt.top_lines(table, col)
        if top:
            lines.append(f"strongest {col} heads (effect [95% CI]{'; 1 = the head is not needed' if col == 'noising' else ''}):")
            lines += top
    if path_mode:
        top = pt.path_lines(tables["path_patching"])
        if top:
            lines.append("strongest paths (effect [95% CI]):")
            lines += top
    if dla:
        lines.append("direct logit attribution, largest heads (mean over pairs):")
        lines += pt.dla_lines(tables["dla"])
    for line in lines:
        click.echo(line)
    click.echo(f"wrote {', '.join(p.name for p in written)}, {figures_text(figures)} and manifest.json to {Path(out)}")


COMMANDS = [patch_cmd]
