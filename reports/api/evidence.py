"""``headlens.evidence``: test each role of a census with the intervention that role predicts.

A census says which heads *look* like sink, previous-token, induction ... heads from their attention;
the evidence run asks whether the model *uses* them that way (removing a sink changes the loss,
knocking out a previous-token head hurts induction, ...: :mod:`headlens.analyses.patching.evidence`).
It returns a new :class:`~headlens.reports.api.census.CensusResult`: the census's tables plus
``evidence`` (one row per tested (head, role)), an ``evidence`` column in ``heads``, and the
manifest's ``evidence``, ``config.evidence`` and ``composition_evidence`` entries; saved, that is
``headlens classify --evidence``'s ``evidence.csv`` beside the census files.  The census itself is
not changed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

from headlens.analyses.circuits.composition_evidence import composition_evidence
from headlens.analyses.heads.sink_population import sink_population
from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS, SINK_SAMPLE, EvidenceConfig, evidence_rule, sink_text
from headlens.analyses.patching.evidence_plan import EvidencePlan, evidence_plan, select_tests, time_forward
from headlens.analyses.patching.evidence_sink import sink_sample_verdict
from headlens.probes.config import to_dict
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, weights_fingerprint
from headlens.probes.progress import Progress
from headlens.reports.api.census_run import EvidenceRun
from headlens.reports.api.census_text import census_summary_of
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result
from headlens.reports.render.evidence_text import EVIDENCE_FILE, evidence_joined

if TYPE_CHECKING:  # census.py imports this module (census(evidence=...) calls the verb)
    from headlens.reports.api.census import CensusResult

log = logging.getLogger(__name__)

__all__ = ["evidence", "plan_evidence"]


def evidence(
    model: LoadedModel | str,
    census: CensusResult,
    config: EvidenceConfig | None = None,
    /,
    *,
    n: int = 32,
    T: int = 20,
    seed: int = 0,
    roles: tuple[str, ...] | None = None,
    sink_sample: int = SINK_SAMPLE,
    smoke: bool = False,
    progress: Progress | None = None,
    say: Callable[[str], None] | None = None,
) -> CensusResult:
    """``census`` with each of its roles tested by the intervention the role predicts: a new
    :class:`~headlens.reports.api.census.CensusResult` whose ``evidence`` table holds one row per
    (head, role) with its verdict (``census`` is left as it was).

    ``model``: the model the census was run on (a loaded model, or a name loaded with default
    settings); another shape or other weights is a one-line :class:`InputError`.  ``config`` or
    keywords: :class:`~headlens.analyses.patching.evidence.EvidenceConfig`'s fields: ``n`` pairs,
    sequences or windows per test (at least 10 for a verdict), ``T`` random tokens per copy,
    ``seed``, ``roles`` (the roles to test, default all), ``sink_sample`` (when more than half the
    heads sink: the sink-only heads tested, a seeded random sample; 0: all), ``smoke`` (no
    verdicts: a quick run of the same code).  A census of a pruned model (``mask=``) is refused:
    the interventions run on the unpruned model.  Before it starts, its cost (forwards and the
    time from one measured forward, :func:`plan_evidence`) goes to ``say`` (else the log);
    ``progress("evidence", done, total)`` counts the forwards.
    """
    if not isinstance(census, Result) or census.kind != "census":
        raise InputError(f"census must be a CensusResult (from headlens.census), got {type(census).__name__}", census=None)
    if config is not None and not isinstance(config, EvidenceConfig):
        raise InputError(f"config must be an EvidenceConfig, got {type(config).__name__}", config=None)
    cfg = config if config is not None else EvidenceConfig(n=n, T=T, seed=seed, roles=roles, sink_sample=sink_sample, smoke=smoke)
    if census.run.mask:
        raise InputError(
            "evidence with mask: the interventions run on the unpruned model, so they would not test the pruned model's roles",
            mask=census.run.mask,
        )
    loaded = as_loaded(model)
    _check_same_model(loaded, census)
    prepend_bos = census.run.census.config.prepend_bos
    cfg.check_fits(loaded)
    role_table = census.roles
    plan = plan_evidence(loaded, census, cfg)
    (say or log.info)(plan.text())
    start = time.perf_counter()
    population = _is_population(census)
    table = (
        cfg.run(loaded, role_table, prepend_bos=prepend_bos, population=population, progress=progress)
        if len(role_table)
        else pd.DataFrame(columns=EVIDENCE_COLUMNS)
    )
    info = {
        "file": EVIDENCE_FILE,
        "prepend_bos": prepend_bos,
        "rule": evidence_rule(),
        "counts": table["evidence"].value_counts().to_dict(),
        "sink_text": sink_text(loaded).describe(),  # which text the sink test read, why, its sha256 and length
        "plan": plan.describe(),
        "seconds": round(time.perf_counter() - start, 1),
    }
    sample = select_tests(role_table, only=cfg.roles, sink_sample=cfg.sink_sample, population=population, seed=cfg.seed).sink
    if sample is not None and sample.sampled_out:  # the sink role on a random sample: which, and the population's verdict
        verdict = sink_sample_verdict(table, role_table)
        info["sink_sample"] = {**sample.describe(), **(verdict.describe() if verdict is not None else {})}
    # weights only: previous-token -> induction K-composition
    tested = EvidenceRun(config=cfg, table=table, info=info, composition=composition_evidence(loaded, role_table))
    return _with_evidence(census, tested)


def _with_evidence(census: CensusResult, tested: EvidenceRun) -> CensusResult:
    """``census`` with the evidence run ``tested``: its table, an ``evidence`` column in ``heads``, the manifest's
    ``evidence``, ``config.evidence`` and ``composition_evidence`` entries and the summary with its sections."""
    heads = census.heads.copy()
    heads["evidence"] = evidence_joined(tested.table, heads)
    run = dataclasses.replace(census.run, heads=heads, evidence=tested)
    recorded = census.manifest
    manifest = {
        **recorded,
        "evidence": tested.info,
        "config": {**recorded.get("config", {}), "evidence": to_dict(tested.config)},
        "composition_evidence": tested.composition,
    }
    out = dataclasses.replace(census, run=run, manifest=manifest)
    out.summary = census_summary_of(run, model=str(out.model_name))
    return out


def _is_population(census: CensusResult) -> bool:
    """Sinks are a population in ``census`` (more than half the heads have the sink role: the census's rule)."""
    pop = sink_population(census.scores, census.roles) if len(census.scores) else None
    return pop is not None and pop.is_population


def plan_evidence(model: LoadedModel, census: CensusResult, config: EvidenceConfig, *, timed: bool = True) -> EvidencePlan:
    """What :func:`evidence` will test on ``census`` and what it costs: the heads per role, the
    forwards, and (``timed``) the time from one measured forward over ``config.n`` items."""
    chosen = select_tests(
        census.roles, only=config.roles, sink_sample=config.sink_sample, population=_is_population(census), seed=config.seed
    )
    plan = evidence_plan(chosen, n=config.n, T=config.T)
    return time_forward(model, plan, seed=config.seed) if timed else plan


def _check_same_model(loaded: LoadedModel, census: CensusResult) -> None:
    """A one-line error when ``loaded`` is not the model ``census`` measured (shape, or weights where both are known)."""
    recorded = census.manifest.get("model") or {}
    if not isinstance(recorded, dict):
        return
    for key, have in (("n_layers", loaded.n_layers), ("n_heads", loaded.n_heads)):
        if recorded.get(key) is not None and int(recorded[key]) != int(have):
            raise InputError(
                f"model: {key}={have}, but the census was run on a model with {key}={recorded[key]} ({recorded.get('model')!r})",
                model=loaded.name,
            )
    want = recorded.get("weights_sha256")
    have_sha = weights_fingerprint(loaded) if want and loaded.source == "local" else None  # as the manifest's weights_sha256
    if want and have_sha and want != have_sha:
        raise InputError(f"model: its weights differ from those the census was run on ({recorded.get('model')!r})", model=loaded.name)
