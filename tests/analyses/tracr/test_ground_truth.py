"""The ground truth's edge labels: every compiled edge kept, each input-dependent or constant, with the reason.

A constant edge is one no input of the program's input space changes: its sender writes the same on every
input, or its receiver's RASP expression ignores it (a TRUE selector's q and k).  On tracr's reverse the
input-dependent edges are exactly the two of Miller et al.'s resample-ablation circuit that auto-circuit
ships (``Resid Start->A3.0.V``, ``A3.0->Resid End``), and the length head's pattern is the same on every input
(checked on the checkpoint with plain transformers, apart from headlens' patching).  The readout's edge (a numerical
program's ``embed -> logits``) is true exactly where zeroing it alone changes the checkpoint's output.
"""

from __future__ import annotations

import numpy as np
import pytest

from headlens.analyses.tracr.ground_truth import mark_input_dependence, varying_edges


def _truth() -> dict:
    return {"edges": [
        {"sender": "embed", "receiver": "0.0", "input": "q", "via": ["tokens:a"], "receiver_ignores": "selector predicate TRUE ..."},
        {"sender": "embed", "receiver": "0.0", "input": "v", "via": ["bos"]},
        {"sender": "0.0", "receiver": "logits", "input": "logits", "via": ["out"]},
    ]}  # fmt: skip


def test_labels_apply_both_reasons():
    residual = ["tokens:a", "bos", "out"]
    writes = {"embed": np.zeros((2, 3, 3)), "0.0": np.zeros((2, 3, 3))}
    writes["embed"][1, :, 0] = 1.0  # tokens:a differs between the two inputs
    writes["0.0"][0, 2, 2] = 0.5  # the head's output differs at the last position
    truth = _truth()
    mark_input_dependence(truth, writes, residual)
    q, v, out = truth["edges"]
    assert (q["sender_varies"], q["signal"], q["why"]) == (True, "constant", "selector predicate TRUE ...")
    assert (v["sender_varies"], v["signal"]) == (False, "constant") and "same on bos on every input" in v["why"]
    assert (out["signal"], "why" in out) == ("input-dependent", False)
    assert varying_edges(truth) == {("0.0", "logits", "logits")} and truth["edges_varying"] == 1
    # Below the tolerance a difference does not count.
    writes["0.0"][0, 2, 2] = 1e-4
    mark_input_dependence(truth, writes, residual)
    assert truth["edges_varying"] == 0


@pytest.mark.slow
def test_reverse_input_dependent_edges_are_the_resample_circuit(tracr_build):
    pytest.importorskip("tracr", reason="tracr-pypi is not installed (pip install 'headlens[circuits-bench]')")
    import itertools

    import torch
    from transformers import GPT2LMHeadModel

    from headlens.analyses.tracr.ground_truth import true_edges
    from headlens.analyses.tracr.programs import PROGRAMS
    from headlens.analyses.tracr.scoring import score_methods, tracr_task
    from headlens.probes.loading import load_model

    built = tracr_build("reverse")
    truth = built.truth
    assert varying_edges(truth) == {("embed", "3.0", "v"), ("3.0", "logits", "logits")}
    assert len(true_edges(truth)) == 13  # every compiled edge kept
    by_key = {(e["sender"], e["receiver"], e["input"]): e for e in truth["edges"]}
    for inp in ("q", "k"):  # the tokens vary, but the length selector is TRUE
        e = by_key[("embed", "0.0", inp)]
        assert e["sender_varies"] and e["signal"] == "constant" and "TRUE" in e["why"]
    assert by_key[("mlp0", "mlp1", "mlp")]["signal"] == "constant"  # the length of a full-length input
    # Independently of the labels: head 0.0's pattern is the same on every full-length input.
    hf = GPT2LMHeadModel.from_pretrained(built.folder, attn_implementation="eager").eval()
    bos = hf.config.bos_token_id
    vocab = __import__("json").loads((built.folder / "tokenizer.json").read_text())["model"]["vocab"]
    ids = torch.tensor([[bos, *(vocab[w] for w in x)] for x in itertools.product("abc", repeat=5)])
    with torch.no_grad():
        pattern = hf(ids, output_attentions=True).attentions[0][:, 0]
    assert float((pattern - pattern[0]).abs().max()) < 1e-6
    # Exact patching ranks the two input-dependent edges above every false edge.
    spec = PROGRAMS["reverse"]
    model = load_model(model=str(built.folder), device="cpu", dtype="float32")
    row = score_methods(model, truth, tracr_task(model, spec, spec.build(), numerical=False, n_pairs=8), methods=("exact",)).iloc[0]
    assert row["auc_varying"] == 1.0 and row["auc_varying_low"] == 1.0


def test_acdc_reference_marks_its_edges_and_refuses_one_not_compiled():
    from headlens.analyses.tracr.ground_truth import ACDC_REFERENCE, mark_acdc_reference

    truth: dict = {"edges": [{"sender": s, "receiver": r, "input": i} for s, r, i in sorted(ACDC_REFERENCE["frac_prevs"])]}
    truth["edges"].append({"sender": "embed", "receiver": "logits", "input": "logits"})
    mark_acdc_reference(truth, "frac_prevs")
    assert [e["acdc_reference"] for e in truth["edges"]] == [True] * 5 + [False]
    assert truth["acdc_reference"]["n_edges"] == 5 and "bc99ace8" in truth["acdc_reference"]["source"]
    other = {"edges": [{"sender": "embed", "receiver": "0.0", "input": "v"}]}
    mark_acdc_reference(other, "shift")  # no reference: unchanged
    assert other == {"edges": [{"sender": "embed", "receiver": "0.0", "input": "v"}]}
    with pytest.raises(ValueError, match="not compiled edges"):
        mark_acdc_reference({"edges": truth["edges"][1:]}, "frac_prevs")


