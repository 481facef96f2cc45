"""The circuits' rules: one rule in one place (the split sizes, the unknown-ablation message), a wrong-typed
ground_truth= is one line, and CPR/CMD rank by the raw effect where the clean-corrupted gap is not defined."""

from __future__ import annotations

import json

import numpy as np
import pytest

import headlens.analyses.circuits.heldout as heldout
import headlens.analyses.circuits.run as run_mod
from headlens.analyses.circuits import ablation_kinds, config
from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.patching.pairs import pair_task
from headlens.probes.errors import InputError


def test_split_pairs_uses_split_sizes(monkeypatch):
    calls: list = []
    real = heldout.split_sizes
    monkeypatch.setattr(heldout, "split_sizes", lambda n, s: calls.append((n, s)) or real(n, s))
    heldout.split_pairs(32, 0.5, 0)
    assert calls == [(32, 0.5)]


def test_unknown_ablation_message_has_one_home():
    assert ablation_kinds.check_ablation is config.check_ablation
    with pytest.raises(InputError, match="unknown ablation 'resample'"):
        CircuitConfig(ablation="resample")


@pytest.mark.parametrize("bad", [5, 1.5, ["a.json"]])
def test_ground_truth_of_the_wrong_type_is_one_line(bad):
    with pytest.raises(InputError) as err:
        CircuitConfig(ground_truth=bad)
    assert "ground_truth=" in str(err.value) and "\n" not in str(err.value)


def test_mib_ranks_by_the_raw_effect_when_the_gap_is_not_defined(demo_model, tmp_path, monkeypatch):
    """Each pair and its swap (clean and corrupted exchanged): the mean clean and corrupted metrics are equal, every
    score is NaN; CPR/CMD's circuits must not be the graph's first edges."""
    a, b = "a b c d a b c", "e f g h e f g"
    rows = [{"clean": a, "corrupt": b, "correct": " d", "incorrect": " h"}, {"clean": b, "corrupt": a, "correct": " d", "incorrect": " h"}]
    path = tmp_path / "swap.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows * 2) + "\n")
    task = pair_task(demo_model, path)
    seen: list = []
    real = run_mod.mib_metrics
    monkeypatch.setattr(run_mod, "mib_metrics", lambda *a, **k: seen.append(np.array(a[3])) or real(*a, **k))
    run = run_mod.run_circuit(demo_model, task, CircuitConfig(method="exact", top_n=4, n_bootstrap=20, curve_points=2, held_out=0))
    assert run.edges["score"].isna().all()
    (scores,) = seen
    assert np.isfinite(scores).all() and np.abs(scores).max() > 0
    assert any("raw mean effect" in n for n in run.notes)
