# pyright: reportArgumentType=false, reportCallIssue=false
# (these tests pass strings, lists and single values where the signatures declare tuples: the studies coerce them)
"""A Result's notebook view leads with what its command prints (issue 28 item 6), and ``plot()``
on a result without figures is a one-line library error (item 10).

The views run on the demo model (the package's own checkpoint, offline): the census names 1.3 an
induction head with its score and interval, a one-prompt census says no role was assigned and
why, patching shows the gap and the attribution's agreement, ablation its strongest heads with
intervals, each before the first (collapsed) table.  The CLI prints the same lines (one wording).
"""

from __future__ import annotations

import re

import pytest

import headlens
from headlens.probes.errors import HeadlensError
from headlens.reports.api.census import CensusResult
from headlens.reports.api.result import Result
from headlens.reports.render.census_summary import NO_INTERVAL
from headlens.reports.render.figures.common import detector_figures
from tests.helpers import figure_formats
from tests.reports.api.conftest import session_models


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def demo_census(demo):
    return headlens.census(demo, n_prompts=8, seed=0)


def _findings_block(page: str, *, tables: bool = True) -> str:
    """The findings ``<pre>`` and notes of a view, which must come before the first table
    (``tables=False``: a result that holds none, e.g. a capture's tensors: the whole view)."""
    if not tables:
        assert "<details" not in page
        return page
    first_table = page.find("<details")
    assert first_table > 0, "the tables are collapsed (<details>)"
    assert "<table" not in page[:first_table], "no table before the findings"
    return page[:first_table]


def test_census_view_leads_with_roles_by_head(demo_census):
    head = _findings_block(demo_census._repr_html_())
    assert re.search(r"\d of 8 heads have a role", head)
    line = next(x for x in head.split("\n") if re.match(r"\s*1\.3\s", x))
    assert "induction" in line
    score = demo_census.scores.query("layer == 1 and head == 3 and detector == 'induction'").iloc[0]
    assert f"{score['score']:.3f} [{score['ci_low']:.3f}, {score['ci_high']:.3f}]" in line
    assert "rows x" not in head  # shapes are for the tables below


def test_one_prompt_census_view_warns_that_no_role_was_given(demo):
    one = headlens.census(demo, n_prompts=1, seed=0, detectors=["induction", "previous_token"])
    head = _findings_block(one._repr_html_())
    assert "0 of 8 heads have a role" in head
    assert f"all 16 scores: {NO_INTERVAL.lower()}" in head  # the summary's sentence: too few prompts, roles not assigned
    assert NO_INTERVAL in one.summary


def test_patching_view_shows_the_gap_and_the_attribution_agreement(demo):
    pt = headlens.patch(demo, builtin="induction", n_pairs=12, attribution=True, n_resamples=50)
    head = _findings_block(pt._repr_html_())
    assert f"gap {pt.gap['gap']:.3f}" in head
    agree = pt.manifest["attribution"]["agreement_with_exact"]
    assert pt.attribution_agreement == agree  # a property, not only the manifest
    assert "attribution patching" in head and f"Spearman {agree['spearman']:.3f}" in head
    assert "strongest denoising heads (effect [95% CI])" in head
    top = pt.table.iloc[pt.table["denoising"].abs().argmax()]
    assert f"{top['name']}  {top['denoising']:+.3f} [{top['denoising_low']:+.3f}, {top['denoising_high']:+.3f}]" in head


def test_ablation_view_shows_the_strongest_heads_with_intervals(demo):
    text = "def add(a, b):\n    return a + b\n\n" * 30  # a text of the demo's domain, given: no corpus to read
    ab = headlens.ablate(demo, method="zero", text=text, n_windows=4, window=32, attribution=False, n_bootstrap=50, seed=0)
    head = _findings_block(ab._repr_html_())
    assert "zero ablation of 8 head(s)" in head and "heads with the largest |delta|:" in head
    assert "ci_low" in head and "ci_high" in head and "attribution" not in head  # attribution off: no column of NaN
    assert f"{ab.unablated_value:.6g}" in head


def test_view_escapes_what_it_shows_and_the_repr_stays_short(demo_census):
    evil = CensusResult(run=demo_census.run, manifest={**demo_census.manifest, "model": {"model": "<script>x</script>"}})
    page = evil._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "\n" not in repr(demo_census) and len(repr(demo_census)) < 200


