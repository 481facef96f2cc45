"""Issue 46, items 6 and 5 on tracr models: ``headlens circuit`` on a tracr folder prints the edge ROC AUC against the
compiled edges with its interval (item 6), and zero ablation sees the edges that carry constant signals (item 5:
ACDC's zero-ablation AUC is 1.000 on reverse and frac_prevs, against its own reference circuit; the target is >= 0.95)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.ground_truth import read_truth, truth_auc
from headlens.analyses.circuits.run import score_edges
from headlens.analyses.tracr.programs import PROGRAMS
from headlens.analyses.tracr.scoring import tracr_task
from headlens.probes.errors import InputError
from headlens.probes.loading import load_model


def test_circuit_on_a_tracr_folder_prints_the_auc(tracr_build, runner, tmp_path):
    from headlens.reports.cli.main import cli

    shift = tracr_build("shift")
    out = tmp_path / "circuit"
    args = ["circuit", "-m", str(shift.folder), "--device", "cpu", "--method", "exact", "--n-bootstrap", "50", "-q",
            "--out", str(out)]  # fmt: skip
    res = runner.invoke(cli, args)  # no --task: the folder's pairs.jsonl; no --ground-truth: its ground_truth.json
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("ground truth"))
    # shift: 4 compiled edges, 2 input-dependent; exact patching scores the 2 constant ones 0, tied with the false ones
    assert "edge ROC AUC 0.750 [0.750, 0.750] against its 4 true edges of 8" in line
    assert "1.000 [1.000, 1.000] against the 2 input-dependent ones" in line
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["circuit"]["ground_truth"] == str(shift.folder / "ground_truth.json")
    assert manifest["circuit"]["summary"]["ground_truth"]["auc_input"] == 1.0


def test_a_ground_truth_file_for_another_model_is_one_line(tracr_build, runner, tmp_path):
    from headlens.reports.cli.main import cli

    shift = tracr_build("shift")
    bad = tmp_path / "truth.json"
    bad.write_text(json.dumps({"edges": [{"sender": "7.0", "receiver": "logits", "input": "logits"}]}))
    args = ["circuit", "-m", str(shift.folder), "--device", "cpu", "--method", "exact", "--n-bootstrap", "20", "-q",
            "--ground-truth", str(bad), "--task", str(shift.folder / "pairs.jsonl"), "--out", str(tmp_path / "o")]  # fmt: skip
    res = runner.invoke(cli, args)
    assert res.exit_code == 2 and "7.0 -> logits (logits) is not an edge of this model's graph" in res.output
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(InputError, match="has no 'edges' list"):
        read_truth(tmp_path / "empty.json")


def _zero_vs_corrupted(tracr_build, program: str, every_length: bool) -> dict:
    built = tracr_build(program)
    spec = PROGRAMS[program]
    model = load_model(model=str(built.folder), device="cpu", dtype="float32")
    truth = read_truth(built.folder / "ground_truth.json")
    graph = build_graph(model)
    got = {}
    for ablation in ("corrupted", "zero"):
        task = tracr_task(model, spec, spec.build(), numerical=program == "frac_prevs", n_pairs=16,
                          every_length=every_length and ablation == "zero")  # fmt: skip
        per_pair = score_edges(model, task, graph, CircuitConfig(method="exact", ablation=ablation))
        got[ablation] = truth_auc(truth, graph.edges.iloc[per_pair.edge_ids], per_pair.values, n_bootstrap=50)
    return got


@pytest.mark.parametrize("every_length", [False, True])
def test_zero_ablation_sees_the_constant_edges_of_frac_prevs(tracr_build, every_length):
    """The true edges are the 5 compiled ones and the numerical readout's ``embed -> logits`` (the -v**2/2 of each value
    word, off `one`): under zero ablation all 6 above the 17 false edges, on full-length inputs and on every length
    (there the readout edge ranks first: before it counted as false, 0.944 = 85/90)."""
    got = _zero_vs_corrupted(tracr_build, "frac_prevs", every_length=every_length)
    # patching: the three constant true edges (1.0's q and k, the readout) tie with the 17 false ones at 0
    assert got["corrupted"]["auc_all"] == pytest.approx((3 * 17 + 3 * 17 / 2) / (6 * 17)) and got["corrupted"]["n_true"] == 6
    zero = got["zero"]
    # on full-length pairs the readout edge's per-pair change, (b**2 - a**2) / 2, has either sign: some resamples of
    # the pairs average it below 1.0's q/k edges (the interval's low end 0.990)
    assert zero["auc_all"] == 1.0 and zero["auc_all_low"] >= (1.0 if every_length else 0.95) and zero["n_true"] == 6
    assert zero["auc_acdc"] == 1.0 and zero["n_acdc"] == 6  # ACDC's 5 and the readout edge its model does not have


def test_zero_ablation_sees_the_length_circuit_of_reverse(tracr_build):
    got = _zero_vs_corrupted(tracr_build, "reverse", every_length=True)
    assert got["corrupted"]["auc_all"] < 0.6  # 11 of 13 compiled edges are constant
    # the length head's q and k (a TRUE selector: uniform whatever they hold) change nothing under any ablation of one
    # edge; ACDC's zero-ablation reference for reverse leaves them out too: against the other 11 edges, 1.0
    assert got["zero"]["auc_used"] == 1.0 and got["zero"]["auc_used_low"] == 1.0 and got["zero"]["n_used"] == 11
    assert got["zero"]["auc_all"] == pytest.approx(1 - 2 * 64 / 2 / (13 * 64))  # the two tie with the 64 false edges at 0


def test_reverse_against_acdcs_reference_and_in_the_context_of_every_other_ablation(tracr_build):
    """ACDC's published 1.000 on reverse is against its reference circuit (its own zero-ablation output), which leaves
    out three compiled edges: the length head's q and k and ``embed -> 3.0 q``.  Against it, headlens' zero-ablation
    scores give 1.000 too; against all 13 compiled edges 0.923.  ACDC prunes edge by edge with the earlier removals
    kept, so the two edges could show only in some context: in the extreme one they do not either, the circuit of
    the 11 edges the program uses (every other edge zeroed) gives the full model's metric to the bit on every pair."""
    import numpy as np

    from headlens.analyses.circuits.ablation_kinds import Ablation
    from headlens.analyses.circuits.faithfulness import circuit_values

    got = _zero_vs_corrupted(tracr_build, "reverse", every_length=True)
    assert got["zero"]["auc_acdc"] == 1.0 and got["zero"]["auc_acdc_low"] == 1.0 and got["zero"]["n_acdc"] == 10
    built = tracr_build("reverse")
    truth = read_truth(built.folder / "ground_truth.json")
    assert set(truth["edges"]) - set(truth["acdc"]) == {("embed", "0.0", "q"), ("embed", "0.0", "k"), ("embed", "3.0", "q")}
    model = load_model(model=str(built.folder), device="cpu", dtype="float32")
    graph = build_graph(model)
    keys = list(zip(graph.edges["sender"], graph.edges["receiver"], graph.edges["input"], strict=True))
    spec = PROGRAMS["reverse"]
    task = tracr_task(model, spec, spec.build(), numerical=False, n_pairs=64, every_length=True)
    masks = np.array([[True] * len(keys), [k in set(truth["used"]) for k in keys], [False] * len(keys)])
    full, used, empty = circuit_values(model, task, graph, masks, ablation=Ablation("zero"))
    assert np.array_equal(used, full) and np.abs(full - empty).min() > 0.5


def test_the_printed_ground_truth_line_names_acdcs_reference_when_the_truth_has_it():
    from headlens.reports.api.circuit_scores_text import truth_lines

    t = {"path": "gt.json", "auc_all": 0.923, "auc_all_low": 0.9, "auc_all_high": 0.95, "n_true": 13, "n_edges": 77, "n_pairs": 64,
         "n_bootstrap": 100, "auc_acdc": 1.0, "auc_acdc_low": 1.0, "auc_acdc_high": 1.0, "n_acdc": 10}  # fmt: skip
    (line,) = truth_lines({"ground_truth": t})
    assert "edge ROC AUC 0.923 [0.900, 0.950] against its 13 true edges of 77" in line
    assert "1.000 [1.000, 1.000] against ACDC's reference circuit of 10 edges" in line
    assert "readout" not in line
    (read,) = truth_lines({"ground_truth": t | {"n_acdc": 6, "n_acdc_readout": 1}})
    assert "against ACDC's reference circuit of 6 edges (its published tracr ground truth, with this checkpoint's 1 readout edge(s)" in read
    (plain,) = truth_lines({"ground_truth": {k: v for k, v in t.items() if "acdc" not in k}})
    assert "ACDC" not in plain
