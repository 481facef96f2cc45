"""``headlens kv``, ``headlens gqa`` and ``headlens projections``: the design questions of the seeds, measured."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.reports.cli.common import model_options, parse_csv, parse_ints
from headlens.reports.progress import progress_bars

__all__ = ["COMMANDS", "kv_cmd", "gqa_cmd", "projections_cmd", "gqa_markdown", "projections_markdown", "knockout_reading", "design_section_markdown"]

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
    from headlens.analyses.ablation.data import check_metric, text_eval_set
    from headlens.analyses.stimuli import eval_text
    from headlens.reports.cli.ablate import read_text_file

    check_metric(loaded, "loss")
    text, label = (eval_text(), "built-in evaluation text") if text_file is None else (read_text_file(text_file), f"--text-file {text_file}")
    return text_eval_set(loaded.tokenizer, text, n_windows=n_windows, window=window, prepend_bos=not no_bos, n_ctx=loaded.n_ctx, bos_id=loaded.bos_id, source=label)


def _write_csvs(tables: dict[str, Any], out: Path) -> dict[str, str]:
    from headlens.probes.outputs import atomic_write

    files = {}
    for name, table in tables.items():
        if table is not None:
            files[name] = str(atomic_write(out / f"{name}.csv", lambda p, t=table: t.to_csv(p, index=False)))
    return files


def _fmt(table: Any) -> str:
    return table.to_string(index=False, float_format=lambda x: f"{x:.4g}")


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
    from headlens.analyses.design.kv import KVConfig, kv_cache_table
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
    table = kv_cache_table(loaded, config, removed=mask.heads if mask is not None else None)
    click.echo(f"KV cache of {model} (2 tensors, K and V, per layer, per KV head, per cached token)")
    click.echo(_fmt(table.drop(columns=["formula"])))
    for r in table.itertuples(index=False):
        click.echo(f"  {r.variant}: {r.formula}")
    if out_file is not None:
        atomic_write(out_file, lambda p: table.to_csv(p, index=False))
        write_json(manifest_file, build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], configs={"kv": config}, extra={"kv": {"mask": mask_file}}))
        click.echo(f"wrote {out_file}")


# ----------------------------------------------------------------------------- gqa


def gqa_markdown(res: Any, model_name: str, *, figure: str | None = None) -> str:
    """Markdown of a GQA what-if: the loss/cache table, the groups, the heads that move most, the reading."""
    from headlens.reports.markdown import markdown_table

    s = res.summary
    lines = [f"# GQA what-if: {model_name}", "", "K and V of the KV heads in a group mean-pooled in every layer (no retraining); loss on text windows; JS = Jensen-Shannon divergence (bits) between each head's original and pooled attention rows, mean over queries.", ""]
    lines += [markdown_table(s, floatfmt=".4g"), ""]
    if figure:
        lines += [f"![loss vs KV cache]({figure})", ""]
    lines += ["## Groups", "", markdown_table(res.groups), ""]
    top = res.heads.sort_values("js", ascending=False).head(8)
    lines += ["## Heads whose pattern moves most", "", markdown_table(top, floatfmt=".3f"), ""]
    if res.task is not None:
        lines += ["## Task metric", "", markdown_table(res.task, floatfmt=".4g"), ""]
    if res.comparison is not None:
        lines += ["## Similarity vs adjacent grouping (paired over windows)", "", markdown_table(res.comparison, floatfmt=".4f"), ""]
    lines += ["## Reading", "", *_gqa_reading(s, res.comparison), ""]
    return "\n".join(lines)


def _gqa_reading(s: Any, comparison: Any = None) -> list[str]:
    out = []
    comp = {} if comparison is None else {int(r.g): r for r in comparison.itertuples(index=False)}
    for g, rows in s[s["grouping"] != "original"].groupby("g"):
        by = {r.grouping: r for r in rows.itertuples(index=False)}
        first = rows.iloc[0]
        line = f"- g={g} ({first.kv_saved:.0%} of the cache saved): loss change " + ", ".join(
            f"{r.loss_change:+.4f} [{r.change_ci_low:+.4f}, {r.change_ci_high:+.4f}] {name}" for name, r in by.items()
        )
        c = comp.get(int(g))
        if c is not None:
            if c.same_groups:
                line += ": both groupings chose the same groups"
            else:
                verdict = "loses less" if c.ci_high < 0 else ("loses more" if c.ci_low > 0 else "is not distinguishable from adjacent")
                line += f"; similar minus adjacent {c.similar_minus_adjacent:+.4f} [{c.ci_low:+.4f}, {c.ci_high:+.4f}]: similarity grouping {verdict}"
        out.append(line + " (95% bootstrap intervals over windows).")
    return out


@click.command("gqa")
@model_options
@_text_options
@click.option("--group-sizes", callback=parse_ints, default=None, help="KV heads pooled into one, comma-separated (default: every divisor > 1 of the KV heads, up to MQA).")
@click.option("--grouping", default="adjacent,similar", show_default=True, help="adjacent (heads 0-1, 2-3, ...), similar (least scatter of keys and values on the text), or both.")
@click.option("--task", "task_file", default=None, type=click.Path(dir_okay=False), help="JSONL task (prompt, correct, incorrect): also measure its logit difference.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def gqa_cmd(model, device, dtype, revision, allow_new_weights, text_file, n_windows, window, no_bos, batch_size, group_sizes, grouping, task_file, out_dir, overwrite, quiet):
    """Turn the model into a grouped-query one without retraining (K and V mean-pooled per group,
    Ainslie et al. 2023) and measure loss, KV cache saved and how far each head's pattern moves.

    Writes summary.csv, heads.csv (JS per head), groups.csv, kv.csv, task.csv (with --task),
    gqa_loss_vs_cache.png/.svg, summary.md and manifest.json to OUT.
    """
    from headlens.analyses.ablation.data import read_task, task_eval_set
    from headlens.analyses.design.gqa import GQAConfig, gqa_study
    from headlens.analyses.design.kv import KVConfig, kv_cache_table
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import check_out_dir, write_json, write_text
    from headlens.reports.figures.design import loss_vs_cache

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = GQAConfig(group_sizes=group_sizes, groupings=tuple(parse_csv(grouping) or ()), batch_size=batch_size)
    items = read_task(task_file) if task_file else None
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    data = _text_set(loaded, text_file, n_windows=n_windows, window=window, no_bos=no_bos)
    task = task_eval_set(loaded.tokenizer, items, prepend_bos=not no_bos, n_ctx=loaded.n_ctx, source=task_file) if items else None
    with progress_bars("gqa", quiet=quiet) as progress:
        res = gqa_study(loaded, data, config, task=task, progress=progress)
    kv = kv_cache_table(loaded, KVConfig())
    files = _write_csvs({"summary": res.summary, "heads": res.heads, "groups": res.groups, "comparison": res.comparison, "kv": kv, "task": res.task}, out)
    figs = loss_vs_cache(res.summary, out / "gqa_loss_vs_cache", title=f"GQA what-if: {model}")
    write_text(out / "summary.md", gqa_markdown(res, model, figure="gqa_loss_vs_cache.png"))
    extra = {"gqa": {"data": data.describe(), "task": task.describe() if task is not None else None, "files": {**files, "figures": [str(p) for p in figs]}}}
    write_json(out / "manifest.json", build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], prepend_bos=not no_bos, configs={"gqa": config}, extra=extra))
    click.echo(f"GQA what-if on {len(data)} windows x {window} tokens; JS in bits, mean over queries")
    click.echo(_fmt(res.summary))
    for line in _gqa_reading(res.summary, res.comparison):
        click.echo(line)
    if res.task is not None:
        click.echo(f"task {task_file} ({len(task)} prompts):")
        click.echo(_fmt(res.task))
    click.echo(f"wrote {out}")


# ----------------------------------------------------------------------------- projections


def knockout_reading(losses: Any, roles: Any | None) -> list[str]:
    """A few lines saying what each whole-layer knockout did to the loss and to the roles."""
    out = []
    whole = losses[(losses["head"] == -1) & (losses["kind"] != "none")]
    for r in whole.sort_values("loss_change", ascending=False).itertuples(index=False):
        line = f"- layer {r.layer}, {r.kind}: loss {r.loss_change:+.4f} nats ({r.relative_change:+.1%})"
        if roles is not None:
            ch = roles[(roles["knocked_layer"] == r.layer) & (roles["kind"] == r.kind)]
            lost = [f"{x.layer}.{x.head} {x.lost}" for x in ch.itertuples(index=False) if x.lost]
            gained = [f"{x.layer}.{x.head} {x.gained}" for x in ch.itertuples(index=False) if x.gained]
            line += "; roles lost: " + (", ".join(lost) or "none") + "; gained: " + (", ".join(gained) or "none")
        out.append(line)
    if roles is not None:
        prev = roles[(roles["kind"].isin(["q=k", "q=k=v"])) & roles["lost"].str.contains("previous_token")]
        if len(prev):
            out.append("- Tied Q = K makes scores symmetric (s_ij = s_ji): a head can no longer prefer the previous token by what it matches, so previous-token roles go, and heads that read them (induction) lose what they key on.")
    return out


def projections_markdown(losses: Any, roles: Any | None, model_name: str, *, figure: str | None = None) -> str:
    from headlens.reports.markdown import markdown_table

    lines = [f"# Projection knockout: {model_name}", "", "One layer at a time: queries from the key projection (q=k), values from the key projection (v=k), or both (q=k=v); loss on text windows.", ""]
    lines += [markdown_table(losses, floatfmt=".4g"), ""]
    if figure:
        lines += [f"![knockout loss change]({figure})", ""]
    if roles is not None:
        lines += ["## Roles on the census (heads whose roles change)", "", markdown_table(roles[roles["kind"] != "none"]), ""]
    lines += ["## Reading", "", *knockout_reading(losses, roles), ""]
    return "\n".join(lines)


@click.command("projections")
@model_options
@_text_options
@click.option("--kinds", default="q=k,v=k,q=k=v", show_default=True, help="Knockouts: q=k (queries from the key projection), v=k (values from it), q=k=v.")
@click.option("--layers", callback=parse_ints, default=None, help="Only these layers, e.g. 0,3 (default: all).")
@click.option("--per-head", is_flag=True, help="Also knock out each head alone (loss only).")
@click.option("--no-roles", is_flag=True, help="Skip the census under each knockout.")
@click.option("--n-prompts", default=32, show_default=True, type=click.IntRange(min=2), help="Census prompts per stimulus set under each knockout.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def projections_cmd(model, device, dtype, revision, allow_new_weights, text_file, n_windows, window, no_bos, batch_size, kinds, layers, per_head, no_roles, n_prompts, out_dir, overwrite, quiet):
    """Tie one attention projection to another in each layer (and head) and measure what breaks:
    the loss, and each head's roles on the census.

    Writes losses.csv, role_changes.csv and census_scores.csv (unless --no-roles),
    knockout.png/.svg, summary.md and manifest.json to OUT.  A family whose hooks cannot carry
    a knockout is refused (exit 2) with the reason.
    """
    from headlens.analyses.design.projections import ProjectionConfig, knockout_losses, knockout_roles
    from headlens.analyses.heads.census import CensusConfig
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import check_out_dir, write_json, write_text
    from headlens.reports.figures.design import knockout_heatmap

    out = check_out_dir(out_dir, overwrite=overwrite)
    config = ProjectionConfig(kinds=tuple(parse_csv(kinds) or ()), layers=layers, per_head=per_head, batch_size=batch_size)
    census = CensusConfig(n_prompts=n_prompts, n_bootstrap=200, prepend_bos=not no_bos)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    data = _text_set(loaded, text_file, n_windows=n_windows, window=window, no_bos=no_bos)
    with progress_bars("projections", quiet=quiet) as progress:
        losses = knockout_losses(loaded, data, config, progress=progress)
        files = _write_csvs({"losses": losses}, out)  # written before the census: kept if it is interrupted
        roles, scores = (None, None) if no_roles else knockout_roles(loaded, census, config, progress=progress)
    files.update(_write_csvs({"role_changes": roles, "census_scores": scores}, out))
    figs = knockout_heatmap(losses, out / "knockout", title=f"projection knockout: {model}")
    write_text(out / "summary.md", projections_markdown(losses, roles, model, figure="knockout.png"))
    extra = {"projections": {"data": data.describe(), "files": {**files, "figures": [str(p) for p in figs]}}}
    write_json(out / "manifest.json", build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], prepend_bos=not no_bos, configs={"projections": config, "census": census}, extra=extra))
    click.echo(f"projection knockout on {len(data)} windows x {window} tokens")
    click.echo(_fmt(losses))
    for line in knockout_reading(losses, roles):
        click.echo(line)
    click.echo(f"wrote {out}")


def design_section_markdown(tables: dict[str, Any]) -> str:
    """Markdown of :func:`headlens.analyses.design.section.design_section_tables` for the report."""
    from headlens.reports.markdown import markdown_table

    lines = ["## Design questions", "", "### KV cache", "", markdown_table(tables["kv"], floatfmt=".3g"), ""]
    if "gqa_summary" in tables:
        lines += ["### GQA what-if (K/V mean-pooled, no retraining)", "", markdown_table(tables["gqa_summary"], floatfmt=".4g"), "", *_gqa_reading(tables["gqa_summary"], tables.get("gqa_comparison")), ""]
    if "knockout_losses" in tables:
        roles = tables.get("knockout_roles")
        lines += ["### Projection knockout", "", markdown_table(tables["knockout_losses"], floatfmt=".4g"), "", *knockout_reading(tables["knockout_losses"], roles), ""]
    for r in tables.get("skipped", []).itertuples(index=False) if "skipped" in tables else []:
        lines.append(f"- {r.part} not run: {r.reason}")
    return "\n".join(lines)


COMMANDS = [kv_cmd, gqa_cmd, projections_cmd]
