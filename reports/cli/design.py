"""``headlens kv``, ``headlens gqa`` and ``headlens projections``: the design questions of the seeds, measured."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.analyses.design.config import GQAConfig, KnockoutRoles, KVConfig, ProjectionConfig
from headlens.analyses.measure.spec import EvalSpec
from headlens.probes.errors import InputError
from headlens.probes.outputs import check_out_dir, check_out_file
from headlens.probes.settings import settings_of
from headlens.reports.api.journals import JournalFile
from headlens.reports.cli.common import command_line, model_options
from headlens.reports.cli.options import config_from, config_options
from headlens.reports.render.design_tables import text_table
from headlens.reports.render.progress import progress_bars

__all__ = ["COMMANDS", "kv_cmd", "gqa_cmd", "projections_cmd"]

log = logging.getLogger(__name__)

#: ``gqa --task``: :class:`EvalSpec`'s ``task_file``, which gqa measures beside the loss.
GQA_TASK_HELP = "JSONL task (prompt, correct, incorrect): also measure its logit difference."


#: The text the loss is measured on: :class:`EvalSpec`'s fields that ``gqa`` and ``projections`` expose.
TEXT_OPTIONS = ("text_file", "n_windows", "window", "prepend_bos")
#: ``--window`` of ``gqa`` and ``projections``: at least 3 tokens (ablate's and prune's: 2).
WINDOW_RANGE = click.IntRange(min=3)


def _text_options(config: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--text-file``, ``--n-windows``, ``--window``, ``--no-bos`` (:class:`EvalSpec`'s fields), then ``config``'s ``--batch-size``."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = config_options(config, ("batch_size",))(fn)
        return config_options(EvalSpec, TEXT_OPTIONS, overrides={"window": {"type": WINDOW_RANGE}})(fn)

    return decorate


def _text(settings: dict[str, Any]) -> dict[str, Any]:
    """The study's text keywords taken out of a command's settings."""
    return {name: settings.pop(name) for name in TEXT_OPTIONS}


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


def _loading(device: str, dtype: str, revision: str | None, allow_new_weights: bool) -> dict[str, Any]:
    return {"device": device, "dtype": dtype, "revision": revision, "allow_new_weights": allow_new_weights}


# ----------------------------------------------------------------------------- kv


@click.command("kv")
@model_options
@config_options(KVConfig)
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
def kv_cmd(model, device, dtype, revision, allow_new_weights, mask_file, out_file, overwrite, **settings):
    """KV-cache bytes per token and for --batch x --context tokens: the model's own attention, GQA
    with each group size, MQA, and the pruned model of --mask; the formula beside each number.

    KV heads are counted, not query heads (exact for grouped-query families); a sliding-window
    layer caches at most its window.
    """
    from headlens.reports.api.design import KVResult, kv
    from headlens.reports.render.tables import check_table_path

    if out_file is not None:
        check_table_path(out_file)
        for path in (out_file, *KVResult.sidecars(out_file).values()):
            check_out_file(path, overwrite=overwrite)
    config = config_from(KVConfig, settings)
    result = kv(model, config, mask=mask_file, command=command_line(), **_loading(device, dtype, revision, allow_new_weights))
    for line in result.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    if out_file is not None:
        result.write(out_file)
        click.echo(f"wrote {out_file}")


# ----------------------------------------------------------------------------- gqa


@click.command("gqa")
@model_options
@_text_options(GQAConfig)
@config_options(GQAConfig, ("group_sizes", "groupings"))
@config_options(EvalSpec, ("task_file",), overrides={"task_file": {"help": GQA_TASK_HELP}})
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/gqa.journal.jsonl).")
@click.option(
    "--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def gqa_cmd(model, device, dtype, revision, allow_new_weights, out_dir, resume, overwrite, quiet, **settings):
    """Turn the model into a grouped-query one without retraining (K and V mean-pooled per group,
    Ainslie et al. 2023) and measure loss, KV cache saved and how far each head's pattern moves.

    Writes summary.csv, heads.csv (JS per head), groups.csv, kv.csv, task.csv (with --task),
    gqa_loss_vs_cache.png/.svg, summary.md and manifest.json to OUT.  Each variant is journaled
    as it finishes (OUT/gqa.journal.jsonl); after an interruption, --resume measures only the
    variants left, with the same result.
    """
    from headlens.reports.api.design import gqa

    text = _text(settings)
    task_file = settings.pop("task_file")
    try:
        config = config_from(GQAConfig, settings)
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
            **text,
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
@_text_options(ProjectionConfig)
@config_options(ProjectionConfig, ("kinds", "layers", "per_head"))
@config_options(KnockoutRoles)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/projections.journal.jsonl).")
@click.option(
    "--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume)."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def projections_cmd(model, device, dtype, revision, allow_new_weights, out_dir, resume, overwrite, quiet, **settings):
    """Tie one attention projection to another in each layer (and head) and measure what breaks:
    the loss, and each head's roles on the census.

    Writes losses.csv, role_changes.csv and census_scores.csv (unless --no-roles),
    knockout.png/.svg, summary.md and manifest.json to OUT.  A family whose hooks cannot carry
    a knockout is refused (exit 2) with the reason.  Each knockout (and each census under one)
    is journaled as it finishes (OUT/projections.journal.jsonl); after an interruption,
    --resume runs only what is left, with the same result.
    """
    from headlens.reports.api.design import projections

    out = _out_dir(out_dir, "projections.journal.jsonl", overwrite=overwrite, resume=resume)
    text = _text(settings)
    config = config_from(ProjectionConfig, settings)
    roles = {info.name: settings[info.name] for info in settings_of(KnockoutRoles)}
    journal = JournalFile(
        out / "projections.journal.jsonl",
        "projections",
        resume=resume,
        overwrite=overwrite,
        on_resume=_say_resumed("knockout(s) and census run(s)", ("knockout", "knockout_census"), quiet),
    )
    with progress_bars("projections", quiet=quiet) as progress:
        res = projections(
            model, config, journal=journal, progress=progress, command=command_line(),
            **roles, **text, **_loading(device, dtype, revision, allow_new_weights),
        )  # fmt: skip
    res.write(out)
    journal.finish()
    for line in res.findings().lines:  # the notebook view's lines (one wording)
        click.echo(line)
    click.echo(f"wrote {out}")


COMMANDS = [kv_cmd, gqa_cmd, projections_cmd]
