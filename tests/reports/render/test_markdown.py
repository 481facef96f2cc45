"""``report.md`` from its Jinja2 templates over the page's context (no model: a report whose
stages were all skipped, or failed), and the Markdown table lines its template writes."""

from __future__ import annotations

from importlib import resources

import pytest

from headlens.reports.render.markdown import markdown_header, markdown_row, markdown_table
from headlens.reports.render.page.markdown import render_markdown
from headlens.reports.render.page.md_templates import md_environment, md_text
from headlens.reports.render.page.view import page_context

EVIL = "<img src=x onerror=alert(1)> | `tick` *b* _u_ [l] #h\nsecond line"
SECTIONS = ("stages", "heads", "evidence", "sinks", "ablation", "pruning", "design", "examples")


def _bare_report(status: str, error: str | None = None):
    from headlens.reports.runs.report.join import head_table
    from headlens.reports.runs.report.result import Report, StageStatus
    from headlens.reports.runs.report.stages import STAGES

    stages = [StageStatus(name, status, error=error) for name in STAGES]
    r = Report(model=EVIL, n_layers=2, n_heads=3, settings={"quick": True, "prepend_bos": False}, stages=stages, manifest={"seed": 7})
    r.heads = head_table(r)
    return r


def test_markdown_rows_match_the_table_writer():
    rows = [["a|b", ""], [1.23456, None]]
    table = markdown_table(rows, ["x", "y"])
    assert table == "\n".join([markdown_header(["x", "y"]), *(markdown_row(r) for r in rows)])
    assert table.split("\n") == ["| x | y |", "|---|---|", "| a\\|b | |", "| 1.235 | |"]
    assert markdown_row(["**b**", "a|b"], escape=False) == "| **b** | a|b |"
    with pytest.raises(ValueError, match="a row has 1 cells, the header 2"):
        markdown_table([["only"]], ["x", "y"])


def test_markdown_templates_ship_and_escape_nothing_by_themselves():
    page = resources.files("headlens.reports.render.page")
    for name in ("report.md.j2", "macros.md.j2", *(f"sections/{s}.md.j2" for s in SECTIONS)):
        assert page.joinpath(f"templates/{name}").is_file(), name
    env = md_environment()
    assert env.autoescape is False
    assert env.from_string("{{ x }} {{ x|md }}").render(x="<b>|") == "<b>| &lt;b&gt;\\|"


def test_skipped_report_says_so_in_every_section():
    r = _bare_report("skipped")
    md = render_markdown(r)
    assert md == r.markdown() and md.endswith("</details>\n") and not md.endswith("\n\n")
    assert md.startswith(f"# headlens report: {md_text(EVIL)}\n\n2 layers x 3 heads; BOS not prepended; quick run (smoke-test settings).\n")
    assert "<img" not in md and "\\| \\`tick\\` \\*b\\* \\_u\\_ \\[l\\] \\#h second line" in md
    for name in ("census", "evidence", "sinks", "ablation_zero", "ablation_mean", "pruning", "examples", "design"):
        assert f"Stage `{name}` was skipped.\n\n" in md, name
    assert "FAILED" not in md
    assert '```json\n{\n  "seed": 7\n}\n```' in md


def test_failed_report_names_each_stage_and_its_escaped_error():
    r = _bare_report("failed", error=f"RuntimeError: {EVIL}")
    md = render_markdown(r)
    assert "**FAILED**: 8 stage(s) failed: `census`, `evidence`, `sinks`," in md
    shown = f"**FAILED**: stage `sinks`: {md_text('RuntimeError: ' + EVIL)}\n\n"
    assert shown in md and "<img" not in md
    assert md.count("| **FAILED**: RuntimeError: &lt;img") == 8  # the stages table


def test_html_and_markdown_share_one_context():
    r = _bare_report("skipped")
    ctx = page_context(r)
    assert {"stages", "stage_notes", "smoke_notes", "figure_links", "evidence", "examples", "manifest_summary"} <= set(ctx)
    assert ctx["ablation"] == {"ablation_zero": None, "ablation_mean": None} and ctx["design_md"] is None
    assert [row["name"] for row in ctx["table"]["rows"]] == ["0.0", "0.1", "0.2", "1.0", "1.1", "1.2"] and ctx["scores"] == []
