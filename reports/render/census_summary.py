"""The Markdown summary of a head census: ``summary.md``, rendered from ``templates/summaries/census.md.j2``
(:func:`headlens.reports.render.page.md_templates.md_environment`); this module computes and formats its numbers and tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from headlens.analyses.heads.classify import without_interval
from headlens.analyses.heads.detectors import registry
from headlens.analyses.heads.sink_population import SINK, SinkPopulation
from headlens.reports.render.evidence_text import evidence_view
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.page.md_templates import md_environment
from headlens.reports.render.sink_lines import (
    listed_heads,
    population_of,
    role_counts_text,
    sink_evidence_line,
    sink_population_lines,
    specific_first,
)
from headlens.reports.render.tables import head_roles_table, roles_joined

__all__ = ["census_summary", "NO_INTERVAL"]

#: Said where measured scores have no bootstrap interval, so no role can be given.
NO_INTERVAL = "No interval (too few prompts or resamples: an interval needs at least 2 prompts): roles not assigned"


def _fmt(x: float) -> str:
    return "n/a" if pd.isna(x) else f"{x:.3f}"


def census_summary(
    scores: pd.DataFrame,
    classified: Any,
    *,
    model: str,
    prepend_bos: bool,
    thresholds: Mapping[str, float],
    baseline_factor: float,
    stimuli: Mapping[str, Mapping[str, Any]],
    top: int = 5,
    notes: pd.DataFrame | None = None,
    evidence: pd.DataFrame | None = None,
    composition: Sequence[str] | None = None,
) -> str:
    """The summary of ``scores`` and their roles ``classified``
    (:class:`headlens.analyses.heads.classify.HeadRoles`), rendered from ``summaries/census.md.j2``;
    ``notes`` (``CensusResult.notes``) are the sliding-window notes, read from
    the stimuli info's ``window_notes`` when not given.  The stimuli info's ``notes`` (bidirectional
    attention, detectors not measurable on causal attention) get a section of their own.  ``evidence``
    (:func:`headlens.analyses.patching.evidence.role_evidence`'s table) adds an Evidence section;
    ``composition`` (:func:`headlens.analyses.circuits.composition_evidence.composition_evidence`'s lines) a
    data-free Composition note after it."""
    framing = next((info.get("framing") for info in stimuli.values() if info.get("framing")), None) or {}
    if notes is not None:
        window_notes = [str(x) for x in notes["note"]]
    else:
        window_notes = [str(x) for info in stimuli.values() for x in info.get("window_notes", ())]
    long = classified.roles
    population = population_of({"scores": scores, "roles": long})
    context = {
        "model": model,
        "framed": " ".join([*framing.get("prefix", []), "text", *framing["suffix"]]) if framing.get("suffix") else None,
        "prepend_bos": prepend_bos,
        "stimuli": [(kind, info["source"]) for kind, info in stimuli.items()],
        "window_notes": window_notes,
        "other_notes": list(dict.fromkeys(str(x) for info in stimuli.values() for x in info.get("notes", ()))),
        **_roles_view(scores, classified, population),
        "evidence": None if evidence is None else _evidence_view(evidence, long, population),
        "composition": [line.removeprefix("composition (weights, no data): ") for line in composition or ()],
        "detectors": _detector_views(scores, thresholds, population, top),
        "baseline_factor": baseline_factor,
        "thresholds": [(k, v) for k, v in thresholds.items() if k in set(scores["detector"].astype(str))],
    }
    return md_environment().get_template("summaries/census.md.j2").render(**context)


def _roles_view(scores: pd.DataFrame, classified: Any, population: SinkPopulation | None) -> dict[str, Any]:
    """The Roles section's parts: the sink population's, or the table of heads with a role, and the counts."""
    heads, long = classified.heads, classified.roles
    joined = roles_joined(long, heads, sep=", ")
    named = [
        (r.name, text, f"{r.strongest_score:.3f} ({r.strongest_detector})")
        for r, text in zip(heads.itertuples(), joined, strict=True)
        if text
    ]
    unresolved = without_interval(scores)
    resolved = bool((scores["score"].notna() & ~unresolved).any())
    return {
        "population": None if population is None else _population_view(head_roles_table(classified), long, scores, population),
        "named_table": markdown_table(named, ["head", "roles", "strongest score"]) if named else None,
        "no_interval_only": bool(unresolved.any()) and not resolved,
        "no_interval": NO_INTERVAL,
        "n_unresolved": int(unresolved.sum()) if unresolved.any() and (named or resolved) else 0,
        "n_measured": int(scores["score"].notna().sum()),
        "n_named": len(named),
        "n_heads": len(heads),
        "role_counts": [(det, int((long["role"] == det).sum())) for det in scores["detector"].unique()],
    }


def _evidence_view(evidence: pd.DataFrame, roles: pd.DataFrame, population: SinkPopulation | None) -> dict[str, Any]:
    """The Evidence section's parts; with a sink population the specific roles first and the sinks' verdict leading."""
    lead = [x.strip() for x in sink_evidence_line(evidence, roles)] if population is not None else []
    return evidence_view(specific_first(evidence) if population is not None else evidence, lead=lead)


def _detector_views(
    scores: pd.DataFrame, thresholds: Mapping[str, float], population: SinkPopulation | None, top: int
) -> list[dict[str, Any]]:
    """Per detector: its summary, threshold and the table of its ``top`` heads (None when every score is n/a)."""
    reg = registry()
    groups = list(scores.groupby("detector", sort=False))
    if population is not None:  # the specific roles lead
        groups = [g for g in groups if g[0] != SINK] + [g for g in groups if g[0] == SINK]
    out = []
    for det, g in groups:
        d = reg.get(str(det))
        table = None
        if not g["score"].isna().all():
            has_acc = g["accuracy"].notna().any()
            header = ["head", "score", "95% CI", "baseline", "n"] + (["accuracy"] if has_acc else [])
            rows = [
                [f"{r.layer}.{r.head}", _fmt(r.score), f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]", _fmt(r.baseline), str(r.n)]
                + ([_fmt(r.accuracy)] if has_acc else [])
                for r in g.sort_values("score", ascending=False).head(top).itertuples()
            ]
            table = markdown_table(rows, header)
        out.append({"name": det, "summary": d.summary if d else "", "threshold": thresholds.get(str(det), float("nan")), "table": table})
    return out


def _population_view(heads: pd.DataFrame, roles: pd.DataFrame, scores: pd.DataFrame, population: SinkPopulation) -> dict[str, Any]:
    """The Roles section when sinks are a population: the heads with a role other than sink (their
    strongest such role with its interval), then the sinks in at most five lines."""
    listed = listed_heads(heads, roles)
    score_of = scores.set_index(["layer", "head", "detector"])
    rows = []
    for r in listed.itertuples():
        s = score_of.loc[(r.layer, r.head, r.strongest_detector)]
        rows.append(
            [
                r.name,
                str(r.roles).replace(";", ", "),
                f"{_fmt(s['score'])} [{_fmt(s['ci_low'])}, {_fmt(s['ci_high'])}] ({r.strongest_detector})",
            ]
        )
    return {
        "counts": role_counts_text(roles, [str(d) for d in scores["detector"].unique()]),
        "table": markdown_table(rows, ["head", "roles", "strongest role other than sink, 95% CI"]) if rows else None,
        "lines": sink_population_lines(population, indent=""),
    }
