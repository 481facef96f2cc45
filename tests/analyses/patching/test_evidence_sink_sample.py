"""Role evidence that costs what it should when sinks are a population (issue: the SmolLM2 report's
evidence tested 200 sink roles one head at a time, most of its 23 minutes).

On a tiny seeded Llama of 4 layers x 3 heads with one key-value head (a group of 3 query heads, as
SmolLM2's) and the planted census of tests/analyses/heads/planted_sinks.py (10 of 12 heads sink, 9
of them sink only; 2.1 induction and sink; 0.0 previous-token): the sink role is tested on a
seeded random sample of the sink-only heads and on every head with another role, the rest recorded
as "not tested: sampled out", the population's verdict is a count with a Wilson interval, the cost
is said before the run and progress counts forwards; ``roles=`` chooses the roles to test.
"""

from __future__ import annotations

import pytest

import headlens
from headlens.analyses.measure.stats import wilson
from headlens.analyses.patching.evidence import NOT_TESTED, EvidenceConfig
from headlens.analyses.patching.evidence_plan import FORWARDS, evidence_plan, select_tests
from headlens.analyses.patching.evidence_rules import shared_keys
from headlens.analyses.patching.evidence_sink import choose_sink_heads, sink_sample_verdict
from headlens.probes.errors import InputError
from headlens.reports.api.census import CensusResult
from tests.analyses.heads.planted_sinks import planted_sink_scores
from tests.reports.api.conftest import census_of_scores

SINK_ONLY = {(a, b) for a in range(4) for b in range(3)} - {(0, 0), (0, 1), (2, 1)}


def _census(not_sinks=None) -> CensusResult:
    return census_of_scores(planted_sink_scores(not_sinks), model="tiny-llama")


@pytest.fixture(scope="module")
def llama_4x3(tmp_path_factory):
    """A tiny random Llama shaped as the planted census: 4 layers x 3 heads, 1 key-value head."""
    from headlens.analyses.synthetic.families import build_family_checkpoint
    from headlens.probes.loading import load_model

    folder = build_family_checkpoint(tmp_path_factory.mktemp("llama43"), "llama", n_layers=4, n_heads=3, n_kv_heads=1, d_model=48)
    return load_model(model=str(folder), device="cpu")


def test_the_sample_is_seeded_and_keeps_every_head_with_another_role():
    roles = _census().roles
    sinks = [(int(a), int(b)) for a, b, r in zip(roles["layer"], roles["head"], roles["role"], strict=True) if r == "sink"]
    got = choose_sink_heads(roles, sinks, population=True, k=3, seed=0)
    assert got.population == 9 and got.sampled == 3 and len(got.sampled_out) == 6
    assert (2, 1) in got.tested and len(got.tested) == 4 and set(got.tested) - {(2, 1)} <= SINK_ONLY
    assert got == choose_sink_heads(roles, sinks, population=True, k=3, seed=0)  # seeded
    assert got.tested != choose_sink_heads(roles, sinks, population=True, k=3, seed=1).tested
    assert "sampled out (population of 9)" in got.reason() and "seed 0" in got.reason()
    # not a population, or a sample as large as the population: every sink role is tested
    assert choose_sink_heads(roles, sinks, population=False, k=3, seed=0).tested == tuple(sorted(sinks))
    assert choose_sink_heads(roles, sinks, population=True, k=0, seed=0).sampled_out == ()
    assert choose_sink_heads(roles, sinks, population=True, k=9, seed=0).sampled_out == ()


def test_the_plan_counts_forwards_and_roles_choose_the_tests():
    roles = _census().roles
    chosen = select_tests(roles, sink_sample=3, population=True, seed=0)
    plan = evidence_plan(chosen, n=10, T=4)
    assert plan.tests == {"previous_token": (1, 4), "induction": (1, 4), "sink": (4, 5)} and plan.forwards == 13
    assert plan.not_tested == 6 and "3 of 9 sink-only heads, a random sample (seed 0)" in plan.text()
    only = select_tests(roles, only=("induction",), sink_sample=3, population=True, seed=0)
    assert set(only.tested) == {"induction"} and len(only.skipped) == len(roles) - 1
    assert all(why == "role not chosen (roles=induction)" for why in only.skipped.values())
    assert FORWARDS["sink"] == (1, 1)


def test_settings_check_roles_and_the_sample():
    assert EvidenceConfig(roles="induction,sink").roles == ("induction", "sink")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InputError, match="choose from"):
        EvidenceConfig(roles=("sinks",))
    with pytest.raises(InputError, match="sink_sample=-1"):
        EvidenceConfig(sink_sample=-1)