def test_the_cli_prints_the_view_lines(demo, demo_census, runner, tmp_path):
    """One wording: ``headlens classify`` prints exactly the lines the view leads with (the command
    is given the session's demo model; its figures are made, not rendered or written: the test reads its lines)."""
    from headlens.reports.cli.main import cli

    out = tmp_path / "c"
    with session_models({"demo": demo}), figure_formats(()):
        res = runner.invoke(cli, ["classify", "-m", "demo", "--n-prompts", "8", "--seed", "0", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    stdout = res.stdout.split("\n")
    lines = headlens.load(out).findings().lines
    assert lines and lines[0] == demo_census.findings().lines[0]
    assert stdout[0].startswith(lines[0] + " -> ")
    assert list(lines[1:]) == stdout[1 : len(lines)]


def test_plot_without_figures_is_a_one_line_library_error():
    class NoTables(Result):  # a result whose figures are drawn from tables it does not hold, as the census's are
        def _figure_makers(self):
            return detector_figures(self["scores"], self["roles"])

    with pytest.raises(HeadlensError) as empty_census:
        NoTables().plot("heatmap_induction")
    assert "\n" not in str(empty_census.value) and "no figure" in str(empty_census.value) and "scores" in str(empty_census.value)
    with pytest.raises(HeadlensError) as plain:
        Result().plot()
    assert str(plain.value) == "this Result has no figure"


def test_plot_of_an_unknown_name_names_the_figures(demo_census):
    with pytest.raises(HeadlensError, match=r"name='heatmap_nope': no such figure .*figures: heatmap_"):
        demo_census.plot("heatmap_nope")


def test_census_with_evidence_view_shows_the_verdicts(demo, demo_census):
    from headlens.analyses.patching.evidence import EvidenceConfig

    tested = headlens.evidence(demo, demo_census, EvidenceConfig(n=10, T=16))
    head = _findings_block(tested._repr_html_())
    assert tested.evidence is not None and len(tested.evidence)
    assert re.search(r"evidence: \d+ supported", head)
    for r in tested.evidence.itertuples():
        assert re.search(rf"{re.escape(r.name)}\s+{r.role}\s+{re.escape(str(r.evidence))}", head), (r.name, r.role)


def test_every_empty_result_refuses_plot_in_one_line_and_still_renders():
    """No result kind raises a raw KeyError from plot() or its view when its tables are missing."""
    from headlens.reports.api.result import RESULT_KINDS

    for kind, cls in RESULT_KINDS.items():
        try:
            empty = cls()
        except TypeError:  # a kind with a required field besides its tables (pruning's mask)
            continue
        with pytest.raises(HeadlensError) as refused:
            empty.plot()
        assert "\n" not in str(refused.value) and kind in str(refused.value), (kind, str(refused.value))
        assert "<details" not in empty._repr_html_() and not empty.findings()


#: A short text of the demo's domain for the studies that measure a loss (given: no corpus to read).
CODE_TEXT = "def add(a, b):\n    return a + b\n\n" * 30

STUDIES = {
    "capture": lambda m: headlens.capture(m, prompts=["a b c a b", "def f(x):\n    return x"]),
    "verify": lambda m: headlens.verify(m),
    "kv": lambda m: headlens.kv(m),
    "sinks": lambda m: headlens.sinks(m, n_prompts=4, window=32, skip=("content", "secondary", "removal", "windowed")),
    "sink_lengths": lambda m: headlens.sinks(m, lengths=(8, 16), n_long=2),
    "prune": lambda m: headlens.prune(m, text=CODE_TEXT, n_windows=2, window=32, random_seeds=1, step=0.25),
    "gqa": lambda m: headlens.gqa(m, text=CODE_TEXT, n_windows=2, window=32),
    "projections": lambda m: headlens.projections(m, text=CODE_TEXT, n_windows=2, window=32, roles=False),
}


@pytest.mark.parametrize("study", list(STUDIES))
def test_every_study_view_leads_with_its_command_lines(demo, study):
    import html

    result = STUDIES[study](demo)
    found = result.findings()
    assert found.lines, f"{study}: no findings"
    head = _findings_block(result._repr_html_(), tables=bool(result.tables))
    for line in found.lines:
        assert html.escape(line) in head, (study, line)
    for note in found.warnings:
        assert html.escape(note) in head, (study, note)
