"""Role evidence (issue 22 item 5): sink removal joined, previous-token through the induction heads'
keys together, item and model checks; on the planted checkpoint only the planted roles a causal
test reaches are supported."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.evidence import MIN_LOSS, NO_FINDING, NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, EvidenceConfig, role_evidence
from headlens.analyses.synthetic.planted import PLANTED_ROLES
from headlens.probes.errors import InputError
from headlens.reports.cli.main import cli

#: Per-window means averaged vs mean_loss's token-weighted mean: equal for equal-length windows.
LOSS_TOL = 1e-6
#: Joint and single-receiver path patching through one receiver are the same computation.
PATH_TOL = 1e-9


def _table(rows):
    return pd.DataFrame([(l, h, f"{l}.{h}", r) for l, h, r in rows], columns=["layer", "head", "name", "role"])


def _planted_rows():
    return [(int(k.split(".")[0]), int(k.split(".")[1]), role) for k, role in PLANTED_ROLES.items()]


def test_window_losses_average_to_mean_loss(tiny_model):
    from headlens.analyses.patching.sink_removal import window_losses
    from headlens.analyses.sinks.batches import census_batch
    from headlens.analyses.sinks.config import SinkConfig
    from headlens.analyses.sinks.intervene import mean_loss, removal_edits

    batch = census_batch(tiny_model, SinkConfig(window=32, bos=(True,), n_prompts=6), True)
    for edits in (None, removal_edits({0: [1]})):
        per = window_losses(tiny_model, batch, edits, batch_size=4)
        whole, _ = mean_loss(tiny_model, batch, edits, batch_size=4)
        assert per.shape == (6,) and abs(per.mean() - whole) < LOSS_TOL


def test_planted_evidence_sink_joined_and_only_reachable_roles_supported(planted_model):
    ev = role_evidence(planted_model, _table([*_planted_rows(), (1, 0, "sink")]), n=MIN_ITEMS, T=12)
    by: dict[Any, Any] = {(r.name, r.role): r for r in ev.itertuples()}
    assert {k for k, r in by.items() if r.evidence == SUPPORTED} == {("0.0", "previous_token"), ("1.0", "induction")}
    assert "the key of 1.0" in by[("0.0", "previous_token")].detail
    # the planted sink writes to a slot nothing reads: removal moves the loss only through the
    # final norm's scale, by less than a role needs, though its interval excludes 0
    sink = by[("0.1", "sink")]
    assert sink.evidence == NOT_SUPPORTED and sink.n_items == MIN_ITEMS
    assert 0 < sink.figure_low <= sink.figure <= sink.figure_high < MIN_LOSS and "below" in sink.detail
    assert by[("1.0", "sink")].evidence == NOT_SUPPORTED
    # the planted duplicate-token head has its own test now (issue 28 item 4): its output, the same
    # token's code whichever copy it reads, goes to the unread slot, so the knockout moves nothing
    dup = by[("0.2", "duplicate_token")]
    assert dup.evidence == NOT_SUPPORTED and "barely depend" in dup.detail and abs(dup.figure) < MIN_LOSS
    assert by[("1.1", "referent")].evidence == NOT_TESTABLE and by[("1.1", "referent")].detail


def test_smoke_evidence_states_no_finding(planted_model):
    ev = role_evidence(planted_model, _table(_planted_rows()), n=4, T=8, smoke=True)
    tested = ev[ev["evidence"] != NOT_TESTABLE]
    assert len(tested) >= 3 and (tested["evidence"] == NO_FINDING).all()
    assert np.isfinite(tested["figure"]).all() and tested["detail"].str.startswith("smoke test").all()
    assert not tested["detail"].str.contains("raises the loss|restores|moves the preference").any()


def test_too_few_items_are_refused(planted_model):
    with pytest.raises(InputError, match="at least 10"):
        EvidenceConfig(n=MIN_ITEMS - 1)
    with pytest.raises(InputError, match="at least 10"):
        role_evidence(planted_model, _table(_planted_rows()), n=MIN_ITEMS - 1)
    EvidenceConfig(n=4, smoke=True)  # a smoke test may run on fewer


def test_encoder_roles_are_not_testable_with_the_reason(family_model):
    bert = family_model("bert")  # a tiny BertForMaskedLM (ENCODER_FAMILIES)
    ev = role_evidence(
        bert, _table([(1, 0, r) for r in ("induction", "previous_token", "duplicate_token", "referent", "sink")]), n=MIN_ITEMS
    )
    assert (ev["evidence"] == NOT_TESTABLE).all() and ev["detail"].str.contains("encoder").all()


def test_joint_path_equals_single_receiver_path(planted_model):
    from headlens.analyses.patching.builtin import induction_task
    from headlens.analyses.patching.path import PathConfig, run_path_patching

    task = induction_task(planted_model, n=6, T=8, seed=0)
    one = run_path_patching(planted_model, task, PathConfig(receivers=((1, 0),), n_resamples=50)).table
    joint = run_path_patching(planted_model, task, PathConfig(receivers=((1, 0),), joint=True, n_resamples=50)).table
    assert np.allclose(one["effect"], joint["effect"], atol=PATH_TOL)
    both = run_path_patching(planted_model, task, PathConfig(receivers=((1, 0), (1, 1)), joint=True, n_resamples=50)).table
    assert len(both) == planted_model.n_heads and (both["receiver"] == "1.0+1.1").all()
    assert both["sender"].iloc[both["effect"].abs().to_numpy().argmax()] == "0.0"


@pytest.mark.parametrize(
    "args, said",
    [
        (["--evidence", "--evidence-n", "5"], "at least 10 items per test to state a verdict (--evidence-n 5)"),
        (["--evidence-n", "12"], "need --evidence"),
        (["--evidence", "--evidence-seq-len", "1"], "(--evidence-seq-len 1)"),
    ],
)
def test_classify_evidence_bad_flags_exit_2_before_loading(runner, tmp_path, args, said):
    res = runner.invoke(cli, ["classify", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o"), *args])
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("headlens: error:") and said in lines[0], res.output
    assert not (tmp_path / "o").exists()
