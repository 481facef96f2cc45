"""tracr programs compiled, converted to GPT-2 checkpoints and checked against the RASP program's own evaluation.

tracr (``tracr-pypi``, in the test and ``circuits-bench`` extras) compiles; without it these tests skip with
that reason.  The stated input set is every sequence over the program's vocabulary of length 1..max_seq_len
(363 inputs, 1641 positions for a 3-word vocabulary and length 5).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")

from headlens.analyses.tracr import convert
from headlens.analyses.tracr.agreement import check_agreement
from headlens.analyses.tracr.build import build_tracr_model, read_ground_truth
from headlens.analyses.tracr.compile import compile_program
from headlens.analyses.tracr.ground_truth import true_edges
from headlens.analyses.tracr.programs import PROGRAMS, all_inputs
from headlens.probes.errors import InputError
from headlens.probes.loading import load_model

N_INPUTS = 3 + 9 + 27 + 81 + 243  # every sequence over 3 words, lengths 1..5


@pytest.fixture(scope="session")
def hist_build(tracr_build):
    return tracr_build("hist")


def test_hist_checkpoint_agrees_with_rasp_on_every_input(hist_build):
    folder = hist_build.folder
    assert hist_build.agreement.agrees and hist_build.agreement.n_inputs == N_INPUTS
    # Again, independently of the build: a fresh load through headlens' normal path.
    model = load_model(model=str(folder), device="cpu", dtype="float32")
    assert type(model.bridge.original_model).__name__ == "GPT2LMHeadModel"
    spec = PROGRAMS["hist"]
    program = spec.build()
    again = check_agreement(model, program, spec, numerical=False)
    assert again.n_inputs == N_INPUTS and again.n_positions == 5 * 3**5 + 4 * 3**4 + 3 * 3**3 + 2 * 9 + 3
    assert again.n_disagree == 0
    saved = json.loads((folder / "agreement.json").read_text())
    assert saved["n_disagree"] == 0 and saved["n_positions"] == again.n_positions
    assert "make_hist" in (folder / "program.py").read_text()


def test_hist_ground_truth_names_the_jobs_and_the_graph_holds_every_true_edge(hist_build):
    from headlens.analyses.circuits.graph import build_graph

    truth = read_ground_truth(hist_build.folder)
    jobs = {c["node"]: c["job"] for c in truth["components"]}
    assert jobs["0.0"].startswith("SelectorWidth") and "key tokens == query tokens" in jobs["0.0"]
    assert jobs["mlp0"].startswith("SelectorWidth")
    edges = true_edges(truth)
    # hist: the width head reads tokens (q, k) and BOS (v); its MLP reads the head and embed; logits read the MLP.
    assert edges == {("embed", "0.0", "q"), ("embed", "0.0", "k"), ("embed", "0.0", "v"), ("embed", "mlp0", "mlp"),
                     ("0.0", "mlp0", "mlp"), ("mlp0", "logits", "logits")}  # fmt: skip
    model = load_model(model=str(hist_build.folder), device="cpu", dtype="float32")
    assert edges <= set(build_graph(model).keys())


def test_the_check_fails_on_a_checkpoint_whose_norm_is_not_neutralised(tmp_path, monkeypatch):
    """The agreement check can fail: GPT-2's default epsilon rescales the stream and the outputs go wrong."""
    spec = PROGRAMS["hist"]
    compiled = compile_program(spec)
    monkeypatch.setattr(convert, "LN_EPS", 1e-5)
    monkeypatch.setattr(convert, "LN_WEIGHT", 1.0)
    convert.write_checkpoint(compiled, tmp_path / "bad")
    model = load_model(model=str(tmp_path / "bad"), device="cpu", dtype="float32")
    bad = check_agreement(model, compiled.program, spec, numerical=False, inputs=all_inputs(spec, 3))
    assert bad.n_disagree > 0


def test_refusals(hist_build, runner):
    from headlens.reports.cli.main import cli
    from headlens.reports.cli.tracr import PROGRAM_NAMES

    assert set(PROGRAM_NAMES) == set(PROGRAMS)
    with pytest.raises(InputError, match="program='nope'"):
        build_tracr_model("nope", hist_build.folder.parent / "x")
    res = runner.invoke(cli, ["tracr-model", "hist", "--out", str(hist_build.folder)])
    assert res.exit_code == 4 and "--overwrite" in res.output
    assert (hist_build.folder / "ground_truth.json").is_file()  # nothing lost
    res = runner.invoke(cli, ["tracr-model", "hist", "--out", str(hist_build.folder.parent / "y"), "--max-seq-len", "20"])
    assert res.exit_code == 2 and "--max-seq-len must be a whole number from 1 to 8" in res.output, res.output


@pytest.mark.slow
@pytest.mark.parametrize("program", ["frac_prevs", "reverse", "shift", "detect_pattern", "shuffle_dyck"])
def test_program_checkpoint_agrees_with_rasp(program, tracr_build):
    built = tracr_build(program)  # built here, or by the first test that asked for it (tests/analyses/tracr/conftest.py)
    assert built.agreement.agrees and built.agreement.n_disagree == 0
    assert built.agreement.n_positions > 0
    truth = read_ground_truth(built.folder)
    assert any(e["receiver"] == "logits" for e in truth["edges"])


@pytest.mark.slow
def test_sort_is_refused_as_not_causal(tmp_path):
    with pytest.raises(InputError, match="cannot be compiled causally"):
        build_tracr_model("sort", tmp_path / "sort")
    assert not (tmp_path / "sort").exists() and not list(tmp_path.iterdir())
