"""Role evidence must not pass a role on a check that did not run (issue 22 review: F1, F3, F4, F8):
an induction knockout that could not run, too few sink windows and a path patch that raised each
give "not testable here" with the reason; a model whose heads do nothing on repeats gets no induction head."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching import evidence as ev_mod
from headlens.analyses.patching import evidence_sink
from headlens.analyses.patching.evidence import NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, EvidenceConfig, role_evidence
from headlens.probes.errors import InputError, InterventionError


def _table(rows):
    return pd.DataFrame([(l, h, f"{l}.{h}", r) for l, h, r in rows], columns=["layer", "head", "name", "role"])


def test_induction_on_a_model_without_induction_is_never_supported(tiny_model):
    # the tiny seeded model does not do induction: its heads' ablation moves nothing on repeats,
    # which refutes the role (issue 28 item 1: that was "not testable" and hid an ablation figure
    # on the wrong side of 0)
    ev = role_evidence(tiny_model, _table([(l, h, "induction") for l in range(2) for h in range(4)]), n=32, T=20)
    assert (ev["evidence"] == NOT_SUPPORTED).all(), ev[["name", "evidence", "detail"]].to_string()
    assert ev["detail"].str.contains("not distinguishable from 0|below the|not specific to repeats|lowers the loss|first copy more").all()


def test_induction_without_the_knockout_is_not_testable(planted_model, monkeypatch):
    def refuse(*a, **k):
        raise InterventionError("score edits: the edit did not take effect on layer 1")

    monkeypatch.setattr(ev_mod, "induction_knockout", refuse)
    ev = role_evidence(planted_model, _table([(1, 0, "induction"), (1, 1, "induction")]), n=MIN_ITEMS, T=8)
    assert ev["detail"].str.contains("knockout check not run: score edits: the edit did not take effect").all()
    assert np.isfinite(ev["figure"]).all()  # the ablation figure is still shown
    # the planted induction head passes the ablation: without the knockout, not testable;
    # 1.1 (referent) fails the ablation itself: not supported, the reason given
    assert ev["evidence"].tolist() == [NOT_TESTABLE, NOT_SUPPORTED], ev[["name", "evidence", "detail"]].to_string()


@pytest.mark.parametrize("T", [2, 3])
def test_evidence_needs_four_tokens_per_copy(T):
    with pytest.raises(InputError, match="T=") as got:
        EvidenceConfig(T=T)
    assert "\n" not in str(got.value)


@pytest.mark.parametrize(("found", "why"), [((0.05, np.nan, np.nan, 1), "1 windows"), ((0.005, -0.02, 0.03, 3), "3 windows")])
def test_sink_with_few_windows_is_not_testable(tiny_model, monkeypatch, found, why):
    monkeypatch.setattr(evidence_sink, "sink_removal_effects", lambda model, heads, **k: {h: found for h in heads})
    ev = role_evidence(tiny_model, _table([(0, 1, "sink")]), n=32)
    row = ev.iloc[0]
    assert row["evidence"] == NOT_TESTABLE, row["detail"]
    assert why in row["detail"] and str(MIN_ITEMS) in row["detail"]


def test_previous_token_path_patch_error_is_not_testable(tiny_model, monkeypatch):
    def refuse(*a, **k):
        raise InterventionError("the hook_k edit did not take effect")

    monkeypatch.setattr(ev_mod, "run_path_patching", refuse)
    ev = role_evidence(tiny_model, _table([(0, 0, "previous_token"), (1, 0, "induction")]), n=MIN_ITEMS, T=8)
    row = ev[ev["role"] == "previous_token"].iloc[0]
    assert row["evidence"] == NOT_TESTABLE and "hook_k edit did not take effect" in row["detail"]
    assert SUPPORTED not in set(ev["evidence"])


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--evidence-n", "32"], "need --evidence"),
        (["--evidence-seq-len", "20"], "need --evidence"),
        (["--evidence", "--evidence-seq-len", "3"], "at least 4 random tokens per copy (--evidence-seq-len 3)"),
    ],
)
def test_evidence_flags_at_their_defaults_still_need_evidence(runner, tmp_path, args, said):
    from headlens.reports.cli.main import cli

    res = runner.invoke(cli, ["classify", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o"), *args])
    assert res.exit_code == 2, res.output
    assert said in res.output and len(res.output.strip().splitlines()) == 1
