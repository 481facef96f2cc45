"""EAP edge scores equal TransformerLens 4.3's ``attribution_patch(granularity="edge")`` on a GPT-2-shaped model.

TransformerLens scores each edge at each position, one pair at a time, in the denoising
convention (gradient on the corrupted run, ``clean - corrupt`` sender difference), and averages
over pairs; a writer's residual contribution at a position reaches a reader only at that
position, so its position-summed scores are our edges' scores.  Its ``embed`` writer is
``hook_embed`` alone, ours the whole stream entering block 0: the position embedding is the
same in both runs, so the differences are equal.
"""

from __future__ import annotations

import numpy as np

from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.scores import attribution_scores
from headlens.analyses.patching.builtin import induction_task

#: Largest allowed |ours - TransformerLens| (metric units; the issue's target).
TL_ATOL = 1e-5


def _tl_edges(model, task):
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    total: dict[tuple[str, str, str], float] = {}
    for i in range(len(task)):
        c, w, n = int(task.correct[i]), int(task.incorrect[i]), int(task.lengths[i])

        def metric(logits, c=c, w=w, n=n):
            return logits[0, n - 1, c] - logits[0, n - 1, w]

        res = attribution_patch(
            model.bridge, task.clean[i : i + 1, :n], task.corrupt[i : i + 1, :n], metric, EdgeAttributionConfig(granularity="edge")
        )
        for (writer, reader), score in res.edge_scores.items():
            s = {"embed": "embed", "mlp_out": f"mlp{writer.layer}"}.get(writer.kind, f"{writer.layer}.{writer.head}")
            if reader.kind in ("q_input", "k_input", "v_input"):
                key = (s, f"{reader.layer}.{reader.head}", reader.kind[0])
            elif reader.kind == "mlp_in":
                key = (s, f"mlp{reader.layer}", "mlp")
            else:
                key = (s, "logits", "logits")
            total[key] = total.get(key, 0.0) + score / len(task)
    return total


def test_eap_equals_transformer_lens(family_model):
    model = family_model("gpt2")  # 2 x 4 heads, d_model 64, weights of std 0.25: edges of every kind matter
    graph = build_graph(model)
    task = induction_task(model, n=4, T=8)
    ours = attribution_scores(model, task, graph, steps=1, direction="denoising").values.mean(0)
    theirs = _tl_edges(model, task)
    assert len(theirs) == len(graph.edges)  # the same graph, edge for edge
    idx = graph.index(list(theirs))
    ref = np.array(list(theirs.values()))
    assert np.abs(ref).max() > 0.05  # scores large enough for the comparison to mean something
    diff = np.abs(ours[idx] - ref).max()
    assert diff <= TL_ATOL, f"max |ours - TransformerLens| = {diff:.3g}"
