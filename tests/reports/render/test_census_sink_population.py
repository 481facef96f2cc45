"""The census's views when sinks are a population (issue 45 item 3), on the planted scores table of
tests/analyses/heads/planted_sinks.py (10 of 12 heads sink): the printed findings, ``summary.md`` and the
notebook view lead with the specific roles, report the sinks in at most 5 lines and list no head
whose only role is sink; with half the heads sinking or fewer, every sink head is listed as before."""

from __future__ import annotations

import re

from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.reports.api.census import CensusResult
from headlens.reports.api.census_run import EvidenceRun
from headlens.reports.render.sink_lines import MAX_SINK_LINES, SEED_SINK_FIGURE
from tests.analyses.heads.planted_sinks import DETECTORS, planted_sink_scores
from tests.reports.api.conftest import census_of_scores

#: every head but 0.0, 0.1 (no sink) and 2.1 (induction too): a sink and nothing else
SINK_ONLY = {f"{a}.{b}" for a in range(4) for b in range(3)} - {"0.0", "0.1", "2.1"}


def _census(not_sinks=None) -> CensusResult:
    return census_of_scores(planted_sink_scores(not_sinks), model="planted-sinks")


def _head_lines(lines) -> dict[str, str]:
    return {m.group(1): line for line in lines if (m := re.match(r"\s+(\d+\.\d+)\s", line))}


def test_findings_lead_with_specific_roles_and_sum_up_the_sinks():
    lines = list(_census().findings().lines)
    assert lines[0] == "11 of 12 heads have a role: 1 induction, 1 previous_token, 0 duplicate_token; 10 sink"
    listed = _head_lines(lines)
    assert list(listed) == ["2.1", "0.0"]  # induction first, then previous-token; no sink-only head
    assert listed["2.1"].endswith("induction;sink  (induction 0.800 [0.780, 0.820])")
    sinks = lines[3:]
    assert 0 < len(sinks) <= MAX_SINK_LINES
    assert sinks[0].startswith("sinks: 10 of 12 heads (83%) have the sink role, 9 of them no other")
    assert "against 0.100 for a uniform head" in sinks[1] and SEED_SINK_FIGURE in sinks[1]
    assert sinks[2].split() == ["layers", "0-3", "0.20", "0.45", "0.68", "0.65"]  # per layer: the mean over its heads


def test_summary_lists_the_specific_roles_then_the_sinks():
    summary = _census().summary
    roles = summary.split("## Roles")[1].split("## Strongest heads per detector")[0]
    rows = re.findall(r"^\| (\d+\.\d+) \|", roles, flags=re.M)
    assert rows == ["2.1", "0.0"]
    assert "| 2.1 | induction, sink | 0.800 [0.780, 0.820] (induction) |" in roles
    block = roles.split("### Sinks")[1].split("```")[1].strip().split("\n")
    assert len(block) <= MAX_SINK_LINES and block[0].startswith("sinks: 10 of 12 heads")
    order = re.findall(r"^### (\w+)$", summary.split("## Strongest heads per detector")[1], flags=re.M)
    assert order == [d for d in DETECTORS if d != "sink"] + ["sink"]  # the specific detectors lead


def test_notebook_view_wraps_long_findings_and_leads_with_them():
    page = _census()._repr_html_()
    pre = re.search(r'<pre class="hl-findings" style="([^"]*)">(.*?)</pre>', page, flags=re.S)
    assert pre is not None
    assert "white-space: pre-wrap" in pre.group(1) and "overflow-x" not in pre.group(1)
    assert "induction;sink" in pre.group(2) and "sinks: 10 of 12 heads" in pre.group(2)
    assert not set(_head_lines(pre.group(2).split("\n"))) & SINK_ONLY


def test_half_the_heads_sinking_lists_every_sink_head():
    census = _census(not_sinks={(1, 0), (1, 1), (1, 2), (3, 2)})  # 6 of 12 heads sink: not a population
    lines = list(census.findings().lines)
    assert lines[0] == "7 of 12 heads have a role"
    listed = _head_lines(lines)
    assert set(listed) == {"0.0", "0.2", "2.0", "2.1", "2.2", "3.0", "3.1"}  # the 6 sink heads and 0.0, in layer order
    assert not any(line.startswith("sinks:") for line in lines)
    assert "### Sinks" not in census.summary


def test_heatmaps_say_what_the_outline_means_and_how_many_prompts():
    census = _census()
    sink = census.plot("heatmap_sink").axes[0].get_title()
    assert sink.split("\n") == ["sink score (uniform baseline 0.100)", "red outline: has the role (10 of 12 heads); mean over 20 prompts"]
    assert "has the role (1 of 12 heads)" in census.plot("heatmap_induction").axes[0].get_title()


def _with_evidence() -> CensusResult:
    roles = _census().roles
    pairs = zip(roles["head"], roles["role"], strict=True)
    verdicts = ["supported" if role != "sink" or head % 2 else "not supported" for head, role in pairs]
    table = roles.assign(evidence=verdicts, figure=0.5, figure_low=0.4, figure_high=0.6, unit="nats", n_items=8, test="t", detail="d")
    tested = EvidenceRun(config=EvidenceConfig(), table=table, info={}, composition=[])
    return census_of_scores(planted_sink_scores(), model="planted-sinks", evidence=tested)


def test_evidence_of_the_sinks_is_one_line():
    census = _with_evidence()
    lines = list(census.findings().lines)
    evidence = lines[lines.index("evidence: 7 not supported, 5 supported") + 1 :]
    assert [ln.split()[0] for ln in evidence[:2]] == ["0.0", "2.1"] and "induction" in evidence[1]
    assert evidence[2:] == ["  sink: 10 roles tested: 7 not supported, 3 supported (not listed head by head)"]
    summary = census.summary
    rows = re.findall(r"^\| (\d+\.\d+) \| (\w+) \|", summary.split("## Evidence")[1], flags=re.M)
    assert rows[:2] == [("0.0", "previous_token"), ("2.1", "induction")] and {r for _, r in rows[2:]} == {"sink"}
