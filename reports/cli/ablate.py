"""``headlens ablate`` and ``headlens prune``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.reports.api.journal import journal_path
from headlens.reports.api.journals import JournalFile
from headlens.reports.cli.common import HEADS, command_line, model_options, parse_layers
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)


def data_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What to measure on: ``--metric``, ``--text-file``, ``--task``, windows, BOS, batch size."""
    fn = click.option(
        "--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Windows, prompts or sentences per forward."
    )(fn)
    fn = click.option(
        "--no-bos",
        is_flag=True,
        help=(
            "Do not prepend BOS (TransformerLens prepends it; Hugging Face and most papers do not); for an encoder, no [CLS]/[SEP] either."
        ),
    )(fn)
    fn = click.option(
        "--n-sentences",
        default=64,
        show_default=True,
        type=click.IntRange(min=1),
        help="--metric embedding: sentences measured (evenly spaced through the text when it holds more).",
    )(fn)
    fn = click.option(
        "--window",
        default=128,
        show_default=True,
        type=click.IntRange(min=2),
        help=(
            "Tokens per evaluation window (BOS included); with --metric embedding, the most tokens per sentence ([CLS]/[SEP] included; "
            "longer ones are cut)."
        ),
    )(fn)
    fn = click.option(
        "--n-windows", default=16, show_default=True, type=click.IntRange(min=1), help="Evaluation windows cut from the text."
    )(fn)
    fn = click.option(
        "--task",
        "task_file",
        default=None,
        type=click.Path(dir_okay=False),
        help=(
            'JSONL task: {"prompt": ..., "correct": " Mary", "incorrect": " John"} per line (single-token targets); implies --metric '
            "logit-diff."
        ),
    )(fn)
    fn = click.option(
        "--text-file",
        default=None,
        type=click.Path(dir_okay=False),
        help=(
            "Evaluation text for --metric loss or embedding (default: the model's own held-out text when it carries one, as the demo "
            "model does, else the text that ships with headlens, analyses/data/eval_text.txt; the manifest says which and why); "
            "for embedding it is cut into sentences (at line ends and after . ! ?), one item each."
        ),
    )(fn)
    fn = click.option(
        "--metric",
        type=click.Choice(["loss", "logit-diff", "embedding"]),
        default=None,
        help="loss: next-token cross-entropy on text windows (default); logit-diff: logit(correct) - logit(incorrect) on --task prompts; "
        "embedding: 1 - cosine between the mean-pooled sentence embedding (last hidden state) and the unablated one, over sentences of "
        "the text "
        "(default when the model's output head is newly initialised or the model is an encoder; reads no output head).",
    )(fn)
    return fn


def _data(
    metric: str | None, text_file: str | None, task_file: str | None, n_windows: int, window: int, n_sentences: int, no_bos: bool
) -> dict[str, Any]:
    """The study's data keywords from the data options."""
    return {
        "metric": metric,
        "text_file": text_file,
        "task_file": task_file,
        "n_windows": n_windows,
        "window": window,
        "n_sentences": n_sentences,
        "prepend_bos": not no_bos,
    }


def _say_resumed(what: str, quiet: bool) -> Callable[[Any], None]:
    def say(journal: Any) -> None:
        if not quiet:
            click.echo(
                f"resuming from {journal.path} ({sum(r.get('kind') == what for r in journal.records)} {what}(s) already done)", err=True
            )

    return say


