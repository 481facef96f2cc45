"""``headlens.circuit`` and ``headlens.composition``: Results like the other studies (tables, findings,
save/load, the circuit diagram, the notebook view), the demo model's induction circuit, bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import headlens
from headlens.analyses.circuits.run import CircuitRun
from headlens.probes.errors import InputError, UnsupportedModelError


@pytest.fixture(scope="module")
def demo(demo_model):
    return demo_model  # loaded once per session (tests/conftest.py)


@pytest.fixture(scope="module")
def demo_circuit(demo):
    return headlens.circuit(demo, method="eap-ig", steps=3, n_pairs=12, n_bootstrap=100, confirm=8)


def test_circuit_result_leads_with_the_circuit(demo_circuit):
    r = demo_circuit
    assert isinstance(r, headlens.CircuitResult)
    assert len(r.edges) == r.summary["graph"]["n_edges"] == 110  # 2 layers x 4 heads, MHA
    assert r.circuit_edges["in_circuit"].all() and len(r.circuit_edges) == r.summary["n_circuit"]
    found = r.findings()
    assert found.lines[0].startswith(f"circuit: {r.summary['n_circuit']} of 110 edges (EAP-IG ESTIMATE, 3 steps")
    assert any("exact" in line for line in found.lines)
    assert any("estimates" in w for w in found.warnings)  # an estimate is labelled as one
    html = r._repr_html_()
    assert html.index("circuit: ") < html.index("data:image/png;base64,") < html.index("<details")  # the circuit, its diagram, the tables


def test_demo_induction_circuit_through_k(demo_circuit):
    """The demo's induction circuit: previous-token head 0.0 feeds the induction heads 1.x through k;
    the confirmed edges among them carry a positive exact share of the gap."""
    ce = demo_circuit.circuit_edges
    k_edges = ce[(ce["sender"] == "0.0") & ce["receiver"].isin(["1.0", "1.1", "1.2", "1.3"]) & (ce["input"] == "k")]
    assert len(k_edges) >= 2
    assert (k_edges["score"] > 0).all() and (k_edges["ci_low"] > 0).all()
    heads_to_logits = ce[ce["sender"].isin(["1.0", "1.1", "1.2", "1.3"]) & (ce["receiver"] == "logits")]
    assert len(heads_to_logits) >= 1


@pytest.mark.all_figure_formats  # reads the SVG files (or the file list naming them)
def test_circuit_save_load_round_trip(demo_circuit, tmp_path):
    out = demo_circuit.save(tmp_path / "c")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["against_exact.csv", "circuit.png", "circuit.svg", "edges.csv", "faithfulness.csv", "manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["result"] == "circuit" and manifest["circuit"]["summary"]["n_circuit"] == demo_circuit.summary["n_circuit"]
    back = headlens.load(out)
    assert isinstance(back, headlens.CircuitResult)
    assert back.run.config == demo_circuit.run.config and back.notes == demo_circuit.notes  # the run rebuilt from the files
    assert back.run.edges is back.edges and back.edges["in_circuit"].dtype == bool  # its tables, dtypes restored
    assert back.edges["sender"].tolist() == demo_circuit.edges["sender"].tolist()
    assert back.edges["in_circuit"].dtype == bool
    assert back.findings().lines == demo_circuit.findings().lines
    assert back.plot("circuit") is not None


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("settings", "word"),
    [
        ({"steps": 0}, "steps"),
        ({"method": "eap-ig", "steps": 1}, "steps"),
        ({"method": "acdc"}, "method"),
        ({"top_n": 10**6}, "top_n=1000000"),
        ({"n_pairs": 10**9}, "n_pairs=1000000000"),
        ({"n_pairs": 1}, "n_pairs must be at least 2"),
        ({"n_pairs": 5000}, "n_pairs=5000: at most 4,096"),
        ({"method": "eap", "steps": 1}, "steps must be a whole number >= 2"),
        ({"n_bootstrap": 10**9}, "n_bootstrap=1000000000: at most 1,000,000"),
        ({"confirm": -1}, "confirm must be at least 0"),
        ({"frobnicate": 1}, "frobnicate="),
    ],
)
def test_circuit_bad_settings_one_line(demo, settings, word):
    with pytest.raises(InputError) as err:
        headlens.circuit(demo, **settings)
    assert word in str(err.value) and "\n" not in str(err.value)


def test_circuit_pairs_of_different_lengths(demo, tmp_path):
    task = _jsonl(
        tmp_path / "t.jsonl",
        [
            {"clean": "When Mary and John went", "corrupt": "When Mary and Tom went", "correct": " Mary", "incorrect": " John"},
            {"clean": "When Mary and John went", "corrupt": "When Mary and John and Tom went", "correct": " Mary", "incorrect": " John"},
        ],
    )
    with pytest.raises(InputError) as err:
        headlens.circuit(demo, task=task)
    assert "same token length" in str(err.value)


def test_circuit_family_that_cannot_be_patched(family_model):
    with pytest.raises(UnsupportedModelError) as err:
        headlens.circuit(family_model("bert"), n_pairs=4)  # encoders: no edge graph
    assert "edge scores need" in str(err.value) and "\n" not in str(err.value)


def test_composition_result(demo, tmp_path):
    r = headlens.composition(demo, n_baseline=30, n_tokens=100)
    assert isinstance(r, headlens.CompositionResult)
    k = r.scores[(r.scores["input"] == "k") & (r.scores["sender"] == "0.0")]
    assert k["above_baseline"].all() and len(k) == 4
    lines = r.findings().lines
    assert lines[0].startswith("Q-composition:") and any("0.0 -> 1." in line for line in lines)
    assert any(line.startswith("copying heads") and "1.0" in line for line in lines)
    out = r.save(tmp_path / "k")
    assert {"composition.csv", "baseline.csv", "copying.csv", "composition_k.png", "manifest.json"} <= {p.name for p in out.iterdir()}
    back = headlens.load(out)
    assert isinstance(back, headlens.CompositionResult)
    assert back.scores["sender"].tolist() == r.scores["sender"].tolist()
    assert back.findings() == r.findings() and back.run.notes == r.run.notes  # the run rebuilt from the files
    assert back.run.scores is back.scores


@pytest.mark.parametrize(("settings", "word"), [({"modes": "k,x"}, "modes="), ({"n_baseline": 1}, "n_baseline="), ({"seeds": 1}, "seeds=")])
def test_composition_bad_settings(settings, word):
    with pytest.raises(InputError) as err:
        headlens.composition("demo", **settings)
    assert word in str(err.value) and "\n" not in str(err.value)


def _synthetic_circuit():
    """A hand-made circuit result: the reviewer's numbers (a 21-edge circuit 0.941 [0.897, 0.995], eap-ig's fall 0.944 -> 0.898, a
    non-monotone curve, an edge whose interval spans 0, an estimate 3x under its exact value)."""
    import pandas as pd

    from headlens.analyses.circuits.run import reach_evidence

    curve = pd.DataFrame({"n_edges": [0, 10, 20, 21, 22, 25, 30], "faithfulness": [0.0, 0.6, 0.944, 0.941, 0.898, 0.966, 1.0],
                          "ci_low": [0.0, 0.5, 0.9, 0.897, 0.85, 0.93, 1.0],
                          "ci_high": [0.0, 0.7, 0.99, 0.995, 0.94, 1.0, 1.0]})  # fmt: skip
    curve["fraction"], curve["metric"] = curve["n_edges"] / 30, 0.0
    edges = pd.DataFrame({"sender": ["mlp1", "0.0"], "receiver": ["logits", "1.0"], "input": ["x", "k"], "score": [0.27, 0.5],
                          "ci_low": [-0.58, 0.4], "ci_high": [1.01, 0.6], "stability": [0.55, 1.0], "exact": [0.84, 0.52],
                          "exact_ci_low": [0.7, 0.45], "exact_ci_high": [0.95, 0.6], "disagree": [False, False],
                          "estimate_over_exact": [0.27 / 0.84, 0.5 / 0.52], "in_circuit": [True, True], "rank": [1, 2]})  # fmt: skip
    summary = {"n_circuit": 25, "target_faithfulness": 0.95, "smallest_reaching_target": 25, "method": "eap", "direction": "noising",
               "reach": reach_evidence(curve, 25, 0.95), "confirmed": 2, "disagreements": 0, "graph": {}}  # fmt: skip
    return _result(edges, curve, summary)


def test_reach_is_a_point_estimate_with_its_interval_and_caveats():
    r = _synthetic_circuit()
    reach = r.summary["reach"]
    assert reach["indistinguishable_from"] == 20 and reach["monotone"] is False and reach["in_sample"] is True
    assert (reach["drop_from"], reach["drop_to"]) == (20, 22)
    text = "\n".join(r.findings().lines)
    assert "smallest circuit reaching 0.95 (point estimate): 25 edges" in text
    assert "25 edges at faithfulness 0.966 [0.93, 1.00]" in text and "in-sample" in text and "same pairs that ranked the edges" in text
    assert "not distinguishable from 20 edges" in text
    assert "not monotone (20 edges 0.944, 22 edges 0.898)" in text and "may not be the smallest" in text


def test_findings_flag_sign_unknown_edges_and_estimates_off_exact():
    found = _synthetic_circuit().findings()
    (mlp,) = [line for line in found.lines if line.startswith("  mlp1 -> logits")]
    assert "[-0.58, 1.01]  (spans 0: sign not established)" in mlp and "estimate/exact 0.32" in mlp
    (head,) = [line for line in found.lines if line.startswith("  0.0 -> 1.0")]
    assert "spans 0" not in head and "estimate/exact 0.96" in head
    assert any("1 edge of the circuit has a 95% interval spanning 0" in w for w in found.warnings)
    assert any("more than 2x off exact" in w and "mlp1 -> logits (x) 0.32" in w for w in found.warnings)


def test_run_records_reach_and_the_estimate_over_exact(demo_circuit):
    s, e = demo_circuit.summary, demo_circuit.edges
    assert s["reach"]["n"] == s["smallest_reaching_target"] and s["reach"]["in_sample"] is True and "monotone" in s["reach"]
    confirmed = e[(e["confirmed"] == "top") & ~e["exact_near_zero"]]
    assert (e["confirmed"] == "top").sum() == 8 and (e["confirmed"] == "sample").sum() == 20
    assert (confirmed["estimate_over_exact"] - confirmed["score"] / confirmed["exact"]).abs().max() < 1e-12


def test_reach_monotone_within_noise():
    import pandas as pd

    from headlens.analyses.circuits.run import MONOTONE_TOLERANCE, reach_evidence

    curve = pd.DataFrame(
        {"n_edges": [0, 2, 6, 10], "faithfulness": [0.0, 1e-9, -1e-9, 0.97], "ci_low": [0.0, 0, 0, 0.9], "ci_high": [0.0, 0, 0, 1.0]}
    )
    r = reach_evidence(curve, 10, 0.95)
    assert r["monotone"] is True and r["drop"] < MONOTONE_TOLERANCE and r["indistinguishable_from"] is None


# --------------------------------------------------------------------------- issue 46: held-out faithfulness, confirmation words


@pytest.fixture(scope="module")
def held_circuit(demo):
    return headlens.circuit(demo, method="exact", n_pairs=16, n_bootstrap=100, curve_points=4)


def test_findings_lead_with_the_held_out_faithfulness(held_circuit, tmp_path):
    """Item 1: the first line gives the held-out figure, then the in-sample one; the next says how the pairs were split;
    the manifest records the split and both figures."""
    s = held_circuit.summary
    first, split = held_circuit.findings().lines[:2]
    held = f"faithfulness {s['held_out']['faithfulness']:.2f}"
    assert held in first and "on 8 held-out pairs" in first and first.index(held) < first.index("in-sample") < first.index("chose it")
    assert split.startswith("pairs: 16, split at random (seed 0): 8 score the edges and choose the circuit, 8 held out")
    manifest = json.loads((held_circuit.save(tmp_path / "c") / "manifest.json").read_text())["circuit"]["summary"]
    assert len(manifest["split"]["held_out"]) == 8 and manifest["held_out"]["n_pairs"] == 8 and "in_sample" in manifest
    assert headlens.load(tmp_path / "c").findings().lines == held_circuit.findings().lines


def test_too_few_pairs_to_hold_out_is_said(demo_circuit):
    first = demo_circuit.findings().lines[0]
    assert "in-sample (on the 12 pairs that chose it; none held out)" in first
    assert any("12 pairs are too few to hold out 0.5" in w and "at least 16 pairs" in w for w in demo_circuit.findings().warnings)
    assert demo_circuit.manifest["circuit"]["summary"]["split"]["reason"] in demo_circuit.notes
    assert "only 12 pairs score the edges" in "\n".join(demo_circuit.findings().warnings)


def test_a_held_out_figure_short_of_the_target_is_said(held_circuit):
    s = held_circuit.summary
    below = [w for w in held_circuit.findings().warnings if "on the held-out pairs: its size was fitted" in w]
    assert bool(below) == (s["held_out"]["faithfulness"] < s["target_faithfulness"] and s["n_circuit"] == s["smallest_reaching_target"])
    s = {**s, "held_out": {**s["held_out"], "faithfulness": 0.5}, "n_circuit": s["smallest_reaching_target"]}
    fake = headlens.CircuitResult(run=replace(held_circuit.run, summary=s, notes=[]), manifest=held_circuit.manifest)
    assert any("reaches 0.95 on the pairs that chose it but 0.50" in w for w in fake.findings().warnings)


def _confirmed_circuit(n: int = 8):
    """A hand-made estimate with ``n`` confirmed edges that disagree, the first at exact ~ 0."""
    import pandas as pd

    names = [(f"0.{i % 4}", f"1.{i // 4}", "k") for i in range(n)]
    edges = pd.DataFrame({"sender": [a for a, _, _ in names], "receiver": [b for _, b, _ in names], "input": ["k"] * n,
                          "score": [0.3] * n, "ci_low": [0.25] * n, "ci_high": [0.35] * n, "stability": [1.0] * n,
                          "exact": [1e-8] + [0.9] * (n - 1), "exact_ci_low": [0.0] + [0.85] * (n - 1),
                          "exact_ci_high": [2e-8] + [0.95] * (n - 1), "disagree": [True] * n,
                          "estimate_over_exact": [np.nan] + [1 / 3] * (n - 1), "exact_near_zero": [True] + [False] * (n - 1),
                          "in_circuit": [True] * n, "rank": list(range(1, n + 1))})  # fmt: skip
    named = [{"edge": f"{a} -> {b} ({c})", "rank": i + 1, "estimate": 0.3, "exact": 0.9, "ratio": 1 / 3, "exact_near_zero": False,
              "stability": 1.0} for i, (a, b, c) in enumerate(names)]  # fmt: skip
    named[0] |= {"exact": 1e-8, "ratio": None, "exact_near_zero": True}
    confirmation = {"n_top": n, "off_factor": 2.0, "disagree": named, "off": named, "sample": {}}
    summary = {"n_circuit": n, "method": "eap", "direction": "noising", "estimate": True, "confirmed": n, "disagreements": n,
               "confirmation": confirmation, "graph": {}}  # fmt: skip
    return _result(edges, pd.DataFrame({"n_edges": [n], "faithfulness": [1.0]}), summary)


def _result(edges, faithfulness, summary):
    """A hand-made circuit result: its run holds the tables and the summary, with the default config and no notes."""
    run = CircuitRun(edges=edges, faithfulness=faithfulness, summary=summary, config=headlens.CircuitConfig())
    return headlens.CircuitResult(run=run, manifest={"result": "circuit"})


def test_confirmation_words():
    """Item 7: 'exact ~ 0' instead of a ratio, six edges named and the rest counted, the off note read from the manifest;
    item 8: a disagreement says that intervals and stability do not measure the estimator's bias."""
    r = _confirmed_circuit()
    first = next(line for line in r.findings().lines if line.startswith("  0.0 -> 1.0 (k)"))
    assert "exact ~ 0" in first and "estimate/exact" not in first and "DISAGREES" in first
    (dis,) = [w for w in r.findings().warnings if "estimate and exact disagree" in w]
    assert dis.startswith("8 of 8 confirmed edges") and "0.1 -> 1.1 (k) and 2 more)" in dis
    assert "8 of them at stability >= 0.9" in dis and "not the estimator's bias" in dis
    (off,) = [w for w in r.findings().warnings if "more than 2x off exact" in w]
    assert "0.0 -> 1.0 (k) exact ~ 0, 0.1 -> 1.0 (k) 0.33" in off and "and 2 more)" in off
    r.tables["edges"]["estimate_over_exact"] = 1.0  # the note is the manifest's, not recomputed from the table on load
    assert any("more than 2x off exact" in w for w in r.findings().warnings)


