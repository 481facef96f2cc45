"""``headlens sinks``: the attention-sink investigation, and the seed measurement with ``--text``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from headlens.analyses.sinks.config import LengthsConfig, SinkConfig
from headlens.probes.errors import InputError
from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import command_line, echo_findings, load, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

if TYPE_CHECKING:
    from headlens.reports.api.sinks import SinkLengthsResult, SinksResult

#: ``--bos both|on|off``: the CLI's words for ``bos=(False, True)``, ``(True,)`` and ``(False,)``.
BOS_SETTINGS = {"both": (False, True), "on": (True,), "off": (False,)}
BOS_OPTION = {"type": click.Choice(list(BOS_SETTINGS)), "default": "both", "show_default": True}


@click.command("sinks")
@model_options
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False), help="Output folder (required unless --text).")
@config_options(SinkConfig, ("eps", "window", "n_prompts", "bos"), overrides={"bos": BOS_OPTION})
@click.option("--no-bos", is_flag=True, help="Same as --bos off (Hugging Face and most papers do not prepend BOS).")
@click.option(
    "--prompts",
    "prompts_file",
    default=None,
    help="Your own texts instead of the evaluation text: one a line, or JSONL with 'text' (each cut to --window tokens).",
)
@config_options(SinkConfig, ("heads", "max_single", "keep_first", "attn_windows", "long_tokens", "n_long", "skip"))
@click.option(
    "--text", "-t", default=None, help="Only the seed measurement on this text: per head, the last token's attention to the first vs 1/n."
)
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=1), help="Heads printed per BOS setting with --text.")
@config_options(LengthsConfig, ("lengths", "attention", "query_block"), overrides={"lengths": {"required": False}})
@config_options(SinkConfig, ("batch_size", "seed"))
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def sinks_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    out_dir,
    bos,
    no_bos,
    prompts_file,
    text,
    top,
    lengths,
    attention,
    query_block,
    overwrite,
    quiet,
    **settings,
):
    """Attention sinks: which heads sink, onto what, position or content, does the sink carry
    anything, and what breaks without it.

    Writes CSV tables (census, sink_rates, sink_rate_by_layer, sink_targets,
    sink_targets_by_layer, content, content_verdicts, secondary_*, value_norm, removal,
    windowed; removal and windowed are not run on encoders), heatmaps and plots (PNG and SVG),
    summary.md and manifest.json to OUT.  With --text, only prints the seed measurement
    (and writes seed_text.csv and manifest.json when --out is given).  With --lengths, only
    the long-context study: sink_lengths.csv (alpha, sink rate, first-token share and
    value-norm share per length, layer and head; on a sliding-window layer both the mean over
    the queries that see the first token and the mean over all queries), sink_lengths.png/.svg
    and manifest.json.
    """
    from headlens.probes.prompts import read_prompts
    from headlens.reports.api.sinks import sinks

    if out_dir is None and text is None:
        raise click.UsageError("give --out DIR (or --text TEXT for the seed measurement alone)")
    if text is not None and prompts_file is not None:
        raise click.UsageError("give either --text or --prompts, not both")
    if out_dir is not None:
        check_out_dir(out_dir, overwrite=overwrite)
    if no_bos:
        if bos == "on":
            raise click.UsageError("--no-bos contradicts --bos on")
        bos = "off"
    bos_settings = BOS_SETTINGS[bos]
    if lengths is not None:
        if text is not None:
            raise click.UsageError("give either --text or --lengths, not both")
        loaded = load(model, device, dtype, revision, allow_new_weights, seed=settings["seed"])
        assert out_dir is not None  # checked above: --out unless --text
        _lengths(loaded, settings, lengths=lengths, bos=bos_settings, attention=attention, query_block=query_block,
                 prompts_file=prompts_file, out=Path(out_dir), overwrite=overwrite, quiet=quiet)  # fmt: skip
        return
    if attention == "streaming":
        raise click.UsageError("--attention streaming needs --lengths: the full sink study reads the attention patterns (eager)")
    if text is not None and not text.strip():
        raise InputError("--text is empty")
    config = config_from(
        SinkConfig, settings, bos=bos_settings, prompts=tuple(read_prompts(prompts_file)) if prompts_file is not None else None
    )
    if text is not None:
        _seed_text(model, device, dtype, revision, allow_new_weights, text, bos_settings, config.seed, top, out_dir)
        return
    loaded = load(model, device, dtype, revision, allow_new_weights, seed=config.seed)
    with progress_bars("sinks", quiet=quiet) as progress:
        result = sinks(loaded, config, prompts_file=prompts_file, progress=progress, command=command_line())
    assert out_dir is not None  # checked above: --out unless --text
    out = Path(out_dir)
    result.save(out, overwrite=overwrite)
    _sinks_done(result, out)


def _lengths(
    loaded: Any,
    settings: dict[str, Any],
    *,
    lengths: Any,
    bos: tuple[bool, ...],
    attention: str,
    query_block: int,
    prompts_file: str | None,
    out: Path,
    overwrite: bool,
    quiet: bool,
) -> None:
    """``sinks --lengths``: the long-context study into ``out``, its lines printed."""
    from headlens.probes.prompts import read_prompts
    from headlens.reports.api.sinks import sinks

    documents = tuple(read_prompts(prompts_file)) if prompts_file is not None else None
    with progress_bars("sinks", quiet=quiet) as progress:
        result = sinks(
            loaded,
            lengths=lengths,
            eps=settings["eps"],
            n_long=settings["n_long"],
            bos=bos,
            attention=attention,
            query_block=query_block,
            seed=settings["seed"],
            prompts=documents,
            prompts_file=prompts_file,
            progress=progress,
            command=command_line(),
        )
    _lengths_done(result, out, overwrite)


def _sinks_done(result: SinksResult, out: Path) -> None:
    """The console lines of the full study."""
    from headlens.reports.render.figures.common import figures_text

    echo_findings(result)  # the notebook view's lines and notes (one wording)
    figures = [out / f"{stem}.{fmt}" for stem in result.figure_names() for fmt in result.figure_formats]
    click.echo(f"wrote {len(result.tables)} tables, {figures_text(figures)}, summary.md and manifest.json to {out}")


def _lengths_done(result: SinkLengthsResult, out: Path, overwrite: bool) -> None:
    """``sinks --lengths``: the files, then the summary lines."""
    from headlens.reports.render.figures.common import figures_text

    result.save(out, overwrite=overwrite)
    for line in result.findings().lines:
        click.echo(line)
    figures = [out / f"sink_lengths.{fmt}" for fmt in result.figure_formats]
    click.echo(f"wrote sink_lengths.csv, {figures_text(figures)} and manifest.json to {out}")


def _seed_text(model, device, dtype, revision, allow_new_weights, text, settings, seed, top, out_dir) -> None:
    """``sinks --text``: per head, the last token's attention to the first vs 1/n (seed_text.csv with --out)."""
    from headlens.reports.api.sinks import seed_text
    from headlens.reports.render.sinks_tables import seed_text_lines

    loaded = load(model, device, dtype, revision, allow_new_weights, seed=seed)
    result = seed_text(loaded, text, bos=settings, seed=seed, command=command_line())
    for line in seed_text_lines(result.table, top):
        click.echo(line)
    if out_dir is not None:
        result.write(Path(out_dir))  # the table, then manifest.json


COMMANDS = [sinks_cmd]
