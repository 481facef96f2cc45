"""The report's design questions in one call: the KV cache, the GQA what-if with both groupings
and the projection knockouts (with the census under each), on one set of evaluation windows
(:func:`headlens.analyses.design.section.design_section_tables`).

:func:`gqa`, :func:`projections` and :func:`kv` (:mod:`headlens.reports.api.design`) answer one
question each, with their own files; this is the three together, as the report's ``design``
stage shows them, returning the tables for the caller to write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from headlens.analyses.design.gqa import GQAConfig
from headlens.analyses.design.projections import ProjectionConfig
from headlens.analyses.design.section import design_section_tables
from headlens.analyses.heads.census import CensusConfig
from headlens.analyses.measure.metrics import default_metric
from headlens.analyses.measure.setup import EvalSetup, eval_setup
from headlens.probes.loading import LoadedModel
from headlens.probes.progress import Progress
from headlens.reports.api.ablate import eval_spec, model_key
from headlens.reports.api.journals import JournalOpener

log = logging.getLogger(__name__)

__all__ = ["design_section", "DesignSection"]


@dataclass(frozen=True)
class DesignSection:
    """The design tables by name (``kv``, ``gqa_summary``, ``gqa_heads``, ``gqa_groups``,
    ``gqa_comparison``, ``knockout_losses``, ``knockout_roles``, ``skipped``: those that ran, and
    ``skipped`` always), the evaluation windows they were measured on (``setup.data``) and, when
    the loss parts were left out, why (``loss_why``)."""

    tables: dict[str, pd.DataFrame]
    setup: EvalSetup
    loss_why: str | None = None


def design_section(
    model: LoadedModel,
    /,
    *,
    gqa: GQAConfig,
    projections: ProjectionConfig,
    census: CensusConfig | None = None,
    text_file: str | None = None,
    n_windows: int = 16,
    window: int = 128,
    prepend_bos: bool = True,
    skip: Mapping[str, str] | None = None,
    journal: JournalOpener | None = None,
    progress: Progress | None = None,
) -> DesignSection:
    """KV cache, GQA what-if and projection knockouts of ``model`` on ``n_windows`` windows of
    ``window`` tokens of the evaluation text (``text_file``, else the model's own held-out text or
    the built-in one).

    ``census``: the census rerun under each knockout (the role changes); None leaves them out.
    ``skip``: parts (``gqa``, ``projections``, ``roles``) not to run, each with the reason the
    caller gives (a row of ``skipped``).  On a model whose next-token loss means nothing (a newly
    initialised output head, an encoder) the GQA what-if and the knockouts are left out with that
    reason instead, and the KV table alone is measured.  ``journal`` opens the run's journal from
    its key (model, data, ``data_fingerprint``, configuration): an interrupted run resumes.
    """
    metric, why = default_metric(model)
    if metric != "loss":
        reason = f"it measures next-token loss, which is not meaningful here: {why}"
        parts = {"gqa": reason, "projections": reason}  # the caller's parts are under these: they would not run either
    else:
        why, parts = None, dict(skip or {})
    spec = eval_spec({"metric": "loss", "text_file": text_file, "n_windows": n_windows, "window": window, "prepend_bos": prepend_bos})
    setup = eval_setup(model, spec, check=False)  # a model whose loss means nothing still gets its KV table (above)
    data = setup.data
    opened = (
        journal(
            {
                "model": model_key(model),
                "data": data.describe(),
                "data_fingerprint": data.fingerprint(),
                "config": {"gqa": vars(gqa), "projections": vars(projections), "census": vars(census) if census else None},
                "skip": parts,
            }
        )
        if journal
        else None
    )
    with opened or contextlib.nullcontext():
        tables = design_section_tables(
            model,
            data,
            gqa=gqa,
            projections=projections,
            census_config=census,
            roles=census is not None,
            skip=parts,
            journal=opened,
            progress=progress,
        )
    return DesignSection(tables=tables, setup=setup, loss_why=why)
