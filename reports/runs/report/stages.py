"""The report's stages, in the order they run, and each stage's resume key.

==================  ===========================================================================
stage               what it runs (``--quick`` in brackets)
==================  ===========================================================================
``census``          head census and roles (:func:`headlens.reports.api.census.census`);
                    100 prompts per stimulus set, 1000 bootstrap resamples [the same: roles
                    equal ``headlens classify``'s]
``evidence``        each census role tested by its intervention (:func:`headlens.reports.api.evidence.evidence`),
                    32 items per test [8: a smoke test, no verdicts]
``sinks``           attention sinks (:func:`headlens.reports.api.sinks.sinks`), both BOS
                    settings, every part [the sink census only, the report's BOS setting]
``ablation_zero``   zero ablation of each head alone: change in loss on the evaluation text (the
                    model's own held-out text, else the built-in English text, or ``text_file``), 16 windows of 128 tokens, with
                    attribution [2 windows of 32, no attribution]
``ablation_mean``   the same with mean ablation
``pruning``         iterative pruning by gradient importance against random orders, step 0.1,
                    3 random orders [step 0.5, 2 orders]
``examples``        attention patterns of every head on 2-3 example prompts (or yours)
``design``          design questions (:func:`headlens.reports.api.design_section.design_section`): KV cache,
                    GQA what-if with both groupings, projection knockouts with the role changes
                    under each, on the ablation stages' windows [their quick windows, no role
                    changes]
==================  ===========================================================================

**Adding a stage** (e.g. a GQA / KV-sharing section):

1. write ``reports/runs/report/stage_<name>.py`` with ``run(ctx) -> info`` (write files into
   ``ctx.dir``; ``ctx.model()`` loads the model), ``load(dir, marker) -> dict`` (read them
   back), ``apply(report, loaded)`` (set the :class:`~headlens.reports.runs.report.result.Report`
   fields it adds) and a ``STAGE = Stage(name, title, run, load, config, apply)``; ``config``
   maps :class:`~headlens.reports.runs.report.settings.ReportSettings` to the stage's configuration
   (its resume key: change it and the stage reruns);
2. append it to :data:`STAGE_DEFS` below (the order is the run order; ``--skip`` and
   ``--redo`` accept its name at once);
3. add the new ``Report`` field(s) in ``result.py``, and the section: its data in the one context
   both pages are rendered from (``reports/render/page/view.py``), and a template for each page in
   ``reports/render/page/templates/sections/`` (``<name>.html.j2`` included from ``report.html.j2``,
   ``<name>.md.j2`` from ``report.md.j2``).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from headlens.reports.runs.report import stage_ablation, stage_census, stage_design, stage_evidence, stage_examples, stage_sinks
from headlens.reports.runs.report.context import Stage
from headlens.reports.runs.report.markers import REPORT_VERSION, json_key

log = logging.getLogger(__name__)

__all__ = ["STAGE_DEFS", "STAGES", "STAGE_TITLES", "stage_key"]

#: Every stage by name, in the order they run.
STAGE_DEFS: dict[str, Stage] = {
    s.name: s
    for s in (
        stage_census.STAGE,
        stage_evidence.STAGE,
        stage_sinks.STAGE,
        stage_ablation.ABLATION_ZERO,
        stage_ablation.ABLATION_MEAN,
        stage_ablation.PRUNING,
        stage_examples.STAGE,
        stage_design.STAGE,
    )
}
#: Stage names, in the order they run.
STAGES: tuple[str, ...] = tuple(STAGE_DEFS)
STAGE_TITLES: dict[str, str] = {name: s.title for name, s in STAGE_DEFS.items()}


def stage_key(stage: str, settings: Any, model_key: dict[str, Any]) -> dict[str, Any]:
    """What a finished stage must match to be reused: report version, stage, model, configuration."""
    config = STAGE_DEFS[stage].config(settings)
    if hasattr(config, "__dataclass_fields__"):
        config = dataclasses.asdict(config)
    elif isinstance(config, dict):
        config = {k: dataclasses.asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in config.items()}
    return json_key({"version": REPORT_VERSION, "stage": stage, "model": model_key, "config": config})
