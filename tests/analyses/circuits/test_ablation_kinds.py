"""Issue 46, item 5: mean and zero ablation of the edges outside a circuit (the tracr cases are in
tests/analyses/tracr/test_truth_in_command.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from headlens.analyses.circuits.ablation_kinds import ablation_for
from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.faithfulness import circuit_values
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.hooks import edge_flags
from headlens.analyses.circuits.scores import senders_of
from headlens.analyses.patching.builtin import builtin_task
from headlens.analyses.patching.pairs import pair_eval_sets
from headlens.probes.errors import InputError


@pytest.fixture(scope="module")
def setup(demo_model):
    task = builtin_task(demo_model, "induction", n=8, seed=0)
    return task, build_graph(demo_model)


def test_mean_is_the_senders_mean_over_clean_and_corrupted(demo_model, setup):
    task, graph = setup
    abl = ablation_for(demo_model, graph, task, "mean", batch_size=3)  # batches of 3: the mean over uneven batches
    assert abl is not None and abl.mean is not None
    with edge_flags(demo_model):
        outs = [senders_of(demo_model, graph, task, list(range(len(task))), data.batch(list(range(len(task))))[0], data)[0]
                for data in pair_eval_sets(demo_model, task)]  # fmt: skip
    want = torch.cat(outs).double().mean(0)  # the induction pairs are all one length
    assert torch.allclose(abl.mean[0].double(), want, atol=1e-5)
    assert ablation_for(demo_model, graph, task, "corrupted") is None


def test_every_edge_kept_is_the_clean_run_and_zero_ignores_the_corrupted_input(demo_model, setup):
    task, graph = setup
    masks = np.zeros((2, len(graph.edges)), dtype=bool)
    masks[1] = True
    zero = ablation_for(demo_model, graph, task, "zero")
    a = circuit_values(demo_model, task, graph, masks, ablation=zero)
    b = circuit_values(demo_model, task, graph, masks)
    assert np.allclose(a[1], b[1], atol=1e-5)  # the full circuit: the clean run under any ablation
    assert not np.allclose(a[0], b[0], atol=1e-2)  # the empty circuit: zero ablation is not the corrupted run
    other = replace(task, corrupt=task.corrupt[torch.arange(len(task)).roll(1)])  # other corrupted inputs
    assert np.allclose(circuit_values(demo_model, other, graph, masks, ablation=zero)[0], a[0], atol=1e-5)


def test_an_estimate_under_mean_or_zero_ablation_is_one_line():
    with pytest.raises(InputError, match="give method='exact'"):
        CircuitConfig(method="eap-ig", ablation="zero")
    with pytest.raises(InputError, match="unknown ablation"):
        CircuitConfig(ablation="resample")


def test_exact_scores_under_zero_are_the_same_in_chunks(demo_model, setup, monkeypatch):
    import headlens.analyses.circuits.ablation_kinds as kinds

    task, graph = setup
    small = replace(task, clean=task.clean[:3], corrupt=task.corrupt[:3], lengths=task.lengths[:3], correct=task.correct[:3],
                    incorrect=task.incorrect[:3])  # fmt: skip
    zero = ablation_for(demo_model, graph, small, "zero")
    assert zero is not None
    whole = kinds.ablated_exact_scores(demo_model, small, graph, zero)
    monkeypatch.setattr(kinds, "MASK_CHUNK", 7)  # 110 edges in 16 calls
    chunked = kinds.ablated_exact_scores(demo_model, small, graph, zero)
    assert np.allclose(whole.values, chunked.values, atol=1e-5) and whole.values.shape == (3, len(graph.edges))
    one = np.ones((1, len(graph.edges)), dtype=bool)
    one[0, 5] = False  # edge 5 alone zeroed: its score
    v = circuit_values(demo_model, small, graph, one, ablation=zero)[0]
    assert np.allclose(chunked.values[:, 5], v - whole.clean, atol=1e-5)


def test_mean_reference_is_the_choosing_pairs_only(demo_model, monkeypatch):
    """The held-out pairs do not help choose the circuit: run_circuit's mean reference is built from the choosing pairs."""
    import headlens.analyses.circuits.run as run_mod
    from headlens.analyses.circuits.heldout import split_pairs

    seen: list = []

    class Stop(Exception):
        pass

    def spy(model, graph, task, kind, **kw):
        seen.append(task)
        raise Stop

    monkeypatch.setattr(run_mod, "ablation_for", spy)
    task = builtin_task(demo_model, "induction", n=16, seed=0)
    with pytest.raises(Stop):
        run_mod.run_circuit(demo_model, task, CircuitConfig(method="exact", ablation="mean", n_bootstrap=20, curve_points=2))
    split = split_pairs(16, 0.5, 0)
    assert len(seen[0]) == len(split.choose) == 8
    assert torch.equal(seen[0].clean, task.clean[torch.as_tensor(split.choose)])
