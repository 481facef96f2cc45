"""``headlens.circuit`` and ``headlens.composition``: Results like the other studies (tables, findings,
save/load, the circuit diagram, the notebook view), the demo model's induction circuit, bad input."""

from __future__ import annotations

import json

import pytest

import headlens
from headlens.probes.errors import InputError, UnsupportedModelError


@pytest.fixture(scope="module")
def demo():
    return headlens.load_model("demo")


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


def test_circuit_save_load_round_trip(demo_circuit, tmp_path):
    out = demo_circuit.save(tmp_path / "c")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["circuit.png", "circuit.svg", "edges.csv", "faithfulness.csv", "manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["result"] == "circuit" and manifest["circuit"]["summary"]["n_circuit"] == demo_circuit.summary["n_circuit"]
    back = headlens.load(out)
    assert isinstance(back, headlens.CircuitResult)
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
        headlens.circuit(family_model("gpt_neo"), n_pairs=4)
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
    assert back.findings().lines == lines


@pytest.mark.parametrize(("settings", "word"), [({"modes": "k,x"}, "modes="), ({"n_baseline": 1}, "n_baseline="), ({"seeds": 1}, "seeds=")])
def test_composition_bad_settings(settings, word):
    with pytest.raises(InputError) as err:
        headlens.composition("demo", **settings)
    assert word in str(err.value) and "\n" not in str(err.value)
