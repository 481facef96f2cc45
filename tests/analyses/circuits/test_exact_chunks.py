"""Exact edge scores in chunks (:mod:`headlens.analyses.circuits.exact_chunks`), run here: equal to one call, resumed from a journal."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from headlens.analyses.circuits import exact_chunks
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.exact_chunks import exact_scores_parallel, plan_chunks
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.patching.builtin import builtin_task
from headlens.probes.errors import InputError


@pytest.fixture(scope="module")
def setup(tiny_model):
    return tiny_model, build_graph(tiny_model), builtin_task(tiny_model, "induction", n=6, seed=0)


def test_the_chunks_cover_every_cell_once():
    chunks = plan_chunks(7, 110, edges_per_chunk=32, pairs_per_chunk=3)
    seen = np.zeros((7, 110), dtype=int)
    for c in chunks:
        seen[c.pairs[0] : c.pairs[1], c.edges[0] : c.edges[1]] += 1
    assert (seen == 1).all() and len(chunks) == 3 * 4 and len({c.key for c in chunks}) == len(chunks)
    assert len(plan_chunks(6, 70_651)) == exact_chunks.CHUNKS_PER_RUN  # the default: 64 edge blocks, every pair in each
    assert len(plan_chunks(6, 100)) == 4  # at least MIN_EDGES_PER_CHUNK edges a chunk


def test_chunks_run_here_equal_one_call(setup):
    model, graph, task = setup
    one = exact_scores(model, task, graph)
    got = exact_scores_parallel(model, task, graph, edges_per_chunk=32, pairs_per_chunk=4)
    assert got.values.shape == one.values.shape and not np.isnan(got.values).any()
    np.testing.assert_allclose(got.values, one.values, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.clean, one.clean, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.corrupt, one.corrupt, rtol=0, atol=1e-6)
    assert got.method == "exact" and got.metric == one.metric and got.info["chunks"] == 8
    assert (got.edge_ids == one.edge_ids).all() and got.forwards > one.forwards  # each chunk reruns its capture
    some = exact_scores_parallel(model, task, graph, [3, 50, 7], edges_per_chunk=2)
    np.testing.assert_allclose(some.values, one.values[:, [3, 50, 7]], rtol=0, atol=1e-6)


def test_a_run_stopped_midway_resumes_from_its_journal_with_only_the_missing_chunks(setup, tmp_path, monkeypatch):
    model, graph, task = setup
    journal = tmp_path / "exact.jsonl"
    whole = exact_scores_parallel(model, task, graph, edges_per_chunk=32, pairs_per_chunk=4)

    def stop_after_three(stage, done, total):
        if done >= 3 * 4 * 32:  # three chunks of 4 pairs x 32 edges
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exact_scores_parallel(model, task, graph, edges_per_chunk=32, pairs_per_chunk=4, journal=journal, progress=stop_after_three)
    assert len(journal.read_text().splitlines()) == 1 + 3
    with journal.open("a") as f:
        f.write('{"key": "p0-4:e96-110", "res')  # a line cut short by a kill while it was written

    ran = []
    score = exact_chunks._score_chunk
    monkeypatch.setattr(exact_chunks, "_score_chunk", lambda state, payload: ran.append(1) or score(state, payload))
    steps = []
    got = exact_scores_parallel(model, task, graph, edges_per_chunk=32, pairs_per_chunk=4, journal=journal,
                                progress=lambda s, d, t: steps.append(d))  # fmt: skip
    assert len(ran) == 8 - 3 and steps[0] == 3 * 4 * 32 and steps[-1] == 6 * 110
    assert np.array_equal(got.values, whole.values) and np.array_equal(got.clean, whole.clean)  # bit for bit: the same chunks
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert len(lines) == 1 + 8 and "settings" in lines[0]

    with pytest.raises(InputError, match="other settings \\(direction\\)"):
        exact_scores_parallel(model, task, graph, edges_per_chunk=32, pairs_per_chunk=4, journal=journal, direction="denoising")


def test_workers_address_and_journal_belong_to_exact_scores():
    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.circuits.exact_chunks import chunked

    extras: list[dict[str, Any]] = [{"workers": 2}, {"address": "auto"}, {"journal": "chunks.jsonl"}]
    for extra in extras:
        assert chunked(CircuitConfig(method="exact", **extra))
        with pytest.raises(InputError, match="method='exact'"):
            CircuitConfig(method="eap-ig", **extra)
        with pytest.raises(InputError, match="method='exact'"):
            CircuitConfig(method="exact", ablation="mean", **extra)
    assert not chunked(CircuitConfig(method="exact"))
    with pytest.raises(InputError, match="workers"):
        CircuitConfig(method="exact", workers=0)
