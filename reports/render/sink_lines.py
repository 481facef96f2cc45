"""The census in words when sinks are a population (:mod:`headlens.analyses.heads.sink_population`).

When more than half the heads have the sink role, every view of the census (the printed findings,
``summary.md``, the report page, the notebook view) leads with the specific roles (induction,
previous-token, duplicate-token, referent) and reports the sinks in at most
:data:`MAX_SINK_LINES` lines (:func:`sink_population_lines`): how many heads, and per layer the
mean share of attention on the first token over all queries against a uniformly attending head,
beside the seed text's single-query figure for GPT-2 small (:data:`SEED_SINK_FIGURE`).  A head
whose only role is sink is left out of the head-by-head lists (:func:`listed_heads`).
"""

from __future__ import annotations

import logging
import math

import pandas as pd

from headlens.analyses.heads.sink_population import SINK, SPECIFIC_ROLES, SinkPopulation, sink_only_heads, sink_population
from headlens.analyses.patching.evidence_rules import NOT_TESTED
from headlens.analyses.patching.evidence_sink import sink_sample_verdict

log = logging.getLogger(__name__)

__all__ = [
    "MAX_SINK_LINES",
    "SEED_SINK_FIGURE",
    "population_of",
    "sink_population_lines",
    "role_counts_text",
    "listed_heads",
    "specific_first",
    "sink_evidence_line",
]

#: The most lines the sink population takes in any view.
MAX_SINK_LINES = 5
#: Layers per line of the per-layer shares, at least (more on models of over 3 x this many layers).
LAYERS_PER_LINE = 10
#: The seed text's figure (GUIDE section 2): GPT-2 small, one head, one query.
SEED_SINK_FIGURE = "GPT-2 small in the seed text, one head on one query: 0.61 against 0.16"


def population_of(tables: dict[str, pd.DataFrame]) -> SinkPopulation | None:
    """The census's sink population when sinks are one (more than half the heads), else None
    (``tables``: a census result's, with ``scores`` and ``roles``)."""
    scores, roles = tables.get("scores"), tables.get("roles")
    if scores is None or roles is None or scores.empty or "detector" not in scores:
        return None
    pop = sink_population(scores, roles)
    return pop if pop is not None and pop.is_population else None


def _uniform_text(pop: SinkPopulation) -> str:
    values = [u for u in pop.layer_uniform if math.isfinite(u)]
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return f"{lo:.3f}" if round(lo, 3) == round(hi, 3) else f"{lo:.3f} to {hi:.3f} by layer"


def sink_population_lines(pop: SinkPopulation, indent: str = "  ") -> list[str]:
    """At most :data:`MAX_SINK_LINES` lines: how many heads have the sink role (and how many no
    other), the mean share against uniform with the seed's GPT-2 figure beside it, then the
    per-layer shares in rows of layers."""
    share = f"{100 * pop.n_sink / pop.n_heads:.0f}%" if pop.n_heads else "n/a"
    lines = [
        f"sinks: {pop.n_sink} of {pop.n_heads} heads ({share}) have the sink role, {pop.n_sink_only} of them no other "
        "(not listed head by head)",
        f"share of attention on the first token, mean over heads and all queries of {pop.n_prompts} prompts: "
        f"{pop.mean_share:.2f} against {_uniform_text(pop)} for a uniform head ({SEED_SINK_FIGURE})",
    ]
    n = len(pop.layer_share)
    per_line = max(LAYERS_PER_LINE, math.ceil(n / (MAX_SINK_LINES - len(lines))))
    width = len(str(max(n - 1, 0)))
    for start in range(0, n, per_line):
        stop = min(start + per_line, n) - 1
        values = " ".join("n/a " if not math.isfinite(v) else f"{v:.2f}" for v in pop.layer_share[start : stop + 1])
        lines.append(f"{indent}layers {start:>{width}}-{stop:<{width}}  {values}")
    return lines


