"""The report page when sinks are a population (issue 45 item 3): the census's findings above the head
table (the specific roles first, the sinks in at most 5 lines), each score's interval in the table, the
table opening on the heads with a role other than sink, and heatmap notes that say what the outline
means and how many prompts the scores rest on.  The quick report of the tiny checkpoint with the
planted scores of tests/analyses/heads/planted_sinks.py in place of its census (10 of 12 heads sink)."""

from __future__ import annotations

import copy
import json
import re

from headlens.analyses.heads.classify import classify_heads
from tests.analyses.heads.planted_sinks import N_HEADS, N_LAYERS, planted_sink_scores
from tests.reports.runs.test_report import quick_report  # noqa: F401  (the session's report)


def _planted_report(quick_report, not_sinks=None):  # noqa: F811
    from headlens.reports import load_report
    from headlens.reports.runs.report.join import head_table

    report = copy.copy(load_report(quick_report[0]))
    scores = planted_sink_scores(not_sinks)
    classified = classify_heads(scores)
    report.n_layers, report.n_heads = N_LAYERS, N_HEADS
    report.scores, report.roles, report.strongest = scores, classified.roles, classified.heads
    report.sinks = report.sink_rates = report.evidence = None
    report.ablation_zero = report.ablation_mean = report.importance = report.pruning_curve = None
    report.examples = []
    report.heads = head_table(report)
    return report


def _section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


def test_page_leads_with_the_findings_and_shows_intervals(quick_report):  # noqa: F811
    report = _planted_report(quick_report)
    strongest = report.strongest
    assert strongest is not None
    strongest.loc[strongest["name"] == "3.2", "strongest_score"] = 0.99  # a sink-only head scoring highest
    page = report.html()
    data = json.loads(page.split('<script type="application/json" id="hl-data">', 1)[1].split("</script>", 1)[0])
    assert data["initial"] == "2.1"  # the page shows first the strongest head with a role other than sink
    heads = _section(page, "heads")
    findings = re.search(r'<pre class="findings" id="census-findings">(.*?)</pre>', heads, flags=re.S)
    assert findings is not None and heads.index("census-findings") < heads.index('id="role-table"')
    lines = findings.group(1).strip().split("\n")
    assert lines[0] == "11 of 12 heads have a role: 1 induction, 1 previous_token, 0 duplicate_token; 10 sink"
    assert [ln.split()[0] for ln in lines[1:3]] == ["2.1", "0.0"]  # no head whose only role is sink
    assert lines[3].startswith("sinks: 10 of 12 heads") and len(lines) - 3 <= 5
    assert '<option value="+" selected>' in heads  # the table opens on the heads with another role
    row = re.search(r'<tr data-head="2.1".*?</tr>', heads, flags=re.S)
    assert row is not None and '0.800<span class="ci">[0.780, 0.820]</span>' in row.group(0)


def test_heatmap_notes_say_what_the_outline_means_and_how_many_prompts(quick_report):  # noqa: F811
    page = _section(_planted_report(quick_report).html(), "heatmaps")
    assert "outlined: heads with the role (10 of 12); mean over 20 prompts" in page
    assert "outlined: heads with the role (1 of 12); mean over 20 prompts" in page


def test_without_a_population_the_table_opens_on_every_head(quick_report):  # noqa: F811
    report = _planted_report(quick_report, not_sinks={(1, 0), (1, 1), (1, 2), (3, 2)})  # 6 of 12: half
    heads = _section(report.html(), "heads")
    assert '<option value="+">' in heads and "selected" not in heads.split('id="role-filter"')[1].split("</select>")[0]
    assert "sinks:" not in heads
    assert "- 7 of 12 heads have a role\n- 0.0  previous\\_token" in report.markdown()  # the findings, in report.md too