@click.command("ablate")
@model_options
@click.option(
    "--method",
    type=click.Choice(["zero", "mean", "resample"]),
    default="zero",
    show_default=True,
    help="How an ablated head's z is replaced: zeros, its mean over the evaluation set, or z from another item (seeded).",
)
@data_options
@click.option("--heads", type=HEADS, default=None, help="Heads to ablate, one at a time, as LAYER.HEAD, e.g. 5.1,5.5 (default: all).")
@click.option("--layers", callback=parse_layers, default=None, help="Only heads in these layers, e.g. 0,3.")
@click.option(
    "--mask",
    "mask_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Head-mask JSON (from headlens prune): these heads stay removed throughout; the table is measured on that pruned model.",
)
@click.option(
    "--bootstrap",
    "--n-bootstrap",
    "bootstrap",
    default=1000,
    show_default=True,
    type=click.IntRange(min=0),
    help="Bootstrap resamples of the items for the 95% interval of each delta.",
)
@click.option("--no-attribution", is_flag=True, help="Skip the first-order (gradient) estimate.")
@click.option(
    "--heads-per-forward",
    default=None,
    type=click.IntRange(min=1),
    help="Heads of one layer ablated per forward, one per batch copy (default: as many as fit 2048 tokens).",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the bootstrap and of resample sources.")
@click.option(
    "--out",
    "out_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="Table file: .csv, .parquet or .json. The manifest and heatmap are written next to it.",
)
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace existing output files (and an unfinished run's journal, unless --resume).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def ablate_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    method,
    metric,
    text_file,
    task_file,
    n_windows,
    window,
    n_sentences,
    no_bos,
    batch_size,
    heads,
    layers,
    mask_file,
    bootstrap,
    no_attribution,
    heads_per_forward,
    seed,
    out_file,
    resume,
    overwrite,
    quiet,
):
    """Ablate each head alone and measure the change in loss (or a task's logit difference, or
    the sentence embedding).

    Writes OUT (one row per head: layer, head, method, metric, value, delta, ci_low, ci_high,
    n, attribution), OUT-stem.manifest.json (with the unablated value) and a layer x head
    heatmap of delta (OUT-stem.heatmap.png/.svg).  The sweep journals each result as it is
    computed; after an interruption, --resume finishes it with an identical table.

    A model whose output head was newly initialised (e.g. all-MiniLM-L6-v2, a BertModel booted
    as BertForMaskedLM) or an encoder is measured by the embedding change; loss and logit
    difference are refused when the head is new.
    """
    from headlens.analyses.ablation.study import AblationConfig
    from headlens.reports.api.ablate import AblationResult, ablate
    from headlens.reports.render.tables import check_table_path

    out = Path(out_file)
    check_table_path(out)
    journal = JournalFile(journal_path(out), "ablate", resume=resume, overwrite=overwrite, on_resume=_say_resumed("head", quiet))
    config = AblationConfig(
        method=method,
        heads=heads,
        layers=layers,
        batch_size=batch_size,
        heads_per_forward=heads_per_forward,
        n_bootstrap=bootstrap,
        seed=seed,
        attribution=not no_attribution,
    )
    data = _data(metric, text_file, task_file, n_windows, window, n_sentences, no_bos)
    for path in (out, *AblationResult.sidecars(out).values()):
        check_out_file(path, overwrite=overwrite)
    load = {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
    with progress_bars(quiet=quiet) as stages:
        result = ablate(model, config, mask=mask_file, journal=journal, progress=stages, command=command_line(), **data, **load)
    result.write(out)
    journal.finish()
    for line in result.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    click.echo(f"wrote {out}, {', '.join(p.name for p in result.sidecars(out).values())}")


@click.command("prune")
@model_options
@data_options
@click.option(
    "--step",
    default=0.1,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="Fraction of the remaining heads removed per step.",
)
@click.option(
    "--max-increase",
    default=0.05,
    show_default=True,
    type=click.FloatRange(min=0),
    help=(
        "Largest relative worsening of the metric for the removable fraction (0.05 = 5% of the unablated loss); for --metric embedding "
        "the largest embedding change itself (0.05 = cosine to the unablated embedding at least 0.95)."
    ),
)
@click.option("--random-seeds", default=3, show_default=True, type=click.IntRange(min=0), help="Random pruning orders in the control.")
@click.option(
    "--max-fraction",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 1, min_open=True),
    help="Stop once this fraction of heads is removed.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random orders.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/prune.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def prune_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    metric,
    text_file,
    task_file,
    n_windows,
    window,
    n_sentences,
    no_bos,
    batch_size,
    step,
    max_increase,
    random_seeds,
    max_fraction,
    seed,
    out_dir,
    resume,
    overwrite,
    quiet,
):
    """Prune heads iteratively by gradient importance (Michel et al. 2019) against random orders.

    With the embedding metric (the default when the output head is newly initialised, or for an
    encoder) the gradient is zero in the unablated model, so heads are ranked by their exact
    single-head ablation change instead, and --max-increase is an absolute embedding change.

    Writes OUT/curve.csv (metric, KV-cache bytes saved per 1,000 tokens and the random-order
    mean/spread at each step), OUT/random_orders.csv, OUT/importance.csv, OUT/pruned_heads.json
    (the largest set within --max-increase; give it to ablate --mask), OUT/manifest.json and
    OUT/pruning_curve.png/.svg.
    """
    from headlens.analyses.ablation.pruning import PruneConfig
    from headlens.reports.api.prune import PRUNE_FILES, prune

    out = Path(out_dir)
    journal_file = out / "prune.journal.jsonl"
    if not (out.is_dir() and {p.name for p in out.iterdir()} <= {journal_file.name}):
        check_out_dir(out, overwrite=overwrite)  # a folder holding only a journal is left to Journal (--resume hint)
    journal = JournalFile(journal_file, "prune", resume=resume, overwrite=overwrite, on_resume=_say_resumed("step", quiet))
    config = PruneConfig(
        step=step, max_increase=max_increase, random_seeds=random_seeds, seed=seed, max_fraction=max_fraction, batch_size=batch_size
    )
    data = _data(metric, text_file, task_file, n_windows, window, n_sentences, no_bos)
    load = {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
    with progress_bars(quiet=quiet) as stages:
        result = prune(model, config, journal=journal, progress=stages, command=command_line(), **data, **load)
    result.write(out)
    journal.finish()
    for line in result.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    click.echo(f"wrote {out}/: {', '.join(PRUNE_FILES[:5])}, pruning_curve.png/.svg")


COMMANDS = [ablate_cmd, prune_cmd]
