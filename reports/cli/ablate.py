"""``headlens ablate`` and ``headlens prune``."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from headlens.reports.cli.common import HEADS, model_options, parse_layers
from headlens.reports.models import named_models
from headlens.reports.progress import progress_bars
from headlens.reports.text_files import read_text_file

TABLE_FORMATS = (".csv", ".parquet", ".json")

log = logging.getLogger(__name__)


def _load(model: str, device: str, dtype: str, revision: str | None, allow_new_weights: bool = False):
    from headlens.probes.config import ModelConfig
    from headlens.probes.loading import load_model

    return load_model(ModelConfig(model=model, device=device, dtype=dtype, revision=revision, allow_new_weights=allow_new_weights), named=named_models())


def data_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What to measure on: ``--metric``, ``--text-file``, ``--task``, windows, BOS, batch size."""
    fn = click.option("--batch-size", default=8, show_default=True, type=click.IntRange(min=1), help="Windows, prompts or sentences per forward.")(fn)
    fn = click.option("--no-bos", is_flag=True, help="Do not prepend BOS (TransformerLens prepends it; Hugging Face and most papers do not); for an encoder, no [CLS]/[SEP] either.")(fn)
    fn = click.option("--n-sentences", default=64, show_default=True, type=click.IntRange(min=1), help="--metric embedding: sentences measured (evenly spaced through the text when it holds more).")(fn)
    fn = click.option("--window", default=128, show_default=True, type=click.IntRange(min=2), help="Tokens per evaluation window (BOS included); with --metric embedding, the most tokens per sentence ([CLS]/[SEP] included; longer ones are cut).")(fn)
    fn = click.option("--n-windows", default=16, show_default=True, type=click.IntRange(min=1), help="Evaluation windows cut from the text.")(fn)
    fn = click.option("--task", "task_file", default=None, type=click.Path(dir_okay=False), help="JSONL task: {\"prompt\": ..., \"correct\": \" Mary\", \"incorrect\": \" John\"} per line (single-token targets); implies --metric logit-diff.")(fn)
    fn = click.option("--text-file", default=None, type=click.Path(dir_okay=False), help="Evaluation text for --metric loss or embedding (default: the text that ships with headlens, analyses/data/eval_text.txt); for embedding it is cut into sentences (at line ends and after . ! ?), one item each.")(fn)
    fn = click.option(
        "--metric",
        type=click.Choice(["loss", "logit-diff", "embedding"]),
        default=None,
        help="loss: next-token cross-entropy on text windows (default); logit-diff: logit(correct) - logit(incorrect) on --task prompts; "
        "embedding: 1 - cosine between the mean-pooled sentence embedding (last hidden state) and the unablated one, over sentences of the text "
        "(default when the model's output head is newly initialised or the model is an encoder; reads no output head).",
    )(fn)
    return fn


def _metric(metric: str | None, text_file: str | None, task_file: str | None) -> str | None:
    """The metric asked for (``None``: chosen once the model is loaded, :func:`_resolve_metric`)."""
    if metric is None and task_file:
        metric = "logit-diff"
    if metric == "logit-diff" and task_file is None:
        raise click.UsageError("--metric logit-diff needs --task FILE (JSONL prompts with correct and incorrect tokens)")
    if metric in ("loss", "embedding") and task_file is not None:
        raise click.UsageError(f"--task prompts are scored with --metric logit-diff, not {metric}")
    if text_file is not None and task_file is not None:
        raise click.UsageError("give either --text-file (loss, embedding) or --task (logit-diff), not both")
    return metric


def _resolve_metric(loaded: Any, metric: str | None) -> tuple[str, str]:
    """``(metric, how it was chosen)``: the default for the loaded model when none was asked for
    (said in a log line when it is not loss), then refused if it means nothing on this model."""
    from headlens.analyses.ablation.metrics import check_metric, default_metric

    chosen = f"asked for (--metric {metric})"
    if metric is None:
        metric, why = default_metric(loaded)
        chosen = "default" if why is None else f"default for this model: {why}"
        if why is not None:
            log.warning("metric: embedding change (1 - cosine of the mean-pooled sentence embedding to the unablated one), not loss: %s", why)
    check_metric(loaded, metric)
    return metric, chosen


