"""benchmarks/real_model_exact.py's page section: written from its figures, replaced in place, kept by the page script."""

from __future__ import annotations

import importlib.util
import sys

from tests.paths import REPO_ROOT

BENCH = REPO_ROOT / "benchmarks"


def _module():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_real_model_exact", BENCH / "real_model_exact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(method, auc, low, high, reason=""):
    return {"method": method, "auc": auc, "auc_low": low, "auc_high": high, "spearman": 0.5, "spearman_low": 0.4, "spearman_high": 0.6,
            "n_edges": 1000, "n_top": 30, "n_random": 40, "n_rest": 970, "n_positive": 12, "est_circuit": 80.0, "hidden_bound": 0.0,
            "circuit_share": 0.01, "interval": "pairs and random-stratum edges", "n_pairs": 8, "n_bootstrap": 100, "seed": 0,
            "reason": reason, "wide": not (high - low <= 0.2)}  # fmt: skip


def _data(reduced=None):
    result = {"task": "induction", "pairs": 8, "edges": 1000, "workers": 1, "command": "python benchmarks/real_model_exact.py --pairs 8",
              "seconds": {"eap": 1.0, "eap-ig": 2.0, "exact": 3.0}, "rows": [_row("eap", 0.61, 0.3, 0.9), _row("eap-ig", 0.9, 0.85, 0.95)],
              "mib": {"eap": {"cpr": 0.5, "cpr_ci": [0.4, 0.6], "cmd": 0.2, "cmd_ci": [0.1, 0.3]}},
              "cost": {"reduced": reduced, "predicted_s": 7200.0, "seconds_per_edge": 1.8}}  # fmt: skip
    return {"settings": {"steps": 5, "top": 2000, "random": 2000}, "results": [result], "commit": "abc1234", "date": "2026-12-07",
            "load": [3.0, 4.0]}  # fmt: skip


def test_section_words_each_estimate_and_says_a_wide_interval(tmp_path, monkeypatch):
    m = _module()
    text = m.section(_data({"top": 30, "random": 40}))
    assert text.startswith(m.BEGIN) and text.rstrip().endswith(m.END) and "## AUROC against exact patching" in text
    assert "| induction | EAP | 0.61 [0.30, 0.90] (too wide to read) |" in text
    assert "| induction | EAP-IG | 0.90 [0.85, 0.95] |" in text and "| 0.50 [0.40, 0.60] | 0.20 [0.10, 0.30] |" in text
    assert "**Reduced**" in text and "top 30 + random 40 instead of top 2000 + random 2000" in text
    assert "InterpBench" in text and "MIB" in text
    page = tmp_path / "real-model.md"
    page.write_text("# A real model\n\nbody\n", encoding="utf-8")
    monkeypatch.setattr(m, "PAGE", page)
    m._write_page(text)
    m._write_page(m.section(_data()))  # a second run replaces the section in place
    written = page.read_text(encoding="utf-8")
    assert written.count(m.BEGIN) == 1 and "**Reduced**" not in written and written.startswith("# A real model\n\nbody\n")
    assert m.kept_section(written).strip() == m.section(_data()).strip()
    assert m.kept_section("# no section\n") == ""


def test_section_says_what_an_earlier_run_did_instead_of_its_own_zero_seconds():
    m = _module()
    data = _data()
    data["results"][0] |= {"seconds": {"eap": 9.0, "eap-ig": None, "exact": 0.4}, "resumed": ["eap", "eap-ig", "exact"]}
    text = m.section(data)
    assert "exact on 1 worker: 0 s to finish a journal an earlier run left" in text
    assert "EAP 9 s in an earlier run, read from its cache, EAP-IG from an earlier run's cache, time not recorded" in text
    data["results"][0] |= {"seconds": {"eap": 9.0, "eap-ig": 17.0, "exact": 624.0}, "resumed": []}
    assert "exact on 1 worker: 624 s; EAP 9 s, EAP-IG 17 s)" in m.section(data)
