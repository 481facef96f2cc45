"""The census, patching and edge scores on a tracr-compiled model (tracr's ``shift_by(1)``: one previous-token head).

The model is compiled by tracr, so its heads' jobs and its edges are known from outside headlens: the
census must name the head's job (previous token) and no other role, patching must find the head, and exact
edge patching must rank the compiled, input-dependent edges above every other edge (AUC 1.0).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")

from headlens.analyses.tracr.build import build_tracr_model, read_ground_truth
from headlens.analyses.tracr.ground_truth import true_edges, varying_edges
from headlens.analyses.tracr.programs import PROGRAMS
from headlens.analyses.tracr.scoring import score_methods, tracr_task
from headlens.probes.errors import InputError
from headlens.probes.loading import load_model


@pytest.fixture(scope="session")
def shift6(tracr_build):
    """shift with inputs up to 6 tokens: context 7 = two copies of 3 random tokens and BOS (the census' shortest)."""
    return tracr_build("shift", max_seq_len=6)


def test_census_names_the_compiled_job_and_nothing_else(shift6, runner, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "census"
    args = ["classify", "-m", str(shift6.folder), "--device", "cpu", "--seq-len", "3", "--window", "7", "-q", "--out", str(out),
            "--detectors", "previous_token,induction,duplicate_token,sink", "--n-prompts", "40"]  # fmt: skip
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    roles = pd.read_csv(out / "roles.csv", dtype={"name": str})
    assert list(zip(roles["name"], roles["role"], strict=True)) == [("0.0", "previous_token")]
    truth = read_ground_truth(shift6.folder)
    job = next(c["job"] for c in truth["components"] if c["node"] == "0.0")
    assert "key indices" in job and "query indices" in job  # the compiled selector: key index == query index - 1


def test_census_refuses_a_repeat_length_where_induction_is_the_previous_token(shift6, runner, tmp_path):
    """At seq_len 2 the induction target of a repeated pair is the previous token: the shift head was named
    induction (1.000) as well as previous_token before seq_len < 3 was refused."""
    from headlens.reports.cli.main import cli

    res = runner.invoke(cli, ["classify", "-m", str(shift6.folder), "--device", "cpu", "--seq-len", "2", "--window", "7",
                              "--detectors", "previous_token,induction", "-q", "--out", str(tmp_path / "c2")])  # fmt: skip
    assert res.exit_code == 2 and "--seq-len must be at least 3" in res.output


def test_patching_finds_the_compiled_head(shift6, runner, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "patch"
    res = runner.invoke(cli, ["patch", "-m", str(shift6.folder), "--device", "cpu", "--task", str(shift6.folder / "pairs.jsonl"),
                              "--n-resamples", "50", "-q", "--out", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "patching.csv", dtype={"name": str})
    row = table[table["name"] == "0.0"].iloc[0]
    assert row["denoising"] == pytest.approx(1.0, abs=1e-4) and row["noising"] == pytest.approx(0.0, abs=1e-4)


def test_exact_edge_patching_auc_on_the_compiled_edges(shift6):
    spec = PROGRAMS["shift"]
    model = load_model(model=str(shift6.folder), device="cpu", dtype="float32")
    truth = read_ground_truth(shift6.folder)
    assert true_edges(truth) == {("embed", "0.0", "q"), ("embed", "0.0", "k"), ("embed", "0.0", "v"), ("0.0", "logits", "logits")}
    # The q/k edges carry only the position directions, the same on every input: no patch can see them.
    assert varying_edges(truth) == {("embed", "0.0", "v"), ("0.0", "logits", "logits")}
    task = tracr_task(model, replace(spec, max_seq_len=6), spec.build(), numerical=False, n_pairs=12)
    table = score_methods(model, truth, task, methods=("exact",))
    row = table.iloc[0]
    assert row["auc_varying"] == 1.0
    assert row["auc_varying_low"] == 1.0 and row["auc_varying_high"] == 1.0  # every resample ranks them the same
    assert row["auc"] == pytest.approx(0.75)  # the two constant edges tie with the four false ones at 0
    with pytest.raises(InputError, match="max_seq_len must be"):
        build_tracr_model("shift", shift6.folder.parent / "bad", max_seq_len=12)
