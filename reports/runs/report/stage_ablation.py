"""The ``ablation_zero``, ``ablation_mean`` and ``pruning`` stages: each head ablated alone, and
iterative pruning against random orders, on the evaluation text (loss), or on its sentences
(embedding change) for a model without a trained output head or an encoder."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.measure.evalset import EMBEDDING_DEFINITION
from headlens.probes.outputs import write_json
from headlens.reports.api.ablate import ablate
from headlens.reports.api.journals import KeptJournal
from headlens.reports.api.prune import prune
from headlens.reports.api.result import read_csv_table
from headlens.reports.render.figures.report import ablation_heatmap, pruning_curve
from headlens.reports.render.page.smoke import data_where
from headlens.reports.render.verdict_text import figure_smoke_note
from headlens.reports.runs.report.context import Stage, StageContext, write_csv
from headlens.reports.runs.report.markers import JOURNAL, open_journal

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["ABLATION_ZERO", "ABLATION_MEAN", "PRUNING", "METRIC_RULE"]

#: How the ablation and pruning stages choose their metric (part of their resume key).
METRIC_RULE = "embedding change when the output head is newly initialised or the model is an encoder, else loss"


def _data(ctx: StageContext, loaded: Any) -> dict[str, Any]:
    """The stage's data keywords for :func:`ablate` / :func:`prune`: windows of the evaluation text
    for the loss, its complete sentences for the embedding change."""
    d, sentences = ctx.settings.eval_data(loaded.n_ctx), ctx.settings.sentence_data(loaded.n_ctx)
    return {
        "text_file": ctx.settings.text_file,
        "n_windows": d["n_windows"],
        "window": d["window"],
        "n_sentences": sentences["n_sentences"],
        "prepend_bos": d["prepend_bos"],
        "complete_sentences": True,
    }


def _about(ctx: StageContext, setup: Any) -> dict[str, Any]:
    """What the page says about the metric (said on the console when it is not loss)."""
    if setup.metric != "embedding":
        return {"metric": setup.metric}
    ctx.say(f"measured by the embedding change, not loss: {setup.why}")
    return {"metric": setup.metric, "metric_why": setup.why, "metric_definition": EMBEDDING_DEFINITION}


def _journal(ctx: StageContext, kind: str) -> KeptJournal:
    """The stage's journal (it resumes a sweep of the same stage key and data, or starts afresh)."""
    return KeptJournal(lambda key: open_journal(ctx.dir / JOURNAL, kind, {**ctx.key, "data": key["data_fingerprint"]}))


def _smoke_note(ctx: StageContext, data: Any, random_seeds: int | None = None) -> str | None:
    """The figure's smoke-test line under ``--quick`` (None otherwise)."""
    if not ctx.settings.smoke_test(ctx.name):
        return None
    return figure_smoke_note(data_where(data.describe()) + (f", {random_seeds} random orders" if random_seeds is not None else ""))


def _run_ablation(ctx: StageContext, method: str) -> dict[str, Any]:
    loaded = ctx.model()
    journal = _journal(ctx, f"report-{ctx.name}")
    result = ablate(loaded, ctx.settings.ablation(method), journal=journal, progress=ctx.step, **_data(ctx, loaded))
    info = result.info
    about = _about(ctx, result.setup)
    files = [write_csv(result.table, ctx.dir / "ablation.csv")]
    files += ablation_heatmap(
        result.table,
        ctx.dir / "delta_heatmap",
        n_layers=loaded.n_layers,
        n_heads=loaded.n_heads,
        baseline=result.masked_value,
        note=_smoke_note(ctx, result.data),
    )
    journal.finish()
    out = {
        "method": method,
        **about,
        "unablated_value": result.unablated_value,
        "spearman_attribution_vs_exact": result.spearman,
        "spearman_p_attribution_vs_exact": result.spearman_p,
        "data": info["data"],
        "text": info.get("text"),
        "resumed": info["resumed"],
    }
    if "attribution" in info["run"]:
        out["attribution"] = info["run"]["attribution"]
    return out


def _load_ablation(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {"table": read_csv_table(d / "ablation.csv")}  # exact floats; head names stay text


def _run_pruning(ctx: StageContext) -> dict[str, Any]:
    loaded = ctx.model()
    config = ctx.settings.pruning()
    journal = _journal(ctx, "report-pruning")
    result = prune(loaded, config, journal=journal, progress=ctx.step, **_data(ctx, loaded))
    info = result.info
    about = _about(ctx, result.setup)
    for name, df in (("curve.csv", result.curve), ("random_orders.csv", result.random), ("importance.csv", result.importance)):
        write_csv(df, ctx.dir / name)
    write_json(ctx.dir / "pruned_heads.json", result.pruned.to_json())
    note = _smoke_note(ctx, result.data, config.random_seeds)
    pruning_curve(
        result.curve,
        ctx.dir / "pruning_curve",
        metric=result.metric,
        baseline=result.unablated_value,
        max_increase=config.max_increase,
        removable=result.removable_fraction,
        note=note,
    )
    journal.finish()
    return {
        **about,
        "importance": info["importance"],
        "unablated_value": result.unablated_value,
        "removable_fraction": result.removable_fraction,
        "max_increase": config.max_increase,
        "random_seeds": config.random_seeds,
        "random_runs_from_layer": info["run"].get("random_runs_from_layer"),
        "data": info["data"],
        "text": info.get("text"),
        "resumed": info["resumed"],
    }


def _load_pruning(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "curve": pd.read_csv(d / "curve.csv", keep_default_na=True, dtype={"removed_this_step": str}, float_precision="round_trip"),
        "random": read_csv_table(d / "random_orders.csv"),
        "importance": read_csv_table(d / "importance.csv"),
    }


def _data_key(settings: Any) -> dict[str, Any]:
    return {"data": settings.eval_data(10**9), "metric": METRIC_RULE, "sentences": settings.sentence_data(10**9)}


def _apply_zero(report: Report, loaded: dict[str, Any]) -> None:
    report.ablation_zero = loaded["table"]


def _apply_mean(report: Report, loaded: dict[str, Any]) -> None:
    report.ablation_mean = loaded["table"]


def _apply_pruning(report: Report, loaded: dict[str, Any]) -> None:
    report.pruning_curve, report.pruning_random, report.importance = loaded["curve"], loaded["random"], loaded["importance"]


ABLATION_ZERO = Stage(
    "ablation_zero",
    "zero ablation of each head",
    lambda c: _run_ablation(c, "zero"),
    _load_ablation,
    lambda s: {"ablation": s.ablation("zero"), **_data_key(s)},
    _apply_zero,
)
ABLATION_MEAN = Stage(
    "ablation_mean",
    "mean ablation of each head",
    lambda c: _run_ablation(c, "mean"),
    _load_ablation,
    lambda s: {"ablation": s.ablation("mean"), **_data_key(s)},
    _apply_mean,
)
PRUNING = Stage(
    "pruning",
    "pruning curve with random control",
    _run_pruning,
    _load_pruning,
    lambda s: {"pruning": s.pruning(), **_data_key(s)},
    _apply_pruning,
)
