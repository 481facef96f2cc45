"""The smoke-test notices of a ``--quick`` report, for the page and the Markdown alike: which
sections are smoke tests, on what they ran, and the sentence that marks them
(:func:`headlens.reports.render.verdict_text.smoke_sentence`)."""

from __future__ import annotations

import logging
from typing import Any

from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.verdict_text import smoke_sentence

log = logging.getLogger(__name__)

__all__ = ["data_where", "smoke_where", "smoke_note", "smoke_columns_note", "data_items", "SMOKE_COLUMNS"]

#: The heads table's columns that come from smoke-test stages, by stage.
SMOKE_COLUMNS: dict[str, tuple[str, ...]] = {
    "ablation_zero": ("zero_delta",),
    "ablation_mean": ("mean_delta",),
    "pruning": ("importance", "pruned_at"),
}


def data_items(info: dict[str, Any]) -> tuple[int | None, str]:
    """``(count, unit)`` of the items a stage's intervals come from (its ``info["data"]``)."""
    data = info.get("data") or {}
    if data.get("n_sentences") is not None:
        return int(data["n_sentences"]), "sentences"
    if data.get("n_windows") is not None:
        return int(data["n_windows"]), "windows"
    if data.get("n_items") is not None:
        return int(data["n_items"]), "items"
    return None, "items"


def data_where(data: dict[str, Any]) -> str:
    """What an evaluation set's description (``EvalSet.describe()``) covers, e.g. ``"2 windows of 32 tokens"``."""
    if data.get("n_sentences") is not None:
        return f"{data['n_sentences']} sentences of at most {data.get('max_tokens', '?')} tokens"
    return f"{data.get('n_windows', '?')} windows of {data.get('window', '?')} tokens"


def smoke_where(report: ReportView, stage: str) -> str:
    """On what a smoke-test stage ran, e.g. ``"2 windows of 32 tokens, 2 random orders"``."""
    info = report.stage(stage).info
    if stage == "sinks":
        rates = report.sink_rates
        n = int(rates["n_sequences"].iloc[0]) if rates is not None and len(rates) else "a few"
        return f"the sink census only, on {n} sequences"
    where = data_where(info.get("data") or {})
    if stage == "pruning" and info.get("random_seeds") is not None:
        where += f", {info['random_seeds']} random orders"
    return where


def smoke_note(report: ReportView, stage: str) -> str | None:
    """The notice on the section of ``stage``, or None when it is not a smoke test."""
    if stage == "design" and report.design is not None and not {"gqa_summary", "knockout_losses"} & set(report.design):
        return None  # the KV table alone: arithmetic, no sample
    return smoke_sentence(smoke_where(report, stage)) if report.smoke_test(stage) else None


def smoke_columns_note(report: ReportView, labels: dict[str, str]) -> str | None:
    """One line for the heads table and heatmaps: which of their columns come from smoke-test
    stages (``labels``: column -> how the page names it); None when none does."""
    cols: list[str] = [
        labels.get(c) or c for stage, names in SMOKE_COLUMNS.items() if report.smoke_test(stage) for c in names if c in report.heads.columns
    ]
    if not cols:
        return None
    return (
        f"Smoke test (--quick): {', '.join(cols)} come from stages run on a few windows; they state no finding. "
        "The roles and detector scores come from the census, which --quick runs in full."
    )