def role_counts_text(roles: pd.DataFrame, detectors: list[str]) -> str:
    """``8 induction, 4 previous_token, 4 duplicate_token, 0 referent; 211 sink``: heads per role,
    the specific roles first (those of ``detectors``, the census's)."""
    counts = roles["role"].astype(str).value_counts()
    specific = [r for r in SPECIFIC_ROLES if r in detectors] + [r for r in detectors if r not in SPECIFIC_ROLES and r != SINK]
    text = ", ".join(f"{int(counts.get(r, 0))} {r}" for r in specific)
    return text + (f"; {int(counts.get(SINK, 0))} {SINK}" if SINK in detectors else "")


def listed_heads(heads: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``heads`` (one per head, with ``roles`` joined and ``strongest_detector``) a
    head-by-head list shows when sinks are a population: those with a role other than sink,
    ordered by their strongest role (:data:`SPECIFIC_ROLES` order), then by layer and head."""
    only = sink_only_heads(roles)
    named = heads[heads["roles"].astype(str) != ""]
    keep = [(int(a), int(b)) not in only for a, b in zip(named["layer"], named["head"], strict=True)]
    shown = named[keep]
    order = {r: i for i, r in enumerate(SPECIFIC_ROLES)}
    strongest = shown["strongest_detector"] if "strongest_detector" in shown else pd.Series("", index=shown.index)
    rank = strongest.fillna("").astype(str).map(lambda d: order.get(d, len(order)))
    return shown.assign(_rank=rank).sort_values(["_rank", "layer", "head"], kind="stable").drop(columns="_rank")


def specific_first(table: pd.DataFrame) -> pd.DataFrame:
    """A table with a ``role`` column (the evidence table) with the sink rows last, in their order."""
    if "role" not in table.columns:
        return table
    return table.iloc[sorted(range(len(table)), key=lambda i: str(table["role"].iloc[i]) == SINK)]


def sink_evidence_line(evidence: pd.DataFrame, roles: pd.DataFrame | None = None, seed: int | None = None) -> list[str]:
    """The sink rows of an evidence table in at most two lines when sinks are a population (no
    line without sink rows).  Sampled (:mod:`headlens.analyses.patching.evidence_sink`; ``roles``
    the census's long role table, ``seed`` the evidence's): ``  sink: removal raises the loss for
    11 of 12 sampled sink-only heads (92%, 95% Wilson interval 65%-99%); a random sample (seed 0)
    of the 199 sink-only heads, 187 not tested``, then the sink verdicts of the heads with another
    role; else ``  sink: 200 roles tested: 150 supported, 50 not supported (not listed head by head)``."""
    sinks = evidence[evidence["role"].astype(str) == SINK]
    if sinks.empty:
        return []
    found = sink_sample_verdict(evidence, roles) if roles is not None else None
    if found is None:
        counts = ", ".join(f"{v} {k}" for k, v in sinks["evidence"].value_counts().items())
        if (sinks["evidence"].astype(str) == NOT_TESTED).all():  # roles= left the sink role out
            return [f"  {SINK}: {len(sinks)} roles not tested: {sinks['detail'].iloc[0]}"]
        return [f"  {SINK}: {len(sinks)} roles tested: {counts} (not listed head by head)"]
    tested = found.population - found.not_tested
    sample = f"a random sample{f' (seed {seed})' if seed is not None else ''} of the {found.population} sink-only heads"
    if found.judged:
        line = (
            f"  {SINK}: removal raises the loss for {found.supported} of {found.judged} sampled sink-only heads "
            f"({found.proportion:.0%}, 95% Wilson interval {found.low:.0%}-{found.high:.0%}); {sample}, {found.not_tested} not tested"
        )
    else:
        line = f"  {SINK}: {tested} sampled sink-only heads, no verdict; {sample}, {found.not_tested} not tested"
    if found.untestable:
        line += f"; {found.untestable} sampled not testable"
    lines = [line]
    if found.others:
        counts = ", ".join(f"{v} {k}" for k, v in found.others.items())
        lines.append(f"  {SINK}, heads with another role (all tested): {counts}")
    return lines