def test_readout_edges_count_in_acdcs_set_and_are_not_taken_for_compiled_ones():
    from headlens.analyses.tracr.ground_truth import ACDC_REFERENCE, mark_acdc_reference

    edges = [{"sender": s, "receiver": r, "input": i, "origin": "compiled"} for s, r, i in sorted(ACDC_REFERENCE["frac_prevs"])]
    readout = {"sender": "embed", "receiver": "logits", "input": "logits", "origin": "readout"}
    truth: dict = {"edges": [*edges, readout]}
    mark_acdc_reference(truth, "frac_prevs")
    assert [e["acdc_reference"] for e in truth["edges"]] == [True] * 6
    assert (truth["acdc_reference"]["n_edges"], truth["acdc_reference"]["n_acdc"], truth["acdc_reference"]["n_readout"]) == (6, 5, 1)
    # a reference edge present only as a readout edge is not a compiled one
    with pytest.raises(ValueError, match="not compiled edges"):
        mark_acdc_reference({"edges": [*edges[1:], {**edges[0], "origin": "readout"}]}, "frac_prevs")


@pytest.mark.slow
@pytest.mark.parametrize(("program", "needed"), [("frac_prevs", True), ("hist", False)])
def test_the_readout_edge_is_true_where_zeroing_it_changes_the_output(tracr_build, program, needed):
    """Measured apart from headlens' patching, on every input of every length: ``embed -> logits`` zeroed alone (the
    final norm reads the stream less the embedding) turns frac_prevs' output wrong on 860 of 1641 positions (the
    argmax is then the largest value wherever the number is positive) and hist's on none (only the -100 of the
    non-output words goes).  So it is a true edge (``origin: "readout"``, constant: `one` is 1 everywhere) of
    frac_prevs' checkpoint and no edge of hist's ground truth."""
    import itertools
    import json

    import torch
    from transformers import GPT2LMHeadModel

    from headlens.analyses.tracr.programs import PROGRAMS

    built = tracr_build(program)
    by_key = {(e["sender"], e["receiver"], e["input"]): e for e in built.truth["edges"]}
    edge = by_key.get(("embed", "logits", "logits"))
    assert built.truth["readout"]["n_edges"] == int(needed)
    if needed:
        assert edge is not None and edge["origin"] == "readout" and edge["via"] == ["headlens:one"]
        assert edge["signal"] == "constant" and edge["acdc_reference"]
    else:
        assert edge is None and all(e["origin"] == "compiled" for e in built.truth["edges"])
    assert built.agreement.n_disagree == 0  # intact, the checkpoint's argmax is the program's output everywhere
    hf = GPT2LMHeadModel.from_pretrained(built.folder).eval()
    vocab = json.loads((built.folder / "tokenizer.json").read_text())["model"]["vocab"]
    spec = PROGRAMS[program]
    wrong = 0
    for k in range(1, spec.max_seq_len + 1):
        ids = torch.tensor([[hf.config.bos_token_id, *(vocab[w] for w in x)] for x in itertools.product(spec.vocab, repeat=k)])
        with torch.no_grad():
            out = hf(ids, output_hidden_states=True)
            embed = out.hidden_states[0]
            hook = hf.transformer.ln_f.register_forward_pre_hook(lambda _m, a: (a[0] - embed,))
            try:
                zeroed = hf(ids).logits
            finally:
                hook.remove()
        wrong += int((zeroed.argmax(-1) != out.logits.argmax(-1))[:, 1:].sum())
    assert (wrong == 860) if needed else (wrong == 0)


def test_auc_acdc_keeps_every_edge_in_its_classes(tmp_path):
    """ACDC's classes: its reference true, every other edge false (a compiled edge outside it included); auc_used
    instead leaves the ignored compiled edge out of both classes.  Scores A 1, B 2, C 0, D 0."""
    import json

    import pandas as pd

    from headlens.analyses.circuits.ground_truth import read_truth, truth_auc

    edges = [{"sender": "embed", "receiver": "0.0", "input": "v", "acdc_reference": True},
             {"sender": "embed", "receiver": "0.0", "input": "q", "acdc_reference": False, "receiver_ignores": "TRUE"}]  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps({"edges": edges}))
    truth = read_truth(tmp_path / "t.json")
    table = pd.DataFrame({"sender": ["embed", "embed", "embed", "0.0"], "receiver": ["0.0", "0.0", "0.0", "logits"],
                          "input": ["v", "q", "k", "logits"]})  # fmt: skip
    got = truth_auc(truth, table, np.array([[1.0, 2.0, 0.0, 0.0]]), n_bootstrap=0)
    assert got["auc_acdc"] == pytest.approx(2 / 3) and got["n_acdc"] == 1  # A above C and D, below B
    assert got["auc_used"] == 1.0  # B left out: A above C and D
    assert got["auc_all"] == 1.0  # A and B above C and D