def _metric_label(metric: str) -> str:
    from headlens.analyses.ablation.evalset import METRIC_LABELS

    return METRIC_LABELS.get(metric, metric)


def _metric_manifest(metric: str, chosen: str) -> dict[str, Any]:
    """Manifest fields that say what the metric is and why it was chosen."""
    from headlens.analyses.ablation.evalset import EMBEDDING_DEFINITION

    out: dict[str, Any] = {"metric_chosen": chosen}
    if metric == "embedding":
        out["metric_definition"] = EMBEDDING_DEFINITION
    return out


def _read_inputs(metric: str | None, text_file: str | None, task_file: str | None) -> tuple[Any, str]:
    """Read the text or task file (syntax only; token checks need the model's tokenizer)."""
    from headlens.analyses.ablation.evalset import read_task
    from headlens.analyses.stimuli import eval_text

    if metric == "logit-diff":
        assert task_file is not None
        return read_task(task_file), task_file
    if text_file is None:
        return eval_text(), "built-in evaluation text"
    return read_text_file(text_file), f"--text-file {text_file}"


def _eval_set(loaded: Any, metric: str, source: Any, label: str, *, n_windows: int, window: int, prepend_bos: bool, n_sentences: int = 64):
    from headlens.analyses.ablation.embedding import embedding_eval_set, split_sentences
    from headlens.analyses.ablation.evalset import task_eval_set, text_eval_set

    if metric == "logit-diff":
        return task_eval_set(loaded.tokenizer, source, prepend_bos=prepend_bos, n_ctx=loaded.n_ctx, source=label, frame=loaded.frame(prepend_bos))
    if metric == "embedding":
        sentences = split_sentences(source, complete_only=label == "built-in evaluation text")
        return embedding_eval_set(loaded, sentences, n_sentences=n_sentences, max_tokens=min(window, loaded.n_ctx), prepend_bos=prepend_bos, source=label)
    return text_eval_set(loaded.tokenizer, source, n_windows=n_windows, window=window, prepend_bos=prepend_bos, n_ctx=loaded.n_ctx, source=label, frame=loaded.frame(prepend_bos))


def _model_key(loaded: Any) -> dict[str, Any]:
    from headlens.probes.loading import weights_fingerprint

    d = loaded.describe()
    key = {k: d.get(k) for k in ("model", "path", "revision", "commit", "architecture", "n_layers", "n_heads", "d_head", "dtype", "device")}
    return {**key, "weights": weights_fingerprint(loaded)}  # a journal from other weights is not resumed


def _write_table(table: Any, path: Path) -> None:
    from headlens.probes.outputs import atomic_write

    ext = path.suffix.lower()
    if ext == ".csv":
        atomic_write(path, lambda p: table.to_csv(p, index=False))
    elif ext == ".parquet":
        atomic_write(path, lambda p: table.to_parquet(p, index=False))
    else:
        atomic_write(path, lambda p: table.to_json(p, orient="records", indent=2))


def _sidecars(out: Path) -> dict[str, Path]:
    stem = out.with_suffix("")
    return {
        "manifest": stem.with_name(stem.name + ".manifest.json"),
        "heatmap_png": stem.with_name(stem.name + ".heatmap.png"),
        "heatmap_svg": stem.with_name(stem.name + ".heatmap.svg"),
    }


