"""Issue 20, item 3 and the report's rough edges of item 10: a smoke test or a wide interval
states no finding (one rule, :mod:`headlens.analyses.measure.verdicts`), every quick section is marked
as a smoke test (page, Markdown, manifest, figures), the sink heads have one source of truth
(the census's role), and the page draws no empty heatmap."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.measure.verdicts import MIN_ITEMS, difference_verdict, overlap_verdict
from tests.reports.runs.test_report import quick_report  # noqa: F401  (the session's report)

#: Words that state a finding; none may appear where the rule says there is none.
CONCLUSIONS = ("loses less", "loses more", "lowers the loss", "raises the loss")
SMOKE_STAGES = ["evidence", "sinks", "ablation_zero", "ablation_mean", "pruning", "design"]


def _load(quick_report):  # noqa: F811
    from headlens.reports import load_report

    return load_report(quick_report[0])


def _section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


# --------------------------------------------------------------------------- the rule


def test_the_rule_gives_a_finding_only_past_every_check():
    many = MIN_ITEMS + 6
    assert difference_verdict(-0.13, -0.07, n_items=many).kind == "below"
    assert difference_verdict(0.02, 0.5, n_items=many).kind == "above"
    assert difference_verdict(-0.13, -0.07, n_items=many, smoke=True).why == "smoke_test"  # --quick: no finding
    few = difference_verdict(-0.13, -0.07, n_items=2)
    assert not few.finding and few.why == "few_items"  # 2 windows: the bootstrap takes 3 values
    assert difference_verdict(-0.62, 0.49, n_items=many).kind == "not_distinguishable"
    assert difference_verdict(-0.62, 0.49, n_items=2, smoke=True).why == "smoke_test"  # the smoke label wins on every row
    assert difference_verdict(-0.62, 0.49, n_items=2).kind == "not_distinguishable"
    assert difference_verdict(float("nan"), 0.1, n_items=many).why == "no_interval"
    assert overlap_verdict((1.0, 2.0), (1.5, 3.0), n_items=many).kind == "not_distinguishable"
    assert overlap_verdict((3.1, 4.0), (1.5, 3.0), n_items=many).kind == "above"
    assert overlap_verdict((3.1, 4.0), (1.5, 3.0), n_items=many, smoke=True).kind == "no_finding"


def _gqa(comp_ci=(-0.1309, -0.0749)):
    s = pd.DataFrame(
        [
            {
                "grouping": "original",
                "g": 1,
                "kv_saved": 0.0,
                "loss": 4.67,
                "loss_change": 0.0,
                "change_ci_low": 0.0,
                "change_ci_high": 0.0,
            },
            {
                "grouping": "adjacent",
                "g": 2,
                "kv_saved": 0.5,
                "loss": 4.61,
                "loss_change": -0.0664,
                "change_ci_low": -0.6239,
                "change_ci_high": 0.4910,
            },
            {
                "grouping": "similar",
                "g": 2,
                "kv_saved": 0.5,
                "loss": 4.51,
                "loss_change": -0.1693,
                "change_ci_low": -0.30,
                "change_ci_high": -0.05,
            },
        ]
    )
    comp = pd.DataFrame([{"g": 2, "similar_minus_adjacent": -0.1029, "ci_low": comp_ci[0], "ci_high": comp_ci[1], "same_groups": False}])
    return s, comp


def test_gqa_reading_states_no_finding_from_two_windows_or_a_smoke_test():
    from headlens.reports.render.design_tables import gqa_reading

    s, comp = _gqa()
    cases: list[dict[str, Any]] = [{"n_items": 2}, {"n_items": 16, "smoke": True}]
    for kwargs in cases:
        text = " ".join(gqa_reading(s, comp, **kwargs))
        assert not any(c in text for c in CONCLUSIONS), text
        adjacent = "not distinguishable from 0" if "smoke" not in kwargs else "no finding (smoke test: 16 windows)"
        assert f"-0.0664 [-0.6239, +0.4910] adjacent ({adjacent})" in text
        assert "similar minus adjacent -0.1029 [-0.1309, -0.0749]: no finding" in text
    full = " ".join(gqa_reading(s, comp, n_items=16))  # the same numbers from 16 windows are findings
    assert "similarity grouping loses less" in full and "similar (lowers the loss)" in full
    assert "adjacent (not distinguishable from 0)" in full  # an interval across 0 never is


# --------------------------------------------------------------------------- the quick report


def test_quick_report_page_and_markdown_state_no_finding(quick_report):  # noqa: F811
    out = quick_report[0]
    page, md = (out / "report.html").read_text(), (out / "report.md").read_text()
    body = page.split("<script", 1)[0]
    for text in (body, md):
        assert not any(c in text for c in CONCLUSIONS), [c for c in CONCLUSIONS if c in text]
    for name in ("sinks", "pruning", "design"):
        assert '<p class="smoke-test">Smoke test (--quick' in _section(page, name), name
    for name in ("heads", "heatmaps"):  # the ablation and pruning columns and maps
        assert "Smoke test (--quick): zero \u0394, mean \u0394" in _section(page, name), name
    assert "<strong>" not in _section(page, "pruning").split("removable within", 1)[1].split("</p>", 1)[0]
    assert "(smoke test: no finding)" in _section(page, "pruning")
    for title in ("Attention sinks", "Zero ablation", "Mean ablation", "Pruning curve", "Design questions"):
        part = md.split(f" {title}\n", 1)[1].split("\n#", 1)[0]
        assert "**Smoke test (--quick," in part, title
    assert "no finding (smoke test: 2 windows)" in md or "not distinguishable from 0" in md
    assert "of heads (smoke test: no finding)." in md
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["report"]["smoke_test"]["stages"] == SMOKE_STAGES
    assert {k for k, v in manifest["report"]["stages"].items() if v["smoke_test"]} == set(SMOKE_STAGES)
    assert '"smoke_test"' in md.split("## Manifest", 1)[1]
    for stem in ("pruning/pruning_curve", "ablation_zero/delta_heatmap", "sinks/sink_alpha", "design/gqa_loss_vs_cache"):
        assert "SMOKE TEST (- -quick" in (out / f"{stem}.svg").read_text(), (
            stem
        )  # matplotlib keeps the title's text in a comment (-- written "- -")
    assert "SMOKE TEST" not in (out / "census/heatmap_induction.svg").read_text()  # the census runs in full


def test_full_settings_bring_the_findings_back(quick_report):  # noqa: F811
    """The same rendering with full settings and enough windows words the findings: the smoke
    marks come from the rule, not from leaving words out."""
    r = _load(quick_report)
    r.settings = {**r.settings, "quick": False}
    info = r.stage("design").info
    info["data"] = {**info["data"], "n_windows": 16}
    assert r.design is not None
    r.design = {**r.design, "gqa_comparison": _gqa()[1]}  # similar minus adjacent at g=2: [-0.1309, -0.0749]
    page, md = r.html(), r.markdown()
    assert "similarity grouping loses less" in _section(page, "design") and "similarity grouping loses less" in md
    assert 'class="smoke-test"' not in page and "(smoke test)" not in page and "Smoke test" not in md


# --------------------------------------------------------------------------- one source of truth for sink heads


def test_sink_heads_are_the_census_roles_and_the_stage_count_is_labelled(quick_report):  # noqa: F811
    r = _load(quick_report)
    assert r.scores is not None and r.sinks is not None and r.sink_rates is not None
    bos = bool(r.settings.get("prepend_bos", True))
    # the census gives 1.3 the sink role (0.310); the sinks stage measures 0.297 on its own sequences
    r.roles = pd.DataFrame({"layer": [1, 1], "head": [0, 3], "name": ["1.0", "1.3"], "role": ["induction", "sink"]})
    scores, sinks = r.scores.copy(), r.sinks.copy()
    scores.loc[(scores["detector"] == "sink") & (scores["layer"] == 1) & (scores["head"] == 3), "score"] = 0.310
    alpha = np.where((sinks["layer"] == 1) & (sinks["head"] == 3), 0.297, 0.05)
    sinks["alpha_mean"], sinks["is_sink"] = alpha, alpha > 0.3
    r.scores, r.sinks = scores, sinks
    r.sink_rates = r.sink_rates.assign(n_sink_heads=0)
    page, md = r.html(), r.markdown()
    sinks = _section(page, "sinks")
    row = next(tr for tr in re.findall(r"<tr>(.*?)</tr>", sinks) if ("with BOS" if bos else "no BOS") in tr)
    assert '<td class="num">1 of 8 (1.3)</td><td class="num">0 of 8</td>' in row  # census role, then the stage's own count
    assert "sink heads (census role)" in sinks and "heads with alpha &gt; 0.3 on these sequences" in sinks
    assert "They differ on 1.3: census alpha 0.310 (sink role), sinks stage alpha 0.297." in sinks
    assert "| 1 of 8 (1.3) | 0 of 8 |" in md and "They differ on 1.3" in md
    alpha_map = page.split('id="hm-sink-alpha"', 1)[1].split("</figure>", 1)[0]
    assert re.findall(r'class="cell role" data-head="([\d.]+)"', alpha_map) == ["1.3"]  # outlined: the census's sink heads


# --------------------------------------------------------------------------- item 10: rough edges


def test_no_empty_heatmap_or_column_for_a_detector_without_scores(quick_report):  # noqa: F811
    r = _load(quick_report)
    assert r.scores is not None
    empty = r.scores[r.scores["detector"] == "induction"].assign(
        detector="next_token", score=float("nan"), ci_low=float("nan"), ci_high=float("nan")
    )
    r.scores = pd.concat([r.scores[r.scores["detector"] != "next_token"], empty], ignore_index=True)
    page, md = r.html(), r.markdown()
    assert 'id="hm-next_token"' not in page and 'id="hm-induction"' in page
    header = page.split('<table id="role-table"', 1)[1].split("</thead>", 1)[0]
    assert "next token" not in header and "sink \u03b1" not in header  # the sinks stage's alpha is not beside the census's
    assert "No head has a score for next_token on this model" in page
    assert "`next_token`" not in md.split("## Heads and their roles", 1)[1].split("\n\n", 2)[1]
    assert "heatmap_next_token" not in md


def test_manifest_is_collapsed(quick_report):  # noqa: F811
    page = (quick_report[0] / "report.html").read_text()
    section = _section(page, "manifest")
    assert re.search(r"<details><summary>.*?</summary>\s*<pre class=\"manifest\" id=\"manifest-json\">", section, re.S)
    assert "<details open" not in section


def test_embedding_ablation_title_has_no_change_in_a_change(monkeypatch, tmp_path):
    from headlens.reports.render.figures import ablation

    titles = []
    monkeypatch.setattr(ablation, "save_figure", lambda fig, stem, formats: titles.append(fig.axes[0].get_title()) or [])
    table = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "delta": [0.01, 0.002], "method": "zero", "metric": "embedding"})
    ablation.ablation_heatmap(table, tmp_path / "x", n_layers=1, n_heads=2, baseline=9.13e-14)
    ablation.ablation_heatmap(table.assign(metric="loss"), tmp_path / "y", n_layers=1, n_heads=2, baseline=4.6746)
    assert "change in embedding" not in titles[0] and "e-14" not in titles[0] and "baseline" not in titles[0]
    assert titles[1] == "zero ablation of each head: change in loss (unablated 4.6746)"


def test_figures_are_counted_not_files():
    from headlens.reports.render.figures.common import figures_text

    assert figures_text(["out/sink_lengths.png", "out/sink_lengths.svg"]) == "1 figure (PNG, SVG)"
    assert figures_text(["a.png", "a.svg", "b.png", "b.svg", "b.pdf"]) == "2 figures (PNG, SVG, PDF)"
    assert figures_text([]) == "no figure"


def test_stdout_role_list_says_how_many_more(quick_report, monkeypatch, runner, tmp_path):  # noqa: F811
    from headlens.reports.cli.main import cli
    from headlens.reports.runs.report import build

    r = _load(quick_report)
    big = copy.copy(r)
    big.heads = pd.DataFrame({"layer": [i // 8 for i in range(40)], "head": [i % 8 for i in range(40)]}).assign(
        name=lambda t: t["layer"].astype(str) + "." + t["head"].astype(str)
    )
    big.roles = big.heads.iloc[:37].assign(role="induction")[["layer", "head", "name", "role"]]
    monkeypatch.setattr(build, "build_report", lambda *a, **k: big)
    res = runner.invoke(cli, ["report", "--model", "demo", "--out", str(tmp_path / "r"), "-q"])
    line = next(ln for ln in res.stdout.splitlines() if "have a role" in ln)
    assert line.startswith("37 of 40 heads have a role: 0.0 (induction)")
    assert line.count("(induction)") == 12 and line.endswith("... and 25 more (report.html)")
