"""``headlens ablate`` and ``headlens prune``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.analyses.ablation.config import AblationConfig, PruneConfig
from headlens.analyses.measure.spec import EvalSpec
from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.reports.api.journal import journal_path
from headlens.reports.api.journals import JournalFile
from headlens.reports.cli.common import command_line, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.progress import progress_bars

log = logging.getLogger(__name__)


#: What to measure on, in ``--help`` order: :class:`EvalSpec`'s fields that the CLI exposes.
DATA_OPTIONS = ("metric", "text_file", "task_file", "n_windows", "window", "n_sentences", "prepend_bos")


def data_options(config: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What to measure on: ``--metric``, ``--text-file``, ``--task``, windows, sentences, ``--no-bos``
    (:class:`EvalSpec`'s fields), then ``config``'s ``--batch-size``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = config_options(config, ("batch_size",))(fn)
        return config_options(EvalSpec, DATA_OPTIONS)(fn)

    return decorate


def _data(settings: dict[str, Any]) -> dict[str, Any]:
    """The study's data keywords (:class:`EvalSpec`'s fields) taken out of a command's settings."""
    return {name: settings.pop(name) for name in DATA_OPTIONS}


def _say_resumed(what: str, quiet: bool) -> Callable[[Any], None]:
    def say(journal: Any) -> None:
        if not quiet:
            click.echo(
                f"resuming from {journal.path} ({sum(r.get('kind') == what for r in journal.records)} {what}(s) already done)", err=True
            )

    return say


@click.command("ablate")
@model_options
@config_options(AblationConfig, ("method",))
@data_options(AblationConfig)
@config_options(AblationConfig, ("heads", "layers"))
@click.option(
    "--mask",
    "mask_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Head-mask JSON (from headlens prune): these heads stay removed throughout; the table is measured on that pruned model.",
)
@config_options(
    AblationConfig,
    ("n_bootstrap", "attribution", "heads_per_forward", "seed"),
    overrides={"n_bootstrap": {"decls": ("--bootstrap", "--n-bootstrap")}},
)
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
def ablate_cmd(model, device, dtype, revision, allow_new_weights, mask_file, out_file, resume, overwrite, quiet, **settings):
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
    from headlens.reports.api.ablate import AblationResult, ablate
    from headlens.reports.render.tables import check_table_path

    out = Path(out_file)
    check_table_path(out)
    journal = JournalFile(journal_path(out), "ablate", resume=resume, overwrite=overwrite, on_resume=_say_resumed("head", quiet))
    data = _data(settings)
    config = config_from(AblationConfig, settings)
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
@data_options(PruneConfig)
@config_options(PruneConfig, ("step", "max_increase", "random_seeds", "max_fraction", "seed"))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/prune.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def prune_cmd(model, device, dtype, revision, allow_new_weights, out_dir, resume, overwrite, quiet, **settings):
    """Prune heads iteratively by gradient importance (Michel et al. 2019) against random orders.

    With the embedding metric (the default when the output head is newly initialised, or for an
    encoder) the gradient is zero in the unablated model, so heads are ranked by their exact
    single-head ablation change instead, and --max-increase is an absolute embedding change.

    Writes OUT/curve.csv (metric, KV-cache bytes saved per 1,000 tokens and the random-order
    mean/spread at each step), OUT/random_orders.csv, OUT/importance.csv, OUT/pruned_heads.json
    (the largest set within --max-increase; give it to ablate --mask), OUT/manifest.json and
    OUT/pruning_curve.png/.svg.
    """
    from headlens.reports.api.prune import PRUNE_FILES, prune

    out = Path(out_dir)
    journal_file = out / "prune.journal.jsonl"
    if not (out.is_dir() and {p.name for p in out.iterdir()} <= {journal_file.name}):
        check_out_dir(out, overwrite=overwrite)  # a folder holding only a journal is left to Journal (--resume hint)
    journal = JournalFile(journal_file, "prune", resume=resume, overwrite=overwrite, on_resume=_say_resumed("step", quiet))
    data = _data(settings)
    config = config_from(PruneConfig, settings)
    load = {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}
    with progress_bars(quiet=quiet) as stages:
        result = prune(model, config, journal=journal, progress=stages, command=command_line(), **data, **load)
    result.write(out)
    journal.finish()
    for line in result.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    click.echo(f"wrote {out}/: {', '.join(PRUNE_FILES[:5])}, pruning_curve.png/.svg")


COMMANDS = [ablate_cmd, prune_cmd]
