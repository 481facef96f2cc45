"""``headlens report`` and ``headlens.reports.build_report``: one quick report of the tiny checkpoint,
built once per session and shared; tests that change a report work on a copy of it."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from headlens.reports.cli.main import cli
from tests.helpers import figure_formats

XSS = "<script>alert(1)</script> & \"quotes\" 'too' | pipes"
PROMPTS = ("When Mary and John went to the store, John gave a drink to", XSS)
STAGES = ("census", "evidence", "sinks", "ablation_zero", "ablation_mean", "pruning", "examples", "design")
_BUILT: dict[str, tuple[Path, object]] = {}


def report_args(model: Path, out: Path, *extra: str) -> list[str]:
    args = ["report", "--model", str(model), "--out", str(out), "--quick"]
    for p in PROMPTS:
        args += ["--example-prompt", p]
    return args + list(extra)


@pytest.fixture(scope="session")
def quick_report(tiny_checkpoint, tmp_path_factory, runner, library_figure_formats):
    """``(folder, CliRunner result)`` of ``headlens report --quick`` on the tiny checkpoint, its
    figures in the library's formats (PNG, SVG, PDF: its tests read them).

    Cached at module level, so the browser tests that import this fixture share the one build.
    """
    key = str(tiny_checkpoint)
    if key not in _BUILT:
        out = tmp_path_factory.mktemp("report") / "r"
        with figure_formats(library_figure_formats):
            res = runner.invoke(cli, report_args(tiny_checkpoint, out))
        assert res.exit_code == 0, res.output
        _BUILT[key] = (out, res)
    return _BUILT[key]


@pytest.fixture()
def report_copy(quick_report, tmp_path):
    """A private copy of the session report (for tests that rerun or break it)."""
    dst = tmp_path / "copy"
    shutil.copytree(quick_report[0], dst)
    return dst


def _one_error_line(res) -> str:
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("headlens: error:"), res.output
    assert "Traceback" not in res.output
    return lines[0]


# --------------------------------------------------------------------------- the build


def test_quick_report_writes_pages_stage_folders_and_figures(quick_report):
    out, res = quick_report
    for name in ("report.html", "report.md", "manifest.json"):
        assert (out / name).is_file()
    for stage in STAGES:
        marker = json.loads((out / stage / "stage.json").read_text())
        assert marker["status"] == "done" and marker["stage"] == stage and marker["key"]["config"]
        assert all((out / stage / f).is_file() for f in marker["files"])
    figures = [
        "census/heatmap_induction",
        "census/heatmap_previous_token",
        "sinks/sink_alpha",
        "ablation_zero/delta_heatmap",
        "ablation_mean/delta_heatmap",
        "pruning/pruning_curve",
    ]
    for stem in figures:
        for ext in ("png", "svg", "pdf"):
            assert (out / f"{stem}.{ext}").stat().st_size > 500, f"{stem}.{ext}"
    assert (out / "pruning/pruning_curve.pdf").read_bytes().startswith(b"%PDF")
    err = res.stderr
    for i, stage in enumerate(STAGES, start=1):
        assert f"stage {i}/{len(STAGES)} {stage}: running" in err and re.search(
            rf"stage {i}/{len(STAGES)} {stage}: done in [0-9.]+ s", err
        ), err
    assert f"{len(STAGES)} stages: {len(STAGES)} done" in res.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["report"]["format"] == "headlens.report" and manifest["report"]["quick"] is True
    assert manifest["model"]["n_layers"] == 2 and manifest["config"]["report"]["example_prompts"] == list(PROMPTS)
    assert {k: v["status"] for k, v in manifest["report"]["stages"].items()} == dict.fromkeys(STAGES, "done")


def test_report_object_tables(quick_report):
    from headlens.reports import load_report

    r = load_report(quick_report[0])
    assert r.ok and (r.n_layers, r.n_heads) == (2, 4)
    assert r.roles is not None and r.scores is not None and r.ablation_zero is not None and r.ablation_mean is not None
    assert r.pruning_curve is not None
    assert list(r.heads["name"]) == ["0.0", "0.1", "0.2", "0.3", "1.0", "1.1", "1.2", "1.3"]
    assert list(r.roles.columns) == ["layer", "head", "name", "role"]  # the long table: one row per (head, role)
    for col in (
        "roles",
        "previous_token",
        "induction",
        "duplicate_token",
        "sink",
        "referent",
        "sink_alpha",
        "zero_delta",
        "mean_delta",
        "importance",
        "pruned_at",
    ):
        assert col in r.heads.columns, col
    assert r.heads[["previous_token", "sink_alpha", "zero_delta", "mean_delta", "importance"]].notna().all().all()
    assert len(r.scores) == 8 * r.scores["detector"].nunique() and len(r.ablation_zero) == 8 and len(r.ablation_mean) == 8
    assert set(r.ablation_zero["method"]) == {"zero"} and set(r.ablation_mean["method"]) == {"mean"}
    assert r.pruning_curve["fraction_removed"].iloc[-1] == 1.0 and r.pruning_curve["random_mean"].notna().all()
    assert [e.prompt for e in r.examples] == list(PROMPTS)
    e = r.examples[0]
    assert e.pattern.shape == (2, 4, len(e.tokens), len(e.tokens)) and e.tokens[0] == "<|endoftext|>"
    assert abs(e.pattern[1, 2].sum(-1) - 1).max() < 1e-5  # rows of a softmax


# --------------------------------------------------------------------------- the page


def test_html_is_self_contained(quick_report):
    page = (quick_report[0] / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "src=" not in page.replace('id="hl-data"', "")  # no external script, image or frame
    for url in re.findall(r'href="([^"]*)"', page):
        assert url.startswith(("#", "data:")) or not re.match(r"[a-z]+:", url), url
    assert set(re.findall(r"https?://\S*", page)) == {'http://www.w3.org/2000/svg"'}  # only the inline SVGs' xmlns (pruning, design)
    assert "@import" not in page
    assert len(re.findall(r"<script\b", page)) == 2  # the data block and the one script
    assert page.count('<script type="application/json" id="hl-data">') == 1


def test_html_content(quick_report):
    page = (quick_report[0] / "report.html").read_text()
    rows = re.findall(r'<tr data-head="(\d+\.\d+)"', page)
    assert rows == ["0.0", "0.1", "0.2", "0.3", "1.0", "1.1", "1.2", "1.3"]
    for map_id in (
        "hm-previous_token",
        "hm-induction",
        "hm-duplicate_token",
        "hm-sink",
        "hm-referent",
        "hm-sink-alpha",
        "hm-zero-ablation",
        "hm-mean-ablation",
        "hm-importance",
    ):
        assert f'id="{map_id}"' in page, map_id
    # one pruning chart: the stage's matplotlib figure, inlined (no second, hand-drawn one)
    svg = page.split('<div class="curve">', 1)[1].split("</div>", 1)[0]
    assert svg.startswith("<svg ") and 'id="pruning-svg"' in svg and svg.count("<svg") == 1 and "<path" in svg
    assert "<script" not in svg and "xlink:" not in svg and "<metadata" not in svg
    assert 'id="role-filter"' in page and 'id="head-search"' in page and 'id="manifest-json"' in page
    assert "FAILED" not in page.split("<script", 1)[0]


def test_untrusted_strings_are_escaped(quick_report):
    from headlens.reports.render.page.inline import json_for_script

    out = quick_report[0]
    page = (out / "report.html").read_text()
    assert "<script>alert" not in page and "alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;quotes&#34; &#39;too&#39; | pipes" in page  # Jinja2 autoescape
    data = page.split('<script type="application/json" id="hl-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data and "&" not in data
    payload = json.loads(data)
    assert payload["examples"][1]["prompt"] == XSS and "".join(payload["examples"][1]["view"]["tokens"]).endswith(XSS)
    assert json_for_script({"s": "</script><!--\u2028"}) == '{"s":"\\u003c/script\\u003e\\u003c!--\\u2028"}'
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "\\| pipes" in md


def test_model_names_and_errors_are_escaped(quick_report):
    from headlens.reports import load_report

    r = load_report(quick_report[0])
    evil = "<img src=x onerror=alert(1)>"
    r.model = evil
    r.stages[1] = dataclasses.replace(r.stages[1], status="failed", error=f"RuntimeError: {evil}")
    r.manifest = {**r.manifest, "command": ["headlens", evil]}
    page = r.html()
    assert "<img" not in page and page.count("&lt;img src=x onerror=alert(1)&gt;") >= 4
    assert "<img" not in r.markdown()


def test_html_is_deterministic(quick_report):
    from headlens.reports import load_report

    out = quick_report[0]
    a, b = load_report(out).html(), load_report(out).html()
    assert a == b == (out / "report.html").read_text()
    assert load_report(out).markdown() == (out / "report.md").read_text()


def test_markdown_tables_and_links(quick_report):
    out = quick_report[0]
    md = (out / "report.md").read_text()
    assert md.startswith("# headlens report: ")
    table = [ln for ln in md.splitlines() if re.match(r"\| \d+\.\d+ \| ", ln)]
    assert (
        len([ln for ln in table if ln.count("|") > 10]) == 8
    )  # the role table, one row per head (the other tables have at most 5 columns)
    links = re.findall(r"\]\(([^)]+)\)", md)
    assert any(link.endswith(".pdf") for link in links) and any(link.endswith(".svg") for link in links)
    for link in links:
        assert (out / link).is_file(), link


def test_notebook_repr_is_a_sandboxed_iframe(quick_report):
    from headlens.reports import load_report

    snippet = load_report(quick_report[0])._repr_html_()
    assert snippet.startswith('<iframe srcdoc="&lt;!DOCTYPE html&gt;') and 'sandbox="allow-scripts"' in snippet
    assert "<script" not in snippet


# --------------------------------------------------------------------------- resuming


def test_rerun_loads_every_stage(report_copy, tiny_checkpoint, runner):
    before = (report_copy / "report.html").read_text()
    res = runner.invoke(cli, report_args(tiny_checkpoint, report_copy))
    assert res.exit_code == 0, res.output
    assert "running" not in res.stderr
    for i, stage in enumerate(STAGES, start=1):
        assert f"stage {i}/{len(STAGES)} {stage}: finished earlier, loaded from" in res.stderr
    after = (report_copy / "report.html").read_text()
    cut = re.compile(r'<pre class="manifest".*?</pre>', re.S)
    assert cut.sub("", before) == cut.sub("", after)


def test_python_api_resumes_and_returns_dataframes(report_copy, tiny_checkpoint):
    from headlens import reports

    seen = []

    class Collect(reports.ReportProgress):
        def message(self, text):
            seen.append(text)

        def step(self, label, sub, done, total):
            pass

    r = reports.build_report(tiny_checkpoint, out_dir=report_copy, quick=True, example_prompts=PROMPTS, progress=Collect())
    assert r.ok and all(s.status == "loaded" for s in r.stages) and len(seen) == len(STAGES)
    assert isinstance(r.heads, pd.DataFrame) and isinstance(r.ablation_mean, pd.DataFrame) and isinstance(r.pruning_curve, pd.DataFrame)
    assert "Report(model=" in repr(r) and "census=loaded" in repr(r)


def test_python_api_accepts_a_loaded_model(report_copy, tiny_model):
    from headlens import reports

    r = reports.build_report(tiny_model, out_dir=report_copy, quick=True, example_prompts=PROMPTS)
    assert r.ok and [s.status for s in r.stages] == ["loaded"] * len(STAGES)


def test_interrupted_stage_is_recomputed_alone(report_copy, tiny_checkpoint, quick_report, runner):
    (report_copy / "ablation_mean" / "stage.json").unlink()  # killed before its marker was written
    (report_copy / "report.html").unlink()
    res = runner.invoke(cli, report_args(tiny_checkpoint, report_copy))
    assert res.exit_code == 0, res.output
    assert "stage 5/8 ablation_mean: running" in res.stderr and res.stderr.count("running") == 1
    old = pd.read_csv(quick_report[0] / "ablation_mean" / "ablation.csv")
    new = pd.read_csv(report_copy / "ablation_mean" / "ablation.csv")
    pd.testing.assert_frame_equal(old, new)
    assert (report_copy / "report.html").is_file()


def test_changed_settings_rerun_only_the_stages_they_change(report_copy, tiny_checkpoint, runner):
    args = [
        "report",
        "--model",
        str(tiny_checkpoint),
        "--out",
        str(report_copy),
        "--quick",
        "--example-prompt",
        "A short new prompt.",
        "-q",
    ]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    meta = json.loads((report_copy / "examples" / "examples.json").read_text())
    assert [e["prompt"] for e in meta["examples"]] == ["A short new prompt."]
    marker = json.loads((report_copy / "census" / "stage.json").read_text())
    assert marker["status"] == "done"
    res = runner.invoke(cli, [*args[:-1], "--skip", "pruning,sinks"])
    assert res.exit_code == 0, res.output
    assert "stage 6/8 pruning: skipped" in res.stderr
    page = (report_copy / "report.html").read_text()
    assert "Stage <code>pruning</code>" in page and "was skipped" in page


def test_failed_stage_is_shown_and_retried(report_copy, tiny_checkpoint, monkeypatch, runner):
    from headlens.reports.runs.report.stages import STAGE_DEFS

    def boom(ctx):
        raise RuntimeError("sink probe exploded <b>bold</b>\nsecond line")

    monkeypatch.setitem(STAGE_DEFS, "sinks", dataclasses.replace(STAGE_DEFS["sinks"], run=boom))
    res = runner.invoke(cli, report_args(tiny_checkpoint, report_copy, "--redo", "sinks"))
    assert res.exit_code == 1, res.output
    assert "stage 3/8 sinks: FAILED: RuntimeError: sink probe exploded <b>bold</b>" in res.stderr
    assert res.stderr.count("running") == 1  # the others were loaded
    last = res.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("headlens: error: 1 stage(s) failed (sinks: RuntimeError: sink probe exploded") and "second line" not in res.stderr
    )
    page = (report_copy / "report.html").read_text()
    assert (
        '<span class="status failed">FAILED</span> <span class="error">RuntimeError: sink probe exploded &lt;b&gt;bold&lt;/b&gt;</span>'
        in page
    )
    assert 'id="hm-sink-alpha"' not in page and 'id="hm-induction"' in page
    marker = json.loads((report_copy / "sinks" / "stage.json").read_text())
    assert marker["status"] == "failed" and marker["error"].startswith("RuntimeError: sink probe exploded")
    assert "**FAILED**" in (report_copy / "report.md").read_text()

    monkeypatch.undo()
    res = runner.invoke(cli, report_args(tiny_checkpoint, report_copy))
    assert res.exit_code == 0, res.output
    assert "stage 3/8 sinks: running" in res.stderr and res.stderr.count("running") == 1
    assert "FAILED" not in (report_copy / "report.html").read_text().split("<script", 1)[0]


# --------------------------------------------------------------------------- bad input


def _fake_checkpoint(folder: Path) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_other_models_folder_is_refused(report_copy, tmp_path, runner):
    out = report_copy
    other = _fake_checkpoint(tmp_path / "other-model")
    before = _snapshot(out)
    res = runner.invoke(cli, ["report", "--model", str(other), "--out", str(out), "--quick"])
    assert res.exit_code == 4, res.output
    line = _one_error_line(res)
    assert "holds the report of another model" in line and "--overwrite" in line
    assert _snapshot(out) == before
    # --overwrite lifts the refusal; this fake model then fails to load, still before any write.
    res = runner.invoke(cli, ["report", "--model", str(other), "--out", str(out), "--quick", "--overwrite"])
    assert res.exit_code == 3, res.output
    _one_error_line(res)
    assert _snapshot(out) == before


def test_non_report_folder_is_refused(tiny_checkpoint, tmp_path, runner):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    res = runner.invoke(cli, ["report", "--model", str(tiny_checkpoint), "--out", str(folder), "--quick"])
    assert res.exit_code == 4 and "holds no headlens report" in _one_error_line(res)
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("extra", "code", "needle"),
    [
        (["--example-prompt", ""], 2, "--example-prompt 1 is empty"),
        (["--example-prompt", "fine", "--example-prompt", "   "], 2, "--example-prompt 2 is empty"),
        (["--skip", "everything"], 2, "cannot skip 'everything'"),
        (["--redo", "census,nope"], 2, "cannot redo 'nope'"),
        (["--batch-size", "0"], 2, "--batch-size"),
    ],
)
def test_bad_input_one_line_error_nothing_written(tiny_checkpoint, tmp_path, extra, code, needle, runner):
    out = tmp_path / "fresh"
    res = runner.invoke(cli, ["report", "--model", str(tiny_checkpoint), "--out", str(out), "--quick", *extra])
    assert res.exit_code == code, res.output
    assert needle in _one_error_line(res)
    assert not out.exists()


def test_unknown_model_one_line_error(tmp_path, runner):
    out = tmp_path / "fresh"
    res = runner.invoke(cli, ["report", "--model", str(tmp_path / "no-such-model"), "--out", str(out)])
    assert res.exit_code == 3 and "no such folder" in _one_error_line(res)
    res = runner.invoke(cli, ["report", "--model", "not a model id!", "--out", str(out)])
    assert res.exit_code == 3 and "could not load 'not a model id!'" in _one_error_line(res)
    assert not out.exists()


def test_default_example_prompts_fit(gpt2_tokenizer):
    from headlens.reports.runs.report.build import DEFAULT_EXAMPLE_PROMPTS, MAX_EXAMPLE_TOKENS

    assert 2 <= len(DEFAULT_EXAMPLE_PROMPTS) <= 3
    for p in DEFAULT_EXAMPLE_PROMPTS:
        assert 5 < len(gpt2_tokenizer(p, add_special_tokens=False)["input_ids"]) < MAX_EXAMPLE_TOKENS


# --------------------------------------------------------------------------- the design stage


def test_design_stage_in_the_quick_report(quick_report):
    from headlens.reports import load_report

    out = quick_report[0]
    r = load_report(out)
    assert r.stage("design").ok and r.design is not None
    s = r.design["gqa_summary"]
    assert list(zip(s["grouping"], s["g"], strict=True)) == [
        ("original", 1),
        ("adjacent", 2),
        ("similar", 2),
        ("adjacent", 4),
        ("similar", 4),
    ]
    assert s["kv_saved"].tolist() == [0.0, 0.5, 0.5, 0.75, 0.75]
    assert len(r.design["knockout_losses"]) == 1 + 2 * 3  # intact, then 2 layers x (q=k, v=k, q=k=v)
    assert list(r.design["skipped"]["part"]) == ["roles"] and "knockout_roles" not in r.design  # --quick: no census per knockout
    page = (out / "report.html").read_text()
    section = page.split('<section id="design">', 1)[1].split("</section>", 1)[0]
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="design-gqa-svg" role="img"' in section and "<script" not in section
    assert section.count("<td>adjacent</td>") == 2 and section.count("<td>similar</td>") == 2
    assert "Not run: role changes under knockout: not run with --quick" in section
    assert section.count("<td>q=k</td>") == 2 and "own (MHA, 4 KV heads)" in section
    md = (out / "report.md").read_text()
    assert "## Design questions" in md and "### GQA what-if" in md and "- roles: not run (not run with --quick" in md
    assert "![loss vs KV cache](design/gqa_loss_vs_cache.png)" in md and (out / "design" / "gqa_loss_vs_cache.png").is_file()


def test_skipped_design_stage_says_so(report_copy, tiny_checkpoint, runner):
    res = runner.invoke(cli, report_args(tiny_checkpoint, report_copy, "--skip", "design"))
    assert res.exit_code == 0, res.output
    assert f"stage {len(STAGES)}/{len(STAGES)} design: skipped" in res.stderr and "running" not in res.stderr
    section = (report_copy / "report.html").read_text().split('<section id="design">', 1)[1].split("</section>", 1)[0]
    assert "Stage <code>design</code>" in section and "was skipped" in section and "<table" not in section
    assert "Stage `design` was skipped." in (report_copy / "report.md").read_text()


def test_a_census_given_is_reused_only_when_it_is_the_stage_own():
    """The census stage reuses a census given to it (``report(census=...)``) only with the stage's settings, the
    default thresholds and baseline factor, no mask and the same command, read from the census's run."""
    from headlens.analyses.heads.census_config import CensusConfig
    from headlens.reports.api.census import used_thresholds
    from headlens.reports.runs.report.stage_census import _reusable
    from tests.analyses.heads.planted_sinks import planted_sink_scores
    from tests.reports.api.conftest import census_of_scores

    config = CensusConfig(n_prompts=100, n_bootstrap=1000, batch_size=16)
    given = census_of_scores(planted_sink_scores(), model="planted")
    run = dataclasses.replace(given.run, census=dataclasses.replace(given.run.census, config=config))
    run.thresholds = used_thresholds(run.census.scores["detector"])
    own = dataclasses.replace(given, run=run, manifest={**given.manifest, "command": ["headlens", "report"]})
    assert _reusable(own, config, ["headlens", "report"])
    assert not _reusable(own, config, ["headlens", "classify"])
    assert not _reusable(own, dataclasses.replace(config, seed=1), ["headlens", "report"])
    for change in ({"mask": "pruned.json"}, {"baseline_factor": 3.0}, {"thresholds": {**run.thresholds, "sink": 0.9}}):
        other = dataclasses.replace(own, run=dataclasses.replace(run, **change))
        assert not _reusable(other, config, ["headlens", "report"]), change
