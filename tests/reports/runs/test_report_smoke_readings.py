"""A ``--quick`` report's readings: the smoke label wins on every row of its smoke stages (an
interval across 0 over 2 windows is no more a result than one beside it), and the projection
knockout's lines carry it too (:func:`headlens.analyses.measure.verdicts.difference_verdict`)."""

from __future__ import annotations

import re

from tests.reports.runs.test_report import quick_report  # noqa: F401  (the session's report)

SMOKE_READING = re.compile(r"no finding \(smoke test: \d+ windows\)")


def _part(md: str, title: str) -> str:
    return md.split(f"### {title}\n", 1)[1].split("\n#", 1)[0]


def _rows(part: str) -> list[str]:
    return [ln for ln in part.splitlines() if ln.startswith("| ") and not ln.startswith("| head ")]


def test_every_ablation_row_of_a_quick_report_reads_as_a_smoke_test(quick_report):  # noqa: F811
    md = (quick_report[0] / "report.md").read_text()
    for title in ("Zero ablation", "Mean ablation"):
        rows = _rows(_part(md, title))
        assert rows, title
        assert all(SMOKE_READING.search(r) for r in rows), [r for r in rows if not SMOKE_READING.search(r)]
    assert "not distinguishable" not in md


def test_quick_report_design_readings_and_knockouts_carry_the_smoke_label(quick_report):  # noqa: F811
    out = quick_report[0]
    md = (out / "report.md").read_text()
    design = md.split("## Design questions", 1)[1].split("\n## ", 1)[0]
    gqa = [ln for ln in design.splitlines() if ln.startswith("- g=")]
    knock = [ln for ln in design.splitlines() if ln.startswith("- layer ")]
    assert gqa and knock, design
    for line in gqa:  # each grouping's change (and similar minus adjacent) is worded as a smoke test
        assert "not distinguishable" not in line and len(SMOKE_READING.findall(line)) >= 2, line
    for line in knock:
        assert SMOKE_READING.search(line.split(";", 1)[0]), line  # beside the loss change it qualifies
    assert (out / "design" / "summary.md").read_text().count("no finding (smoke test") >= len(gqa) + len(knock)
    page = (out / "report.html").read_text().split("<script", 1)[0]
    design_html = page.split('<section id="design">', 1)[1].split("</section>", 1)[0]
    assert "not distinguishable" not in design_html and "no finding (smoke test" in design_html
