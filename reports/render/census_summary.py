"""The Markdown summary of a head census."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from headlens.analyses.heads.classify import without_interval
from headlens.analyses.heads.detectors import registry
from headlens.analyses.heads.sink_population import SINK, SinkPopulation
from headlens.reports.render.evidence_text import evidence_markdown
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.sink_lines import (
    listed_heads,
    population_of,
    role_counts_text,
    sink_evidence_line,
    sink_population_lines,
    specific_first,
)
from headlens.reports.render.tables import head_roles_table, roles_joined

__all__ = ["census_summary", "composition_markdown", "NO_INTERVAL"]

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
    (:class:`headlens.analyses.heads.classify.HeadRoles`); ``notes`` (``CensusResult.notes``) are the sliding-window notes, read from
    the stimuli info's ``window_notes`` when not given.  The stimuli info's ``notes`` (bidirectional
    attention, detectors not measurable on causal attention) get a section of their own.  ``evidence``
    (:func:`headlens.analyses.patching.evidence.role_evidence`'s table) adds an Evidence section;
    ``composition`` (:func:`headlens.analyses.circuits.composition.composition_evidence`'s lines) a
    data-free Composition note after it."""
    reg = registry()
    framing = next((info.get("framing") for info in stimuli.values() if info.get("framing")), None) or {}
    if framing.get("suffix"):  # an encoder's [CLS] ... [SEP]
        wrapped = " ".join([*framing.get("prefix", []), "text", *framing["suffix"]])
        opening = f"Each prompt is framed as **{wrapped}**."
    else:
        opening = f"BOS prepended: **{'yes' if prepend_bos else 'no'}**."
    lines = [
        f"# Head census: {model}",
        "",
        f"{opening} Scores are means over prompts with 95% bootstrap intervals; "
        "the baseline is what a head attending uniformly would score on exactly the same positions.",
        "",
        "## Stimuli",
        "",
    ]
    for kind, info in stimuli.items():
        lines.append(f"- {kind}: {info['source']}")
    if notes is not None:
        window_notes = [str(x) for x in notes["note"]]
    else:
        window_notes = [str(x) for info in stimuli.values() for x in info.get("window_notes", ())]
    if window_notes:
        lines += [
            "",
            "## Sliding windows",
            "",
            "Some layers attend within a sliding window. There the baseline is uniform over the keys the window allows, "
            "and positions whose target key lies outside the window are not measurable: they are left out of the means "
            "(`n` counts the prompts measured), a head with no measurable prompt shows n/a, and n/a never gives a role.",
            "",
        ]
        lines += [f"- {note}" for note in window_notes]
    other_notes = list(dict.fromkeys(str(x) for info in stimuli.values() for x in info.get("notes", ())))
    if other_notes:
        lines += ["", "## Notes", "", "A score that is not measurable shows n/a and never gives a role.", ""]
        lines += [f"- {note}" for note in other_notes]
    lines += ["", "## Roles", ""]
    heads, long = classified.heads, classified.roles
    joined = roles_joined(long, heads, sep=", ")
    named = [
        (r.name, text, f"{r.strongest_score:.3f} ({r.strongest_detector})")
        for r, text in zip(heads.itertuples(), joined, strict=True)
        if text
    ]
    unresolved = without_interval(scores)
    population = population_of({"scores": scores, "roles": long})
    if population is not None:  # sinks are the default state: the specific roles' heads, then the sinks as one population
        lines += _population_roles(head_roles_table(classified), long, scores, population)
    elif named:
        lines += markdown_table(named, ["head", "roles", "strongest score"]).split("\n")
    elif unresolved.any() and not (scores["score"].notna() & ~unresolved).any():
        lines.append(NO_INTERVAL + ".")
    else:
        lines.append("No head cleared a threshold.")
    if unresolved.any() and (named or (scores["score"].notna() & ~unresolved).any()):
        lines += ["", f"{int(unresolved.sum())} of {int(scores['score'].notna().sum())} scores: {NO_INTERVAL.lower()} for them."]
    counts = {det: int((long["role"] == det).sum()) for det in scores["detector"].unique()}
    lines += [
        "",
        f"{len(named)} of {len(heads)} heads have at least one role; " + ", ".join(f"{k}: {v}" for k, v in counts.items()) + ".",
        "",
    ]
    if evidence is not None:
        lead = [x.strip() for x in sink_evidence_line(evidence, long)] if population is not None else []
        lines += evidence_markdown(specific_first(evidence) if population is not None else evidence, lead=lead)
    if composition:
        lines += composition_markdown(composition)
    lines += ["## Strongest heads per detector", ""]
    groups = list(scores.groupby("detector", sort=False))
    if population is not None:  # the specific roles lead
        groups = [g for g in groups if g[0] != SINK] + [g for g in groups if g[0] == SINK]
    for det, g in groups:
        d = reg.get(str(det))
        lines += [f"### {det}", "", f"{d.summary if d else ''}. Threshold {thresholds.get(str(det), float('nan')):.2f}.", ""]
        if g["score"].isna().all():
            lines += ["Not measurable on this model (see Notes): every score is n/a.", ""]
            continue
        has_acc = g["accuracy"].notna().any()
        header = ["head", "score", "95% CI", "baseline", "n"] + (["accuracy"] if has_acc else [])
        rows = [
            [f"{r.layer}.{r.head}", _fmt(r.score), f"[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]", _fmt(r.baseline), str(r.n)]
            + ([_fmt(r.accuracy)] if has_acc else [])
            for r in g.sort_values("score", ascending=False).head(top).itertuples()
        ]
        lines += markdown_table(rows, header).split("\n")
        lines += ["", f"![{det}](heatmap_{det}.png)", ""]
    lines += [
        "## Rule",
        "",
        f"A head gets a role when its score is at least the threshold and the lower end of its interval is at least "
        f"{baseline_factor:g} x the uniform baseline. Referent heads instead need a one-sided sign test over sentence pairs with "
        "Holm-corrected p at most the referent threshold, more than half the pairs won, and an antecedent - distractor interval above 0 "
        "(docs/methods.md, 'The referent rule'). "
        "Thresholds: " + ", ".join(f"{k}={v:g}" for k, v in thresholds.items() if k in set(scores["detector"].astype(str))) + ".",
        "",
    ]
    return "\n".join(lines)


def _population_roles(heads: pd.DataFrame, roles: pd.DataFrame, scores: pd.DataFrame, population: SinkPopulation) -> list[str]:
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
    counts = role_counts_text(roles, [str(d) for d in scores["detector"].unique()])
    lines = [
        f"Heads per role: {counts}. Most heads park attention on the first token, so the heads listed are those "
        "with a role other than sink; the sinks follow as a population.",
        "",
    ]
    lines += (
        markdown_table(rows, ["head", "roles", "strongest role other than sink, 95% CI"]).split("\n")
        if rows
        else ["No head has a role other than sink."]
    )
    return [*lines, "", "### Sinks", "", "```", *sink_population_lines(population, indent=""), "```"]


def composition_markdown(composition: Sequence[str]) -> list[str]:
    """The census's composition note: a second, data-free line of evidence (weights only), one bullet per pair."""
    lines = ["## Composition (weights, no data)", ""]
    lines += ["Previous-token -> induction heads: K-composition of the weights against random matrices of the same shapes.", ""]
    return [*lines, *(f"- {line.removeprefix('composition (weights, no data): ')}" for line in composition), ""]