def test_sample_outside_the_top_is_reported(demo_circuit):
    """Item 2: the random sample confirmed outside the top, its size, seed and what it found."""
    sample = demo_circuit.summary["confirmation"]["sample"]
    (line,) = [line for line in demo_circuit.findings().lines if line.startswith("outside the top 8:")]
    assert f"20 of the other {sample['outside']} edges drawn at random (seed 0)" in line
    assert ("none carries more" in line) == (sample["n_missed"] == 0)


def test_sample_without_a_confirmed_top():
    r = _confirmed_circuit()
    r.run.summary["confirmation"] |= {"n_top": 0, "sample": {"n": 5, "outside": 110, "seed": 3, "missed": [],
                                                                               "smallest_top_exact": float("nan")}}  # fmt: skip
    assert "5 of the 110 edges drawn at random (seed 3) and patched exactly (exact column)" in r.findings().lines


def test_missed_edges_are_a_wilson_range_not_a_point(demo_circuit):
    """Review: the sample's missed rate with its Wilson 95% interval and the count range it allows outside the top;
    no point extrapolation from 0 or 1 missed edge."""
    from headlens.analyses.measure.stats import wilson
    from headlens.reports.api.circuit_text import _sample_lines

    sample = demo_circuit.summary["confirmation"]["sample"]
    assert sample["missed_rate_ci"] == list(wilson(sample["n_missed"], sample["n"]))
    (line,) = [line for line in demo_circuit.findings().lines if line.startswith("outside the top 8:")]
    assert "95% interval" in line and "may be missed" in line
    one = {"n": 20, "outside": 90, "seed": 0, "smallest_top_exact": 0.03, "estimated_missed": 4.5, "missed_rate_ci": list(wilson(1, 20)),
           "missed": [{"edge": "mlp0 -> 1.0 (v)", "exact": 0.07, "rank": 23}]}  # fmt: skip
    summary = {"confirmation": {"n_top": 20}}
    (text,) = _sample_lines(one, summary)
    low, high = wilson(1, 20)
    assert "about 4 of" not in text and "about 4," not in text
    assert f"{low * 90:.0f} to {high * 90:.0f} of the 90 edges outside the top may be missed" in text
    (none,) = _sample_lines(one | {"missed": [], "missed_rate_ci": list(wilson(0, 20))}, summary)
    assert "none carries more" in none and f"0 to {wilson(0, 20)[1] * 90:.0f} of the 90 edges" in none
