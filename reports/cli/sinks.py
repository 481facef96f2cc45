"""``headlens sinks``: the attention-sink investigation, and the seed measurement with ``--text``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from headlens.probes.errors import InputError
from headlens.probes.outputs import check_out_dir
from headlens.reports.cli.common import HEADS, command_line, echo_findings, load, model_options, parse_csv, parse_ints
from headlens.reports.render.progress import progress_bars

if TYPE_CHECKING:
    from headlens.reports.api.sinks import SinkLengthsResult, SinksResult


@click.command("sinks")
@model_options
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False), help="Output folder (required unless --text).")
@click.option(
    "--eps", default=0.3, show_default=True, type=float, help="Sink threshold on alpha (Gu et al. 2024), strictly between 0 and 1."
)
@click.option(
    "--window",
    default=64,
    show_default=True,
    type=int,
    help="Tokens per census sequence, BOS (an encoder's [CLS] and [SEP]) included (Gu et al.: 64).",
)
@click.option(
    "--n-prompts", default=None, type=int, help="Number of sequences (default: every window of the evaluation text, at most 100)."
)
@click.option(
    "--bos",
    "bos",
    type=click.Choice(["both", "on", "off"]),
    default="both",
    show_default=True,
    help="Prepend BOS (encoders: wrap in [CLS] ... [SEP]): run both settings, only with, or only without.",
)
@click.option("--no-bos", is_flag=True, help="Same as --bos off (Hugging Face and most papers do not prepend BOS).")
@click.option(
    "--prompts",
    "prompts_file",
    default=None,
    help="Your own texts instead of the evaluation text: one a line, or JSONL with 'text' (each cut to --window tokens).",
)
@click.option(
    "--heads",
    type=HEADS,
    default=None,
    help="Heads whose sink is removed, together and one by one, as LAYER.HEAD,... (default: the sink heads the census finds).",
)
@click.option(
    "--max-single",
    default=8,
    show_default=True,
    type=int,
    help="At most this many heads are also removed one by one (strongest sinks first).",
)
@click.option(
    "--keep-first",
    callback=parse_ints,
    default="1,4",
    show_default=True,
    help="First tokens kept by windowed attention, comma-separated (0, none kept, always runs).",
)
@click.option(
    "--attn-windows",
    callback=parse_ints,
    default=None,
    help="Window sizes for windowed attention, comma-separated (default: 8, 32, 128, 512, up to half of --long-tokens).",
)
@click.option(
    "--long-tokens",
    default=None,
    type=int,
    help="Length of the long sequences for windowed attention (default: the context, at most 1024).",
)
@click.option("--n-long", default=2, show_default=True, type=int, help="Number of long sequences.")
@click.option("--skip", default=None, help="Parts not to run, comma-separated: content, secondary, value_norm, removal, windowed.")
@click.option(
    "--text", "-t", default=None, help="Only the seed measurement on this text: per head, the last token's attention to the first vs 1/n."
)
@click.option("--top", default=20, show_default=True, type=click.IntRange(min=1), help="Heads printed per BOS setting with --text.")
@click.option(
    "--lengths",
    callback=parse_ints,
    default=None,
    help=(
        "Only the long-context study: sink alpha, sink rate and first-token share per head at these sequence lengths, "
        "e.g. 256,1024,4096 (--n-long sequences each, cut from the evaluation text or the --prompts documents concatenated)."
    ),
)
@click.option(
    "--attention",
    type=click.Choice(["auto", "eager", "streaming"]),
    default="auto",
    show_default=True,
    help=(
        "With --lengths: eager reads the patterns, streaming recomputes them from q and k in query blocks inside "
        "the SDPA forward, auto streams when one layer's patterns exceed 2 GiB. The full study is eager."
    ),
)
@click.option("--query-block", default=256, show_default=True, type=click.IntRange(min=1), help="Queries per block on the streaming path.")
@click.option("--batch-size", default=8, show_default=True, type=int)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random first tokens (recorded in the manifest).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def sinks_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    out_dir,
    eps,
    window,
    n_prompts,
    bos,
    no_bos,
    prompts_file,
    heads,
    max_single,
    keep_first,
    attn_windows,
    long_tokens,
    n_long,
    skip,
    text,
    top,
    lengths,
    attention,
    query_block,
    batch_size,
    seed,
    overwrite,
    quiet,
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
    from headlens.analyses.sinks.config import SinkConfig
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
    settings = {"both": (False, True), "on": (True,), "off": (False,)}[bos]
    if lengths is not None:
        if text is not None:
            raise click.UsageError("give either --text or --lengths, not both")
        documents = tuple(read_prompts(prompts_file)) if prompts_file is not None else None
        loaded = load(model, device, dtype, revision, allow_new_weights, seed=seed)
        with progress_bars("sinks", quiet=quiet) as progress:
            result = sinks(
                loaded,
                lengths=lengths,
                eps=eps,
                n_long=n_long,
                bos=settings,
                attention=attention,
                query_block=query_block,
                seed=seed,
                prompts=documents,
                prompts_file=prompts_file,
                progress=progress,
                command=command_line(),
            )
        assert out_dir is not None  # checked above: --out unless --text
        _lengths_done(result, Path(out_dir), overwrite)
        return
    if attention == "streaming":
        raise click.UsageError("--attention streaming needs --lengths: the full sink study reads the attention patterns (eager)")
    if text is not None and not text.strip():
        raise InputError("--text is empty")
    config = SinkConfig(
        eps=eps,
        window=window,
        n_prompts=n_prompts,
        bos=settings,
        prompts=tuple(read_prompts(prompts_file)) if prompts_file is not None else None,
        heads=heads,
        max_single=max_single,
        keep_first=keep_first if keep_first is not None else (),
        attn_windows=attn_windows,
        long_tokens=long_tokens,
        n_long=n_long,
        batch_size=batch_size,
        seed=seed,
        skip=tuple(parse_csv(skip) or ()),
    )
    if text is not None:
        _seed_text(model, device, dtype, revision, allow_new_weights, text, settings, seed, top, out_dir)
        return
    loaded = load(model, device, dtype, revision, allow_new_weights, seed=seed)
    with progress_bars("sinks", quiet=quiet) as progress:
        result = sinks(loaded, config, prompts_file=prompts_file, progress=progress, command=command_line())
    assert out_dir is not None  # checked above: --out unless --text
    out = Path(out_dir)
    result.save(out, overwrite=overwrite)
    _sinks_done(result, out)


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
    from headlens.analyses.sinks.seed import seed_tables
    from headlens.probes.manifest import build_manifest
    from headlens.reports.api.sinks import SeedTextResult
    from headlens.reports.render.sinks_tables import seed_text_lines

    loaded = load(model, device, dtype, revision, allow_new_weights, seed=seed)
    table = seed_tables(loaded, text, settings)
    for line in seed_text_lines(table, top):
        click.echo(line)
    if out_dir is not None:
        out = Path(out_dir)
        manifest = build_manifest(
            model=loaded,
            command=command_line(),
            seed=seed,
            prepend_bos=settings[0] if len(settings) == 1 else None,
            extra={"sinks": {"text": text, "bos": list(settings)}},
        )
        SeedTextResult(tables={"seed_text": table}, manifest=manifest).write(out)  # the table, then manifest.json


COMMANDS = [sinks_cmd]
