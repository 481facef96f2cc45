"""The ``design`` stage: the seeds' design questions measured on the model
(:func:`headlens.reports.api.design_section.design_section`), written and drawn.

* the KV cache of the model's own attention, of GQA with each group size and of MQA;
* the GQA what-if: K and V mean-pooled per group of KV heads, both groupings (``adjacent`` and
  ``similar``), loss and per-head pattern movement on the evaluation windows of the ablation
  stages, with the loss-vs-cache figure (``gqa_loss_vs_cache.svg``, inlined into the page);
* projection knockouts (``q=k``, ``v=k``, ``q=k=v``, one layer at a time): loss change and, in
  the full report, the census under each knockout (role changes; 32 prompts, 200 resamples).

``--quick`` runs it on the quick evaluation windows (2 of 32 tokens) without the role
changes (a census per knockout); the page says so.  A model whose loss means nothing (new
output head, encoder) gets the KV table only, with the reason on the page.  The sweeps journal
each variant, so an interrupted stage continues where it stopped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.design.gqa import GQAConfig
from headlens.analyses.design.projections import ProjectionConfig
from headlens.analyses.heads.census import CensusConfig
from headlens.probes.outputs import write_text
from headlens.reports.api.design_section import design_section
from headlens.reports.api.journals import KeptJournal
from headlens.reports.render.design_tables import design_section_markdown
from headlens.reports.render.figures.design import knockout_heatmap, loss_vs_cache
from headlens.reports.render.page.smoke import data_where
from headlens.reports.render.verdict_text import figure_smoke_note
from headlens.reports.runs.report.context import Stage, StageContext, write_csv
from headlens.reports.runs.report.markers import JOURNAL, open_journal

if TYPE_CHECKING:  # result.py imports the stages (Example): the type only
    from headlens.reports.runs.report.result import Report

log = logging.getLogger(__name__)

__all__ = ["STAGE", "TABLES", "QUICK_ROLES_NOTE"]

#: The stage's tables, one CSV each (``<name>.csv``), as :func:`design_section` names them.
TABLES = ("kv", "gqa_summary", "gqa_heads", "gqa_groups", "gqa_comparison", "knockout_losses", "knockout_roles", "skipped")
_TEXT_TABLES = {"knockout_roles", "skipped"}  # empty strings stay empty strings
QUICK_ROLES_NOTE = (
    "not run with --quick: the role changes need a census under every knockout (run the full report, or headlens projections)"
)
#: How the stage decides whether the loss parts run (part of its resume key).
LOSS_RULE = "GQA and knockouts measure next-token loss: left out when the output head is newly initialised or the model is an encoder"


def _config(settings: Any) -> dict[str, Any]:
    """The stage's configuration (its resume key): every setting the stage's numbers depend on."""
    roles = not settings.quick
    census = (
        CensusConfig(
            n_prompts=32, n_bootstrap=200, prepend_bos=settings.prepend_bos, seed=settings.seed, batch_size=max(settings.batch_size, 16)
        )
        if roles
        else None
    )
    return {
        "gqa": GQAConfig(batch_size=settings.batch_size),
        "projections": ProjectionConfig(batch_size=settings.batch_size),
        "roles": roles,
        "census": census,
        "data": settings.eval_data(10**9),
        "loss_rule": LOSS_RULE,
    }


def _run(ctx: StageContext) -> dict[str, Any]:
    loaded = ctx.model()
    config = _config(ctx.settings)
    d = ctx.settings.eval_data(loaded.n_ctx)
    journal = KeptJournal(lambda key: open_journal(ctx.dir / JOURNAL, "report-design", {**ctx.key, "data": key["data_fingerprint"]}))
    result = design_section(
        loaded,
        gqa=config["gqa"],
        projections=config["projections"],
        census=config["census"],
        text_file=ctx.settings.text_file,
        n_windows=d["n_windows"],
        window=d["window"],
        prepend_bos=d["prepend_bos"],
        skip=None if config["roles"] else {"roles": QUICK_ROLES_NOTE},
        journal=journal,
        progress=ctx.step,
    )
    if result.loss_why is not None:
        ctx.say(f"GQA what-if and projection knockouts left out: {result.loss_why}")
    tables, setup = result.tables, result.setup
    data = setup.data
    for name in TABLES:
        if name in tables:
            write_csv(tables[name], ctx.dir / f"{name}.csv")
    if "gqa_summary" in tables:
        loss_vs_cache(
            tables["gqa_summary"],
            ctx.dir / "gqa_loss_vs_cache",
            title=f"GQA what-if: {loaded.name}",
            note=figure_smoke_note(data_where(data.describe())) if ctx.settings.smoke_test("design") else None,
        )
    if "knockout_losses" in tables and not ctx.settings.quick:  # the page shows the table; the figure is a file (seaborn: ~1 s)
        knockout_heatmap(tables["knockout_losses"], ctx.dir / "knockout", title=f"projection knockout: {loaded.name}")
    smoke = data_where(data.describe()) if ctx.settings.smoke_test("design") else None  # --quick: a smoke test, no finding
    write_text(ctx.dir / "summary.md", design_section_markdown(tables, n_items=len(data), smoke=smoke))
    journal.finish()
    return {
        "data": data.describe(),
        "text": setup.text.describe() if setup.text is not None else None,
        "skipped": tables["skipped"].to_dict("records"),
        "roles": bool(config["roles"]) and result.loss_why is None,  # asked for, and the knockouts measured
        "resumed": bool(journal.journal is not None and journal.journal.resumed),
    }


def _load(d: Path, marker: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name in TABLES:
        path = d / f"{name}.csv"
        if path.is_file():
            out[name] = pd.read_csv(path, keep_default_na=False) if name in _TEXT_TABLES else pd.read_csv(path)
    if "skipped" not in out:
        raise KeyError("skipped.csv")  # the one table every run writes: its absence means the outputs are broken
    return out


def _apply(report: Report, loaded: dict[str, Any]) -> None:
    report.design = loaded


STAGE = Stage("design", "design questions: KV cache, GQA what-if, projection knockouts", _run, _load, _config, _apply)
