"""The ``ablation_zero``, ``ablation_mean`` and ``pruning`` stages: each head ablated alone, and
iterative pruning against random orders, on the evaluation text (loss), or on its sentences
(embedding change) for a model without a trained output head or an encoder."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.reports.report.markers import JOURNAL, open_journal
from headlens.reports.report.context import Stage, StageContext, write_csv

log = logging.getLogger(__name__)

__all__ = ["ABLATION_ZERO", "ABLATION_MEAN", "PRUNING", "METRIC_RULE"]

#: How the ablation and pruning stages choose their metric (part of their resume key).
METRIC_RULE = "embedding change when the output head is newly initialised or the model is an encoder, else loss"


def _eval_set(ctx: StageContext, loaded: Any) -> tuple[Any, dict[str, Any]]:
    """The stage's evaluation set and what the page says about its metric."""
    from headlens.analyses.ablation.embedding import embedding_eval_set, split_sentences
    from headlens.analyses.ablation.evalset import EMBEDDING_DEFINITION, text_eval_set
    from headlens.analyses.ablation.metrics import check_metric, default_metric

    text, label = ctx.settings.eval_source()
    metric, why = default_metric(loaded)
    check_metric(loaded, metric)
    if metric == "embedding":
        ctx.say(f"measured by the embedding change, not loss: {why}")
        d = ctx.settings.sentence_data(loaded.n_ctx)
        data = embedding_eval_set(loaded, split_sentences(text, complete_only=True), n_sentences=d["n_sentences"], max_tokens=d["max_tokens"], prepend_bos=d["prepend_bos"], source=label)
        return data, {"metric": metric, "metric_why": why, "metric_definition": EMBEDDING_DEFINITION}
    d = ctx.settings.eval_data(loaded.n_ctx)
    data = text_eval_set(loaded.tokenizer, text, n_windows=d["n_windows"], window=d["window"], prepend_bos=d["prepend_bos"], n_ctx=loaded.n_ctx, source=label, frame=loaded.frame(d["prepend_bos"]))
    return data, {"metric": metric}


def _smoke_note(ctx: StageContext, data: Any, random_seeds: int | None = None) -> str | None:
    """The figure's smoke-test line under ``--quick`` (None otherwise)."""
    if not ctx.settings.smoke_test(ctx.name):
        return None
    from headlens.reports.page.smoke import data_where
    from headlens.reports.verdict_text import figure_smoke_note

    return figure_smoke_note(data_where(data.describe()) + (f", {random_seeds} random orders" if random_seeds is not None else ""))


def _run_ablation(ctx: StageContext, method: str) -> dict[str, Any]:
    from headlens.analyses.ablation.study import ablation_study
    from headlens.reports.figures.report import ablation_heatmap

    loaded = ctx.model()
    data, about = _eval_set(ctx, loaded)
    config = ctx.settings.ablation(method)
    journal = open_journal(ctx.dir / JOURNAL, f"report-{ctx.name}", {**ctx.key, "data": data.fingerprint()})
    with journal:
        result = ablation_study(loaded, data, config, journal=journal, progress=ctx.step)
    files = [write_csv(result.table, ctx.dir / "ablation.csv")]
    files += ablation_heatmap(result.table, ctx.dir / "delta_heatmap", n_layers=loaded.n_layers, n_heads=loaded.n_heads, baseline=result.baseline_value, note=_smoke_note(ctx, data))
    journal.finish()
    info = {"method": method, **about, "unablated_value": result.unablated_value, "spearman_attribution_vs_exact": result.spearman, "data": data.describe(), "resumed": journal.resumed}
    if "attribution" in result.info:
        info["attribution"] = result.info["attribution"]
    return info


def _load_ablation(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {"table": pd.read_csv(d / "ablation.csv")}


def _run_pruning(ctx: StageContext) -> dict[str, Any]:
    from headlens.probes.outputs import write_json
    from headlens.analyses.ablation.pruning import prune_study
    from headlens.reports.figures.report import pruning_curve

    loaded = ctx.model()
    data, about = _eval_set(ctx, loaded)
    config = ctx.settings.pruning()
    journal = open_journal(ctx.dir / JOURNAL, "report-pruning", {**ctx.key, "data": data.fingerprint()})
    with journal:
        result = prune_study(loaded, data, config, journal=journal, progress=ctx.step)
    for name, df in (("curve.csv", result.curve), ("random_orders.csv", result.random), ("importance.csv", result.importance)):
        write_csv(df, ctx.dir / name)
    write_json(ctx.dir / "pruned_heads.json", result.pruned.to_json())
    pruning_curve(result.curve, ctx.dir / "pruning_curve", metric=data.metric, baseline=result.baseline_value, max_increase=config.max_increase, removable=result.removable_fraction, note=_smoke_note(ctx, data, config.random_seeds))
    journal.finish()
    return {
        **about,
        "importance": result.info["importance"],
        "unablated_value": result.baseline_value,
        "removable_fraction": result.removable_fraction,
        "max_increase": config.max_increase,
        "random_seeds": config.random_seeds,
        "random_runs_from_layer": result.info.get("random_runs_from_layer"),
        "data": data.describe(),
        "resumed": journal.resumed,
    }


def _load_pruning(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "curve": pd.read_csv(d / "curve.csv", keep_default_na=True, dtype={"removed_this_step": str}),
        "random": pd.read_csv(d / "random_orders.csv"),
        "importance": pd.read_csv(d / "importance.csv"),
    }


def _data_key(settings: Any) -> dict[str, Any]:
    return {"data": settings.eval_data(10**9), "metric": METRIC_RULE, "sentences": settings.sentence_data(10**9)}


def _apply_zero(report: Any, loaded: dict[str, Any]) -> None:
    report.ablation_zero = loaded["table"]


def _apply_mean(report: Any, loaded: dict[str, Any]) -> None:
    report.ablation_mean = loaded["table"]


def _apply_pruning(report: Any, loaded: dict[str, Any]) -> None:
    report.pruning_curve, report.pruning_random, report.importance = loaded["curve"], loaded["random"], loaded["importance"]


ABLATION_ZERO = Stage("ablation_zero", "zero ablation of each head", lambda c: _run_ablation(c, "zero"), _load_ablation, lambda s: {"ablation": s.ablation("zero"), **_data_key(s)}, _apply_zero)
ABLATION_MEAN = Stage("ablation_mean", "mean ablation of each head", lambda c: _run_ablation(c, "mean"), _load_ablation, lambda s: {"ablation": s.ablation("mean"), **_data_key(s)}, _apply_mean)
PRUNING = Stage("pruning", "pruning curve with random control", _run_pruning, _load_pruning, lambda s: {"pruning": s.pruning(), **_data_key(s)}, _apply_pruning)
