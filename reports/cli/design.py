"""``headlens kv``, ``headlens gqa`` and ``headlens projections``: the design questions of the seeds, measured."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.probes.errors import InputError
from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.reports.api.journals import JournalFile
from headlens.reports.cli.common import command_line, model_options, parse_csv, parse_ints
from headlens.reports.render.design_tables import text_table
from headlens.reports.render.progress import progress_bars

__all__ = ["COMMANDS", "kv_cmd", "gqa_cmd", "projections_cmd"]

log = logging.getLogger(__name__)


def _text_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Windows per forward.")(fn)
    fn = click.option("--no-bos", is_flag=True, help="Do not prepend BOS to the windows.")(fn)
    fn = click.option(
        "--window", default=128, show_default=True, type=click.IntRange(min=3), help="Tokens per evaluation window (BOS included)."
    )(fn)
    fn = click.option(
        "--n-windows", default=16, show_default=True, type=click.IntRange(min=1), help="Evaluation windows cut from the text."
    )(fn)
    fn = click.option(
        "--text-file", default=None, type=click.Path(dir_okay=False), help="Evaluation text (default: the text that ships with headlens)."
    )(fn)
    return fn


def _out_dir(out_dir: str, journal_name: str, *, overwrite: bool, resume: bool) -> Path:
    """The output folder; one holding the journal of an interrupted run is left to the journal
    (``--resume`` finishes it; without it, the journal refuses and names ``--resume``)."""
    out = Path(out_dir)
    if out.is_dir() and (out / journal_name).is_file() and (resume or not overwrite):
        return out
    if resume:
        log.warning("--resume: %s holds no journal (%s), so there is nothing to resume: starting afresh", out, journal_name)
    return check_out_dir(out, overwrite=overwrite)


def _say_resumed(what: str, kinds: tuple[str, ...], quiet: bool) -> Callable[[Any], None]:
    def say(journal: Any) -> None:
        if not quiet:
            click.echo(
                f"resuming from {journal.path} ({sum(r.get('kind') in kinds for r in journal.records)} {what} already done)", err=True
            )

    return say


def _text(text_file: str | None, n_windows: int, window: int, no_bos: bool) -> dict[str, Any]:
    return {"text_file": text_file, "n_windows": n_windows, "window": window, "prepend_bos": not no_bos}


def _loading(device: str, dtype: str, revision: str | None, allow_new_weights: bool) -> dict[str, Any]:
    return {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}


# ----------------------------------------------------------------------------- kv


@click.command("kv")
@model_options
@click.option("--batch", default=1, show_default=True, type=click.IntRange(min=1), help="Sequences held in the cache at once.")
@click.option("--context", default=None, type=click.IntRange(min=1), help="Tokens per sequence (default: the model's context).")
@click.option(
    "--cache-dtype",
    type=click.Choice(["float32", "bfloat16", "float16", "float8", "int8"]),
    default=None,
    help="Dtype of the cached keys and values (default: the model's --dtype).",
)
@click.option(
    "--mask",
    "mask_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="Head-mask JSON from headlens prune: add the pruned model (a KV head goes when no query head reads it).",
)
@click.option(
    "--out", "out_file", default=None, type=click.Path(dir_okay=False), help="Also write the table as CSV (and OUT-stem.manifest.json)."
)
@click.option("--overwrite", is_flag=True, help="Replace existing output files.")
def kv_cmd(model, device, dtype, revision, allow_new_weights, batch, context, cache_dtype, mask_file, out_file, overwrite):
    """KV-cache bytes per token and for --batch x --context tokens: the model's own attention, GQA
    with each group size, MQA, and the pruned model of --mask; the formula beside each number.

    KV heads are counted, not query heads (exact for grouped-query families); a sliding-window
    layer caches at most its window.
    """
    from headlens.analyses.design.kv import KVConfig
    from headlens.reports.api.design import KVResult, kv
    from headlens.reports.render.tables import check_table_path

    if out_file is not None:
        check_table_path(out_file)
        for path in (out_file, *KVResult.sidecars(out_file).values()):
            check_out_file(path, overwrite=overwrite)
    config = KVConfig(batch=batch, context=context, cache_dtype=cache_dtype)
    result = kv(model, config, mask=mask_file, command=command_line(), **_loading(device, dtype, revision, allow_new_weights))
    for line in result.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    if out_file is not None:
        result.write(out_file)
        click.echo(f"wrote {out_file}")


# ----------------------------------------------------------------------------- gqa


@click.command("gqa")
@model_options
@_text_options
@click.option(
    "--group-sizes",
    callback=parse_ints,
    default=None,
    help="KV heads pooled into one, comma-separated (default: every divisor > 1 of the KV heads, up to MQA).",
)
@click.option(
    "--grouping",
    default="adjacent,similar",
    show_default=True,
    help="adjacent (heads 0-1, 2-3, ...), similar (least scatter of keys and values on the text), or both.",
)
@click.option(
    "--task",
    "task_file",
    default=None,
    type=click.Path(dir_okay=False),
    help="JSONL task (prompt, correct, incorrect): also measure its logit difference.",
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/gqa.journal.jsonl).")
@click.option(
    "--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def gqa_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    text_file,
    n_windows,
    window,
    no_bos,
    batch_size,
    group_sizes,
    grouping,
    task_file,
    out_dir,
    resume,
    overwrite,
    quiet,
):
    """Turn the model into a grouped-query one without retraining (K and V mean-pooled per group,
    Ainslie et al. 2023) and measure loss, KV cache saved and how far each head's pattern moves.

    Writes summary.csv, heads.csv (JS per head), groups.csv, kv.csv, task.csv (with --task),
    gqa_loss_vs_cache.png/.svg, summary.md and manifest.json to OUT.  Each variant is journaled
    as it finishes (OUT/gqa.journal.jsonl); after an interruption, --resume measures only the
    variants left, with the same result.
    """
    from headlens.analyses.design.gqa import GQAConfig
    from headlens.reports.api.design import gqa

    try:
        config = GQAConfig(group_sizes=group_sizes, groupings=tuple(parse_csv(grouping) or ()), batch_size=batch_size)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--group-sizes") from None
    out = _out_dir(out_dir, "gqa.journal.jsonl", overwrite=overwrite, resume=resume)
    journal = JournalFile(
        out / "gqa.journal.jsonl", "gqa", resume=resume, overwrite=overwrite, on_resume=_say_resumed("variant(s)", ("gqa_variant",), quiet)
    )
    with progress_bars("gqa", quiet=quiet) as progress:
        res = gqa(
            model,
            config,
            task_file=task_file,
            journal=journal,
            progress=progress,
            command=command_line(),
            **_text(text_file, n_windows, window, no_bos),
            **_loading(device, dtype, revision, allow_new_weights),
        )
    res.write(out)
    journal.finish()
    for line in res.findings().lines:  # the notebook view's lines (one wording); fewer than 10 windows: no finding
        click.echo(line)
    if res.task is not None:
        click.echo(f"task {task_file} ({res.manifest['gqa']['task']['n_prompts']} prompts):")
        click.echo(text_table(res.task))
    click.echo(f"wrote {out}")


# ----------------------------------------------------------------------------- projections


@click.command("projections")
@model_options
@_text_options
@click.option(
    "--kinds",
    default="q=k,v=k,q=k=v",
    show_default=True,
    help="Knockouts: q=k (queries from the key projection), v=k (values from it), q=k=v.",
)
@click.option("--layers", callback=parse_ints, default=None, help="Only these layers, e.g. 0,3 (default: all).")
@click.option("--per-head", is_flag=True, help="Also knock out each head alone (loss only).")
@click.option("--no-roles", is_flag=True, help="Skip the census under each knockout.")
@click.option(
    "--n-prompts", default=32, show_default=True, type=click.IntRange(min=2), help="Census prompts per stimulus set under each knockout."
)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/projections.journal.jsonl).")
@click.option(
    "--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def projections_cmd(
    model,
    device,
    dtype,
    revision,
    allow_new_weights,
    text_file,
    n_windows,
    window,
    no_bos,
    batch_size,
    kinds,
    layers,
    per_head,
    no_roles,
    n_prompts,
    out_dir,
    resume,
    overwrite,
    quiet,
):
    """Tie one attention projection to another in each layer (and head) and measure what breaks:
    the loss, and each head's roles on the census.

    Writes losses.csv, role_changes.csv and census_scores.csv (unless --no-roles),
    knockout.png/.svg, summary.md and manifest.json to OUT.  A family whose hooks cannot carry
    a knockout is refused (exit 2) with the reason.  Each knockout (and each census under one)
    is journaled as it finishes (OUT/projections.journal.jsonl); after an interruption,
    --resume runs only what is left, with the same result.
    """
    from headlens.analyses.design.projections import ProjectionConfig
    from headlens.reports.api.design import projections

    out = _out_dir(out_dir, "projections.journal.jsonl", overwrite=overwrite, resume=resume)
    config = ProjectionConfig(kinds=tuple(parse_csv(kinds) or ()), layers=layers, per_head=per_head, batch_size=batch_size)
    journal = JournalFile(
        out / "projections.journal.jsonl",
        "projections",
        resume=resume,
        overwrite=overwrite,
        on_resume=_say_resumed("knockout(s) and census run(s)", ("knockout", "knockout_census"), quiet),
    )
    with progress_bars("projections", quiet=quiet) as progress:
        res = projections(
            model, config, roles=not no_roles, n_prompts=n_prompts, journal=journal, progress=progress, command=command_line(),
            **_text(text_file, n_windows, window, no_bos), **_loading(device, dtype, revision, allow_new_weights),
        )  # fmt: skip
    res.write(out)
    journal.finish()
    for line in res.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    click.echo(f"wrote {out}")


COMMANDS = [kv_cmd, gqa_cmd, projections_cmd]