def test_wilson_interval():
    low, high = wilson(11, 12)
    assert low == pytest.approx(0.6461, abs=1e-3) and high == pytest.approx(0.9851, abs=1e-3)


def test_sink_evidence_on_a_sample_of_the_population(llama_4x3):
    census = _census()
    seen: list[tuple[str, int, int]] = []
    said: list[str] = []
    tested = headlens.evidence(
        llama_4x3, census, n=10, T=4, sink_sample=3, progress=lambda s, d, t: seen.append((s, d, t)), say=said.append
    )
    ev = tested.evidence
    assert ev is not None
    sink = ev[ev["role"] == "sink"]
    assert len(ev) == len(census.roles) and len(sink) == 10  # every (head, role) has a row: nothing silently skipped
    out = sink[sink["evidence"] == NOT_TESTED]
    assert len(out) == 6 and all("sampled out (population of 9)" in d for d in out["detail"])
    assert {(int(a), int(b)) for a, b in zip(out["layer"], out["head"], strict=True)} <= SINK_ONLY
    ran = sink[sink["evidence"] != NOT_TESTED]
    assert "2.1" in set(ran["name"]) and ran["figure"].notna().all()  # the head with another role: always tested
    # the cost before the run, then progress in forwards up to the plan's total
    assert len(said) == 1 and "13 forwards of 10 items" in said[0] and "one forward took" in said[0]
    assert seen[0] == ("evidence", 0, 13) and seen[-1] == ("evidence", 13, 13)
    about = tested.manifest["evidence"]
    assert about["plan"]["forwards"] == 13 and about["sink_sample"]["population"] == 9
    assert about["sink_sample"]["sampled"] == 3 and about["sink_sample"]["not_tested"] == 6 and about["sink_sample"]["seed"] == 0
    assert tested.manifest["config"]["evidence"]["sink_sample"] == 3
    # the population's verdict: a count of the sampled sink-only heads, with its interval
    verdict = sink_sample_verdict(ev, census.roles)
    assert verdict is not None and verdict.judged + verdict.untestable == 3 and verdict.not_tested == 6
    lines = list(tested.findings().lines)
    sink_lines = [ln for ln in lines if ln.lstrip().startswith(("sink:", "sink,"))]
    assert f"of {verdict.judged} sampled sink-only heads" in sink_lines[0] and "Wilson interval" in sink_lines[0]
    assert "a random sample (seed 0) of the 9 sink-only heads, 6 not tested" in sink_lines[0]
    assert "heads with another role (all tested)" in sink_lines[1]
    assert "6 not tested" in next(ln for ln in lines if ln.startswith("evidence:"))
    assert "sampled sink-only heads" in tested.summary.split("## Evidence")[1]
    # under GQA the previous-token head's path into 2.1's key patches the key-value head 2.0-2.2 share, said so
    prev = ev[ev["role"] == "previous_token"].iloc[0]
    assert "under GQA a key is shared by 3 query heads" in prev["test"] and "the keys of 2.0, 2.2 too" in prev["test"]


def test_roles_chosen_are_the_only_ones_tested(llama_4x3):
    tested = headlens.evidence(llama_4x3, _census(), n=10, T=4, roles=("previous_token",))
    ev = tested.evidence
    assert ev is not None
    assert set(ev.loc[ev["evidence"] != NOT_TESTED, "role"]) == {"previous_token"}
    assert (ev.loc[ev["role"] != "previous_token", "detail"] == "role not chosen (roles=previous_token)").all()
    assert tested.manifest["evidence"]["plan"]["tests"] == {"previous_token": {"heads": 1, "forwards": 4}}
    assert "sink_sample" not in tested.manifest["evidence"] and sink_sample_verdict(ev, tested.roles) is None
    sink_lines = [ln for ln in tested.findings().lines if ln.lstrip().startswith(("sink:", "sink,"))]
    assert sink_lines == ["  sink: 10 roles not tested: role not chosen (roles=previous_token)"]


def test_half_the_heads_sinking_tests_every_sink_head():
    roles = _census(not_sinks={(1, 0), (1, 1), (1, 2), (3, 0)}).roles  # 6 of 12 heads sink: not a population
    chosen = select_tests(roles, sink_sample=3, population=False, seed=0)
    assert len(chosen.tested["sink"]) == 6 and not chosen.skipped


def test_shared_keys_words():
    assert shared_keys(9, 9, [(17, 3)]) == ""
    text = shared_keys(9, 3, [(17, 3), (17, 4), (17, 5), (18, 6)])
    assert text == "under GQA a key is shared by 3 query heads: 2 key-value heads patched, so the keys of 18.7, 18.8 too"
