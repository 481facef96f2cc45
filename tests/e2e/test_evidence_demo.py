"""On the demo model: ``headlens classify --evidence`` supports the census's induction and
previous-token heads and writes its files; the quick report's evidence section is a smoke test."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headlens.analyses.patching.evidence import EVIDENCE_COLUMNS, NO_FINDING, NOT_TESTABLE, SUPPORTED
from headlens.reports.cli.main import cli

#: Items per test: the fewest a verdict may come from is 10; 16 keeps the run short.
N_EVIDENCE = 16


@pytest.mark.slow
def test_classify_evidence_on_demo_supports_the_induction_circuit(runner, tmp_path):
    out = tmp_path / "c"
    res = runner.invoke(
        cli, ["classify", "--model", "demo", "--device", "cpu", "--evidence", "--evidence-n", str(N_EVIDENCE), "--out", str(out), "-q"]
    )
    assert res.exit_code == 0, res.output
    roles = pd.read_csv(out / "roles.csv", dtype={"name": str})
    ev = pd.read_csv(out / "evidence.csv", dtype={"name": str})
    assert list(ev.columns) == EVIDENCE_COLUMNS
    assert sorted(zip(ev["name"], ev["role"], strict=True)) == sorted(zip(roles["name"], roles["role"], strict=True))
    for role in ("induction", "previous_token"):
        rows = ev[ev["role"] == role]
        assert len(rows) and (rows["evidence"] == SUPPORTED).all(), ev[
            ["name", "role", "evidence", "figure", "figure_low", "detail"]
        ].to_string()
    assert (ev.loc[ev["evidence"] != NOT_TESTABLE, "n_items"] == N_EVIDENCE).all()
    heads = pd.read_csv(out / "heads.csv", dtype={"name": str}, keep_default_na=False)
    for r in ev.itertuples():
        assert f"{r.role}: {r.evidence}" in heads.loc[heads["name"] == r.name, "evidence"].iloc[0]
    assert (heads.loc[heads["roles"] == "", "evidence"] == "").all()
    assert "## Evidence" in (out / "summary.md").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["evidence"]["n"] == N_EVIDENCE and manifest["evidence"]["file"] == "evidence.csv"
    assert f"evidence: {(ev['evidence'] == SUPPORTED).sum()} supported" in res.output
    assert sum(line.lstrip().split(" ")[0] in set(ev["name"]) for line in res.output.split("evidence:", 1)[1].splitlines()) == len(ev)


@pytest.mark.slow
def test_quick_report_evidence_section_is_a_smoke_test(runner, tmp_path):
    out = tmp_path / "r"
    skip = "sinks,ablation_zero,ablation_mean,pruning,examples,design"
    res = runner.invoke(cli, ["report", "--model", "demo", "--device", "cpu", "--quick", "--skip", skip, "--out", str(out)])
    assert res.exit_code == 0, res.output
    roles = pd.read_csv(out / "census" / "roles.csv", dtype={"name": str})
    page, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    section = page.split('<section id="evidence">', 1)[1].split("</section>", 1)[0]
    assert '<p class="smoke-test">Smoke test (--quick' in section
    for r in roles.itertuples():
        assert f"<td>{r.name}</td><td>{r.role}</td>" in section
    ev = pd.read_csv(out / "evidence" / "evidence.csv")
    assert set(ev["evidence"]) <= {NO_FINDING, NOT_TESTABLE} and (ev["evidence"] == NO_FINDING).any()
    assert SUPPORTED not in section.replace("not supported", "")
    part = md.split("## Evidence for the roles\n", 1)[1].split("\n## ", 1)[0]
    assert "**Smoke test (--quick," in part and NO_FINDING in part
    manifest = json.loads((out / "manifest.json").read_text())
    assert "evidence" in manifest["report"]["smoke_test"]["stages"]