@click.command("ablate")
@model_options
@click.option("--method", type=click.Choice(["zero", "mean", "resample"]), default="zero", show_default=True, help="How an ablated head's z is replaced: zeros, its mean over the evaluation set, or z from another item (seeded).")
@data_options
@click.option("--heads", type=HEADS, default=None, help="Heads to ablate, one at a time, as LAYER.HEAD, e.g. 5.1,5.5 (default: all).")
@click.option("--layers", callback=parse_layers, default=None, help="Only heads in these layers, e.g. 0,3.")
@click.option("--mask", "mask_file", default=None, type=click.Path(dir_okay=False), help="Head-mask JSON (from headlens prune): these heads stay removed throughout; the table is measured on that pruned model.")
@click.option("--bootstrap", default=1000, show_default=True, type=click.IntRange(min=0), help="Bootstrap resamples of the items for the 95% interval of each delta.")
@click.option("--no-attribution", is_flag=True, help="Skip the first-order (gradient) estimate.")
@click.option("--heads-per-forward", default=None, type=click.IntRange(min=1), help="Heads of one layer ablated per forward, one per batch copy (default: as many as fit 2048 tokens).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the bootstrap and of resample sources.")
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False), help="Table file: .csv, .parquet or .json. The manifest and heatmap are written next to it.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace existing output files (and an unfinished run's journal, unless --resume).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def ablate_cmd(model, device, dtype, revision, allow_new_weights, method, metric, text_file, task_file, n_windows, window, n_sentences, no_bos, batch_size, heads, layers, mask_file, bootstrap, no_attribution, heads_per_forward, seed, out_file, resume, overwrite, quiet):
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
    import torch

    from headlens.analyses.ablation.study import AblationConfig, ablation_study
    from headlens.analyses.ablation.masks import read_mask
    from headlens.reports.journal import Journal, journal_path
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import check_out_file, write_json
    from headlens.reports.figures.ablation import ablation_heatmap

    out = Path(out_file)
    if out.suffix.lower() not in TABLE_FORMATS:
        raise click.BadParameter(f"{out_file!r}: the table format follows the extension: {', '.join(TABLE_FORMATS)}", param_hint="--out")
    metric = _metric(metric, text_file, task_file)
    sidecars = _sidecars(out)
    for path in (out, *sidecars.values()):
        check_out_file(path, overwrite=overwrite)
    source, label = _read_inputs(metric, text_file, task_file)
    if mask_file is not None:
        read_mask(mask_file)  # syntax first, before the model loads
    config = AblationConfig(method=method, heads=heads, layers=layers, batch_size=batch_size, heads_per_forward=heads_per_forward, n_bootstrap=bootstrap, seed=seed, attribution=not no_attribution)
    torch.manual_seed(seed)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    metric, metric_chosen = _resolve_metric(loaded, metric)
    data = _eval_set(loaded, metric, source, label, n_windows=n_windows, window=window, prepend_bos=not no_bos, n_sentences=n_sentences)
    mask = read_mask(mask_file, n_layers=loaded.n_layers, n_heads=loaded.n_heads) if mask_file is not None else None
    from headlens.probes.loading import check_layers_heads

    check_layers_heads(loaded, layers, heads)
    key = {"model": _model_key(loaded), "data": data.describe(), "config": vars(config), "mask": mask.to_json()["removed"] if mask else None}
    journal = Journal(journal_path(out), "ablate", key, resume=resume, overwrite=overwrite)
    with journal, progress_bars(quiet=quiet) as stages:
        if journal.resumed and not quiet:
            click.echo(f"resuming from {journal.path} ({sum(r.get('kind') == 'head' for r in journal.records)} head(s) already done)", err=True)
        result = ablation_study(loaded, data, config, mask=mask, journal=journal, progress=stages)
    table = result.table
    files = {"table": str(out), **{k: str(v) for k, v in sidecars.items()}}
    extra = {
        "ablation": {
            "method": method,
            "metric": metric,
            **_metric_manifest(metric, metric_chosen),
            "attribution": result.info.get("attribution", "on" if config.attribution else "off (--no-attribution)"),
            "unablated_value": result.unablated_value,
            "baseline_value": result.baseline_value,
            "mask": {"file": mask_file, "removed": mask.to_json()["removed"]} if mask else None,
            "data": data.describe(),
            "spearman_attribution_vs_exact": result.spearman,
            "ci": {"level": config.ci, "bootstrap": bootstrap, "over": "items (windows, prompts or sentences)"},
            "run": result.info,
            "resumed": journal.resumed,
            "files": files,
        }
    }
    manifest = build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], seed=seed, prepend_bos=not no_bos, configs={"ablation": config}, extra=extra)
    write_json(sidecars["manifest"], manifest)
    ablation_heatmap(table, sidecars["heatmap_png"].with_suffix(""), n_layers=loaded.n_layers, n_heads=loaded.n_heads, baseline=result.baseline_value)
    _write_table(table, out)
    journal.finish()

    click.echo(f"{method} ablation of {len(table)} head(s) on {data.basis()}; metric {_metric_label(metric)}")
    click.echo(f"unablated {_metric_label(metric)}: {result.unablated_value:.6g}" + (f"; with the {len(mask)} masked head(s) removed: {result.baseline_value:.6g}" if mask else ""))
    shown = table.reindex(table["delta"].abs().sort_values(ascending=False).index).head(10)
    click.echo("heads with the largest |delta|:")
    cols = ["layer", "head", "value", "delta", "ci_low", "ci_high"] + ([] if "attribution" in result.info else ["attribution"])
    click.echo(shown[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if result.spearman is not None:
        click.echo(f"attribution (first-order estimate) vs exact delta: Spearman rank correlation {result.spearman:.3f} over {len(table)} heads")
    if "attribution" in result.info:
        click.echo(f"attribution {result.info['attribution']}")
    click.echo(f"wrote {out}, {sidecars['manifest'].name}, {sidecars['heatmap_png'].name}, {sidecars['heatmap_svg'].name}")


@click.command("prune")
@model_options
@data_options
@click.option("--step", default=0.1, show_default=True, type=click.FloatRange(0, 1, min_open=True), help="Fraction of the remaining heads removed per step.")
@click.option("--max-increase", default=0.05, show_default=True, type=click.FloatRange(min=0), help="Largest relative worsening of the metric for the removable fraction (0.05 = 5% of the unablated loss); for --metric embedding the largest embedding change itself (0.05 = cosine to the unablated embedding at least 0.95).")
@click.option("--random-seeds", default=3, show_default=True, type=click.IntRange(min=0), help="Random pruning orders in the control.")
@click.option("--max-fraction", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True), help="Stop once this fraction of heads is removed.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random orders.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--resume", is_flag=True, help="Finish an interrupted run from its journal (OUT/prune.journal.jsonl).")
@click.option("--overwrite", is_flag=True, help="Replace files in a non-empty output folder.")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def prune_cmd(model, device, dtype, revision, allow_new_weights, metric, text_file, task_file, n_windows, window, n_sentences, no_bos, batch_size, step, max_increase, random_seeds, max_fraction, seed, out_dir, resume, overwrite, quiet):
    """Prune heads iteratively by gradient importance (Michel et al. 2019) against random orders.

    With the embedding metric (the default when the output head is newly initialised, or for an
    encoder) the gradient is zero in the unablated model, so heads are ranked by their exact
    single-head ablation change instead, and --max-increase is an absolute embedding change.

    Writes OUT/curve.csv (metric, KV-cache bytes saved per 1,000 tokens and the random-order
    mean/spread at each step), OUT/random_orders.csv, OUT/importance.csv, OUT/pruned_heads.json
    (the largest set within --max-increase; give it to ablate --mask), OUT/manifest.json and
    OUT/pruning_curve.png/.svg.
    """
    import torch

    from headlens.analyses.ablation.pruning import PruneConfig, prune_study
    from headlens.reports.journal import Journal
    from headlens.probes.manifest import build_manifest
    from headlens.probes.outputs import atomic_write, check_out_dir, write_json
    from headlens.reports.figures.ablation import pruning_curve

    out = Path(out_dir)
    journal_file = out / "prune.journal.jsonl"
    metric = _metric(metric, text_file, task_file)
    if not (out.is_dir() and {p.name for p in out.iterdir()} <= {journal_file.name}):
        check_out_dir(out, overwrite=overwrite)  # a folder holding only a journal is left to Journal (--resume hint)
    source, label = _read_inputs(metric, text_file, task_file)
    config = PruneConfig(step=step, max_increase=max_increase, random_seeds=random_seeds, seed=seed, max_fraction=max_fraction, batch_size=batch_size)
    torch.manual_seed(seed)
    loaded = _load(model, device, dtype, revision, allow_new_weights)
    metric, metric_chosen = _resolve_metric(loaded, metric)
    data = _eval_set(loaded, metric, source, label, n_windows=n_windows, window=window, prepend_bos=not no_bos, n_sentences=n_sentences)
    key = {"model": _model_key(loaded), "data": data.describe(), "config": vars(config)}
    journal = Journal(journal_file, "prune", key, resume=resume, overwrite=overwrite)
    with journal, progress_bars(quiet=quiet) as stages:
        if journal.resumed and not quiet:
            click.echo(f"resuming from {journal.path} ({sum(r.get('kind') == 'step' for r in journal.records)} step(s) already done)", err=True)
        result = prune_study(loaded, data, config, journal=journal, progress=stages)
    curve = result.curve
    best = curve.loc[curve["fraction_removed"] == result.removable_fraction].iloc[-1]
    files = {name: str(out / name) for name in ("curve.csv", "random_orders.csv", "importance.csv", "pruned_heads.json", "manifest.json", "pruning_curve.png", "pruning_curve.svg")}
    extra = {
        "pruning": {
            "metric": metric,
            **_metric_manifest(metric, metric_chosen),
            "max_increase_is": "absolute (the unablated embedding change is 0)" if metric == "embedding" else "relative to the unablated value",
            "unablated_value": result.baseline_value,
            "removable_fraction": result.removable_fraction,
            "removable_heads": len(result.pruned),
            "value_at_removable": float(best["value"]),
            "kv_bytes_saved_per_1k_tokens_at_removable": int(best["kv_bytes_saved_per_1k_tokens"]),
            "kv_formula": "2 x kv_heads_removed x d_head x 1000 x bytes_per_value",
            "importance": result.info["importance"],
            "data": data.describe(),
            "run": result.info,
            "resumed": journal.resumed,
            "files": files,
        }
    }
    for name, df in (("curve.csv", curve), ("random_orders.csv", result.random), ("importance.csv", result.importance)):
        atomic_write(out / name, lambda p, df=df: df.to_csv(p, index=False))
    write_json(out / "pruned_heads.json", result.pruned.to_json())
    pruning_curve(curve, out / "pruning_curve", metric=metric, baseline=result.baseline_value, max_increase=max_increase, removable=result.removable_fraction)
    write_json(out / "manifest.json", build_manifest(model=loaded, command=["headlens", *sys.argv[1:]], seed=seed, prepend_bos=not no_bos, configs={"prune": config}, extra=extra))
    journal.finish()

    how = "exact single-head ablation importance" if metric == "embedding" else "gradient importance"
    click.echo(f"pruned {loaded.name} by {how} in {len(curve) - 1} step(s) on {data.basis()}; metric {_metric_label(metric)}, unablated {result.baseline_value:.6g}")
    cols = ["step", "n_removed", "fraction_removed", "value", "relative_change", "random_mean", "random_std", "kv_bytes_saved_per_1k_tokens"]
    click.echo(curve[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    within = f"an embedding change of at most {max_increase:g}" if metric == "embedding" else f"+{max_increase:.0%}"
    click.echo(
        f"removable within {within}: {result.removable_fraction:.1%} of heads ({len(result.pruned)}), {_metric_label(metric)} {best['value']:.6g};"
        f" KV cache saved: {int(best['kv_bytes_saved_per_1k_tokens']):,} bytes per 1,000 tokens at {str(loaded.dtype).removeprefix('torch.')}"
    )
    click.echo(f"wrote {out}/: curve.csv, random_orders.csv, importance.csv, pruned_heads.json, manifest.json, pruning_curve.png/.svg")


COMMANDS = [ablate_cmd, prune_cmd]
