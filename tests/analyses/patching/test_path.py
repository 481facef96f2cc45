"""Path patching recovers the planted circuit: previous-token 0.0 -> induction 1.0 through the key."""

from __future__ import annotations

import pytest

from headlens.analyses.patching.builtin import induction_task
from headlens.analyses.patching.path import PathConfig, run_path_patching, strongest_edges
from headlens.probes.errors import InputError

#: The planted edge restores (almost) all of the clean behaviour; every other edge (almost) none.
STRONG, WEAK = 0.9, 0.05


@pytest.fixture(scope="module")
def planted_task(planted_model):
    return induction_task(planted_model, n=8, T=12, seed=0)


def test_planted_k_composition_is_the_largest_edge(planted_model, planted_task):
    result = run_path_patching(planted_model, planted_task, PathConfig(receivers=((1, 0), (1, 1)), receiver_input="k", n_resamples=200))
    table = result.table
    assert len(table) == 8  # 4 senders x 2 receivers
    top = strongest_edges(table, 2)
    assert (top.loc[0, "sender"], top.loc[0, "receiver"]) == ("0.0", "1.0")
    effect, low = top["effect"].to_numpy(), top["effect_low"].to_numpy()  # top is indexed 0, 1, ...
    assert effect[0] >= STRONG and low[0] >= STRONG
    assert abs(effect[1]) <= WEAK


def test_the_planted_edge_goes_through_the_key_not_the_query(planted_model, planted_task):
    result = run_path_patching(planted_model, planted_task, PathConfig(receivers=((1, 0),), receiver_input="q", n_resamples=0))
    assert result.table["effect"].abs().max() <= WEAK


def test_unknown_or_impossible_receivers_are_refused(planted_model, planted_task):
    with pytest.raises(InputError, match="layer 7 is out of range"):
        run_path_patching(planted_model, planted_task, PathConfig(receivers=((7, 0),)))
    with pytest.raises(InputError, match="layer 0: no head sends"):
        run_path_patching(planted_model, planted_task, PathConfig(receivers=((0, 1),)))
    with pytest.raises(InputError, match="receiver input"):
        PathConfig(receivers=((1, 0),), receiver_input="x")


@pytest.mark.parametrize("joint", [False, True])
def test_chosen_senders_give_the_same_edges(planted_model, planted_task, joint):
    """``senders=``: only those heads' rows, each the same number as in the run over every head."""
    config = PathConfig(receivers=((1, 0), (1, 1)), receiver_input="k", n_resamples=0, joint=joint)
    full = run_path_patching(planted_model, planted_task, config).table.set_index(["sender", "receiver"])
    some = run_path_patching(planted_model, planted_task, config, senders=((0, 2), (0, 0), (1, 3)))
    assert sorted(set(some.table["sender"])) == ["0.0", "0.2"]  # 1.3 sends to no receiver before it
    assert some.info["senders"] == ["0.0", "0.2"]
    for row in some.table.to_dict("records"):
        assert row["effect"] == pytest.approx(full.loc[(row["sender"], row["receiver"]), "effect"], abs=1e-6)
