"""``headlens kv``, ``headlens gqa`` and ``headlens projections``: the design questions of the seeds, measured."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from headlens.reports.cli.common import model_options, parse_csv, parse_ints
from headlens.reports.design_tables import gqa_markdown, gqa_reading, knockout_reading, projections_markdown, text_table
from headlens.reports.progress import progress_bars

__all__ = ["COMMANDS", "kv_cmd", "gqa_cmd", "projections_cmd"]

log = logging.getLogger(__name__)


def _load(model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False) -> Any:
    from headlens.probes.config import ModelConfig
    from headlens.probes.loading import load_model
    from headlens.reports.models import named_models

    return load_model(ModelConfig(model=model, device=device, dtype=dtype, revision=revision, allow_new_weights=allow_new_weights), named=named_models())


def _text_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Windows per forward.")(fn)
    fn = click.option("--no-bos", is_flag=True, help="Do not prepend BOS to the windows.")(fn)
    fn = click.option("--window", default=128, show_default=True, type=click.IntRange(min=3), help="Tokens per evaluation window (BOS included).")(fn)
    fn = click.option("--n-windows", default=16, show_default=True, type=click.IntRange(min=1), help="Evaluation windows cut from the text.")(fn)
    fn = click.option("--text-file", default=None, type=click.Path(dir_okay=False), help="Evaluation text (default: the text that ships with headlens).")(fn)
    return fn


def _text_set(loaded: Any, text_file: str | None, *, n_windows: int, window: int, no_bos: bool) -> Any:
    from headlens.analyses.ablation.evalset import text_eval_set
    from headlens.analyses.ablation.metrics import check_metric
    from headlens.analyses.stimuli import eval_text
    from headlens.reports.cli.ablate import read_text_file

    check_metric(loaded, "loss")
    text, label = (eval_text(), "built-in evaluation text") if text_file is None else (read_text_file(text_file), f"--text-file {text_file}")
    return text_eval_set(loaded.tokenizer, text, n_windows=n_windows, window=window, prepend_bos=not no_bos, n_ctx=loaded.n_ctx, source=label, frame=loaded.frame(not no_bos))


def _out_dir(out_dir: str, journal_name: str, *, overwrite: bool, resume: bool) -> Path:
    """The output folder; one holding the journal of an interrupted run is left to the journal
    (``--resume`` finishes it; without it, the journal refuses and names ``--resume``)."""
    from headlens.probes.outputs import check_out_dir

    out = Path(out_dir)
    if out.is_dir() and (out / journal_name).is_file() and (resume or not overwrite):
        return out
    if resume:
        log.warning("--resume: %s holds no journal (%s), so there is nothing to resume: starting afresh", out, journal_name)
    return check_out_dir(out, overwrite=overwrite)


def _with_basis(markdown: str, data: Any) -> str:
    """``markdown`` with the line saying what the loss is measured on after its title."""
    title, sep, rest = markdown.partition("\n\n")
    return f"{title}{sep}Loss on {data.basis()}.\n\n{rest}" if sep else f"{markdown}\nLoss on {data.basis()}.\n"


def _journal(out: Path, name: str, loaded: Any, data: Any, configs: dict[str, Any], *, resume: bool, overwrite: bool) -> Any:
    from headlens.reports.cli.ablate import _model_key
    from headlens.reports.journal import Journal

    key = {"model": _model_key(loaded), "data": data.describe(), **{k: asdict(v) for k, v in configs.items()}}
    return Journal(out / f"{name}.journal.jsonl", name, key, resume=resume, overwrite=overwrite)


def _say_resumed(journal: Any, what: str, kinds: tuple[str, ...], quiet: bool) -> None:
    if journal.resumed and not quiet:
        n = sum(r.get("kind") in kinds for r in journal.records)
        click.echo(f"resuming from {journal.path} ({n} {what} already done)", err=True)


def _write_csvs(tables: dict[str, Any], out: Path) -> dict[str, str]:
    from headlens.probes.outputs import atomic_write

    files = {}
    for name, table in tables.items():
        if table is not None:
            files[name] = str(atomic_write(out / f"{name}.csv", lambda p, t=table: t.to_csv(p, index=False)))
    return files


# ----------------------------------------------------------------------------- kv


@click.command("kv")
@model_options
@click.option("--batch", default=1, show_default=True, type=click.IntRange(min=1), help="Sequences held in the cache at once.")
@click.option("--context", default=None, type=click.IntRange(min=1), help="Tokens per sequence (default: the model's context).")
@click.option("--cache-dtype", type=click.Choice(["float32", "bfloat16", "float16", "float8", "int8"]), default=None, help="Dtype of the cached keys and values (default: the model's --dtype).")
@click.option("--mask", "mask_file", default=None, type=click.Path(dir_okay=False), help="Head-mask JSON from headlens prune: add the pruned model (a KV head goes when no query head reads it).")
@click.option("--out", "out_file", default=None, type=click.Path(dir_okay=False), help="Also write the table as CSV (and OUT-stem.manifest.json).")
@click.option("--overwrite", is_flag=True, help="Replace existing output files.")
def kv_cmd(model, device, dtype, revision, allow_new_weights, batch, context, cache_dtype, mask_file, out_file, overwrite):
    """KV-cache bytes per token and for --batch x --context tokens: the model's own attention, GQA
    with each group size, MQA, and the pruned model of --mask; the formula beside each number.

    KV heads are counted, not query heads (exact for grouped-query families); a sliding-window
    layer caches at most its window.
    """
    from headlens.analyses.ablation.masks import read_mask
    from headlens.analyses.design.kv import KVConfig, check_kv, kv_cache_table
    from headlens.probes.errors import InputError
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import atomic_write, check_out_file, write_json

    if out_file is not None:
        check_out_file(out_file, overwrite=overwrite)
        manifest_file = Path(out_file).with_suffix("").with_name(Path(out_file).stem + ".manifest.json")
        check_out_file(manifest_file, overwrite=overwrite)
    if mask_file is not None:
        read_mask(mask_file)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    mask = read_mask(mask_file, n_layers=loaded.n_layers, n_heads=loaded.n_heads) if mask_file else None
    config = KVConfig(batch=batch, context=context, cache_dtype=cache_dtype)
    try:
        check_kv(loaded, config)
    except InputError as exc:
        if "context" not in exc.fields:
            raise  # an encoder: one line, exit 2
        raise click.BadParameter(str(exc), param_hint="--context") from None
    table = kv_cache_table(loaded, config, removed=mask.heads if mask is not None else None)
    click.echo(f"KV cache of {model} (2 tensors, K and V, per layer, per KV head, per cached token)")
    click.echo(text_table(table.drop(columns=["formula"])))
    for r in table.itertuples(index=False):
        click.echo(f"  {r.variant}: {r.formula}")
    if out_file is not None:
        atomic_write(out_file, lambda p: table.to_csv(p, index=False))
        write_json(manifest_file, build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], configs={"kv": config}, extra={"kv": {"mask": mask_file}}))
        click.echo(f"wrote {out_file}")


# ----------------------------------------------------------------------------- gqa


@click.command("gqa")
@model_options
@_text_options
@click.option("--group-sizes", callback=parse_ints, default=None, help="KV heads pooled into one, comma-separated (default: every divisor > 1 of the KV heads, up to MQA).")
@click.option("--grouping", default="adjacent,similar", show_default=True, help="adjacent (heads 0-1, 2-3, ...), similar (least scatter of keys and values on the text), or both.")
@click.option("--task", "task_file", default=None, type=click.Path(dir_okay=False), help="JSONL task (prompt, correct, incorrect): also measure its logit difference.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/gqa.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def gqa_cmd(model, device, dtype, revision, allow_new_weights, text_file, n_windows, window, no_bos, batch_size, group_sizes, grouping, task_file, out_dir, resume, overwrite, quiet):
    """Turn the model into a grouped-query one without retraining (K and V mean-pooled per group,
    Ainslie et al. 2023) and measure loss, KV cache saved and how far each head's pattern moves.

    Writes summary.csv, heads.csv (JS per head), groups.csv, kv.csv, task.csv (with --task),
    gqa_loss_vs_cache.png/.svg, summary.md and manifest.json to OUT.  Each variant is journaled
    as it finishes (OUT/gqa.journal.jsonl); after an interruption, --resume measures only the
    variants left, with the same result.
    """
    from headlens.analyses.ablation.evalset import read_task, task_eval_set
    from headlens.analyses.design.edits import check_pooling
    from headlens.analyses.design.gqa import GQAConfig, check_gqa, gqa_study
    from headlens.analyses.design.kv import KVConfig, kv_cache_table
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import write_json, write_text
    from headlens.reports.figures.design import loss_vs_cache

    from headlens.probes.errors import InputError

    try:
        config = GQAConfig(group_sizes=group_sizes, groupings=tuple(parse_csv(grouping) or ()), batch_size=batch_size)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--group-sizes") from None
    out = _out_dir(out_dir, "gqa.journal.jsonl", overwrite=overwrite, resume=resume)
    items = read_task(task_file) if task_file else None
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    data = _text_set(loaded, text_file, n_windows=n_windows, window=window, no_bos=no_bos)
    task = task_eval_set(loaded.tokenizer, items, prepend_bos=not no_bos, n_ctx=loaded.n_ctx, source=task_file, frame=loaded.frame(not no_bos)) if items else None
    check_gqa(loaded, config)  # bad input is refused before the journal exists
    check_pooling(loaded)
    journal = _journal(out, "gqa", loaded, data, {"gqa": config}, resume=resume, overwrite=overwrite)
    with journal, progress_bars("gqa", quiet=quiet) as progress:
        _say_resumed(journal, "variant(s)", ("gqa_variant",), quiet)
        res = gqa_study(loaded, data, config, task=task, progress=progress, journal=journal)
    kv = kv_cache_table(loaded, KVConfig())
    files = _write_csvs({"summary": res.summary, "heads": res.heads, "groups": res.groups, "comparison": res.comparison, "kv": kv, "task": res.task}, out)
    figs = loss_vs_cache(res.summary, out / "gqa_loss_vs_cache", title=f"GQA what-if: {model}")
    write_text(out / "summary.md", _with_basis(gqa_markdown(res, model, figure="gqa_loss_vs_cache.png", n_items=len(data)), data))
    extra = {"gqa": {"data": data.describe(), "task": task.describe() if task is not None else None, "resumed": journal.resumed, "files": {**files, "figures": [str(p) for p in figs]}}}
    write_json(out / "manifest.json", build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], prepend_bos=not no_bos, configs={"gqa": config}, extra=extra))
    journal.finish()
    click.echo(f"GQA what-if, loss on {data.basis()}; JS in bits, mean over queries")
    click.echo(text_table(res.summary))
    for line in gqa_reading(res.summary, res.comparison, n_items=len(data)):  # fewer than 10 windows: no finding
        click.echo(line)
    if res.task is not None:
        click.echo(f"task {task_file} ({len(task)} prompts):")
        click.echo(text_table(res.task))
    click.echo(f"wrote {out}")


# ----------------------------------------------------------------------------- projections


@click.command("projections")
@model_options
@_text_options
@click.option("--kinds", default="q=k,v=k,q=k=v", show_default=True, help="Knockouts: q=k (queries from the key projection), v=k (values from it), q=k=v.")
@click.option("--layers", callback=parse_ints, default=None, help="Only these layers, e.g. 0,3 (default: all).")
@click.option("--per-head", is_flag=True, help="Also knock out each head alone (loss only).")
@click.option("--no-roles", is_flag=True, help="Skip the census under each knockout.")
@click.option("--n-prompts", default=32, show_default=True, type=click.IntRange(min=2), help="Census prompts per stimulus set under each knockout.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/projections.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder (and an unfinished run's journal, unless --resume).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def projections_cmd(model, device, dtype, revision, allow_new_weights, text_file, n_windows, window, no_bos, batch_size, kinds, layers, per_head, no_roles, n_prompts, out_dir, resume, overwrite, quiet):
    """Tie one attention projection to another in each layer (and head) and measure what breaks:
    the loss, and each head's roles on the census.

    Writes losses.csv, role_changes.csv and census_scores.csv (unless --no-roles),
    knockout.png/.svg, summary.md and manifest.json to OUT.  A family whose hooks cannot carry
    a knockout is refused (exit 2) with the reason.  Each knockout (and each census under one)
    is journaled as it finishes (OUT/projections.journal.jsonl); after an interruption,
    --resume runs only what is left, with the same result.
    """
    from headlens.analyses.design.projections import ProjectionConfig, knockout_losses, knockout_roles, knockout_targets
    from headlens.analyses.heads.census import CensusConfig
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import write_json, write_text
    from headlens.reports.figures.design import knockout_heatmap

    out = _out_dir(out_dir, "projections.journal.jsonl", overwrite=overwrite, resume=resume)
    config = ProjectionConfig(kinds=tuple(parse_csv(kinds) or ()), layers=layers, per_head=per_head, batch_size=batch_size)
    census = CensusConfig(n_prompts=n_prompts, n_bootstrap=200, prepend_bos=not no_bos)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    data = _text_set(loaded, text_file, n_windows=n_windows, window=window, no_bos=no_bos)
    knockout_targets(loaded, config)  # bad input is refused before the journal exists
    journal = _journal(out, "projections", loaded, data, {"projections": config, "census": census}, resume=resume, overwrite=overwrite)
    with journal, progress_bars("projections", quiet=quiet) as progress:
        _say_resumed(journal, "knockout(s) and census run(s)", ("knockout", "knockout_census"), quiet)
        losses = knockout_losses(loaded, data, config, progress=progress, journal=journal)
        files = _write_csvs({"losses": losses}, out)  # written before the census: kept if it is interrupted
        roles, scores = (None, None) if no_roles else knockout_roles(loaded, census, config, progress=progress, journal=journal)
    files.update(_write_csvs({"role_changes": roles, "census_scores": scores}, out))
    figs = knockout_heatmap(losses, out / "knockout", title=f"projection knockout: {model}")
    write_text(out / "summary.md", _with_basis(projections_markdown(losses, roles, model, figure="knockout.png"), data))
    extra = {"projections": {"data": data.describe(), "resumed": journal.resumed, "files": {**files, "figures": [str(p) for p in figs]}}}
    write_json(out / "manifest.json", build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], prepend_bos=not no_bos, configs={"projections": config, "census": census}, extra=extra))
    journal.finish()
    click.echo(f"projection knockout, loss on {data.basis()}")
    click.echo(text_table(losses))
    for line in knockout_reading(losses, roles):
        click.echo(line)
    click.echo(f"wrote {out}")


COMMANDS = [kv_cmd, gqa_cmd, projections_cmd]
