"""A circuit run says what it will cost before it starts and shows progress (issue 46 item 14):
``circuit --method exact`` on a GPT-2-small-shaped model printed nothing for 600 s; exact scoring
said one step per pair group (one in all for 16 pairs), confirmation and the faithfulness curve none."""

from __future__ import annotations

import io

import numpy as np
import pytest

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.cost import circuit_cost, split_sizes
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.faithfulness import faithfulness_curve
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.patching.builtin import builtin_task
from headlens.probes.progress import announce
from headlens.reports.cli.main import cli
from headlens.reports.render.progress import ProgressBars


@pytest.fixture(scope="module")
def demo_task(demo_model):
    return demo_model, build_graph(demo_model), builtin_task(demo_model, "induction", n=16, seed=0)


def _steps(seen, stage):
    done = [d for s, d, _t in seen if s == stage]
    totals = {t for s, _d, t in seen if s == stage}
    return done, totals


def test_exact_scoring_steps_after_every_patched_forward(demo_task):
    model, graph, task = demo_task
    seen: list = []
    exact_scores(model, task, graph, batch_size=8, max_rows=64, progress=lambda *a: seen.append(a))
    done, totals = _steps(seen, "exact")
    cells = len(task) * len(graph.edges)  # 16 pairs x 110 edges
    assert totals == {cells} and done[-1] == cells
    assert len(done) >= cells // 64 and done == sorted(set(done))  # each count once, rising; was 1 step for 16 pairs


def test_the_faithfulness_curve_steps_per_circuit_chunk(demo_task):
    model, graph, task = demo_task
    seen: list = []
    faithfulness_curve(model, task, graph, np.arange(len(graph.edges)), [0, 5, 50, 110], n_bootstrap=20, progress=lambda *a: seen.append(a))
    done, totals = _steps(seen, "faithfulness")
    assert totals == {6 * len(task)} and done[-1] == 6 * len(task) and len(done) >= 2  # was ("faithfulness", 1, 1): no line


def test_the_cost_line_counts_what_the_run_will_do(demo_model):
    exact = circuit_cost(demo_model, 110, 16, 44, CircuitConfig(method="exact", held_out=0.0, max_rows=64))
    assert exact.startswith("cost: exact scoring: 110 edges x 16 pairs = 1,760 patched rows (about 28 forwards of up to 64 rows)")
    assert "no confirmation" in exact
    ig = circuit_cost(demo_model, 110, 32, 44, CircuitConfig(method="eap-ig", steps=1000, confirm=20, confirm_sample=20, max_rows=64))
    assert "eap-ig scoring: 1,000 forwards and backwards per pair on 16 pairs (2,000 batches)" in ig
    assert "confirmation: 40 edges x 16 pairs = 640 exact rows (about 10 forwards of up to 64 rows)" in ig
    assert "x 16 held-out pairs" in ig
    from headlens.analyses.circuits.heldout import split_pairs

    for n, share in ((15, 0.5), (16, 0.5), (32, 0.5), (40, 0.1), (64, 0.9), (64, 0.0)):  # split_pairs's rule, not drawn
        split = split_pairs(n, share, 0)
        assert split_sizes(n, share) == (len(split.choose), len(split.held_out))


def test_announce_reaches_the_bars_and_not_a_plain_function():
    stream = io.StringIO()
    announce(ProgressBars("circuit", stream=stream, tty=False), "cost: 3 forwards")
    announce(lambda stage, done, total: None, "nowhere")
    assert stream.getvalue() == "circuit: cost: 3 forwards\n"


def test_circuit_exact_says_its_cost_first_then_progress(runner, tmp_path):
    out = tmp_path / "c"
    args = ["circuit", "--model", "demo", "--method", "exact", "--n-pairs", "16", "--held-out", "0", "--n-bootstrap", "20"]
    result = runner.invoke(cli, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    cost = next(i for i, line in enumerate(lines) if line.startswith("circuit: cost: exact scoring: 110 edges x 16 pairs"))
    first_step = next(i for i, line in enumerate(lines) if line.startswith("circuit: exact: "))
    assert cost < first_step and any(line.startswith("circuit: faithfulness: ") for line in lines), result.output


def test_the_held_out_curve_steps_under_its_own_name(demo_task):
    from headlens.analyses.circuits.heldout import held_out_curve

    model, graph, task = demo_task
    order = np.arange(len(graph.edges))
    curve, _, _ = faithfulness_curve(model, task, graph, order, [0, 5, 110], n_bootstrap=20)
    seen: list = []
    held_out_curve(model, task, graph, order, curve, CircuitConfig(n_bootstrap=20), progress=lambda *a: seen.append(a))
    done, totals = _steps(seen, "held-out faithfulness")
    assert totals == {5 * len(task)} and done[-1] == 5 * len(task)  # was silent


@pytest.mark.parametrize("ablation", ["corrupted", "mean"])
def test_the_cost_line_covers_the_held_out_work(demo_task, monkeypatch, ablation):
    """Every circuit x held-out pair the run measures (curve rows with the bisection's, MIB's circuits) is in the
    cost line's held-out count, which overstates it by at most the bisection's log2(edges)."""
    import math
    import re

    import headlens.analyses.circuits.faithfulness as faith
    import headlens.analyses.circuits.mib as mib
    import headlens.analyses.circuits.run as run_mod
    from headlens.analyses.circuits.heldout import split_pairs

    model, graph, task = demo_task
    held = [int(i) for i in split_pairs(len(task), 0.5, 0).held_out]
    seen = {"held": 0, "mean_pairs": 0}
    for mod in (faith, mib, run_mod):
        real = mod.circuit_values

        def spy(m, t, g, masks, *a, _real=real, **k):
            if t.source.get("rows") == held:
                seen["held"] += int(np.atleast_2d(masks).shape[0]) * len(t)
            return _real(m, t, g, masks, *a, **k)

        monkeypatch.setattr(mod, "circuit_values", spy)
    real_abl = run_mod.ablation_for
    monkeypatch.setattr(run_mod, "ablation_for", lambda m, g, t, kind, **k: seen.update(mean_pairs=len(t)) or real_abl(m, g, t, kind, **k))
    config = CircuitConfig(method="exact", ablation=ablation, n_bootstrap=20, curve_points=3, confirm=0, confirm_sample=0)
    run_mod.run_circuit(model, task, config, graph=graph)
    line = circuit_cost(model, len(graph.edges), len(task), int(task.lengths.max()), config)
    said = sum(int(c.replace(",", "")) * int(p) for c, p in re.findall(r"([\d,]+) circuits x (\d+) held-out pairs", line))
    search = math.ceil(math.log2(len(graph.edges))) * len(held)
    assert seen["held"] > 0 and said - search <= seen["held"] <= said, line
    if ablation == "mean":
        assert f"mean reference: 2 forwards x {seen['mean_pairs']} pairs" in line
        assert f"{len(graph.edges) + 2:,} circuits x {len(task) - len(held)} pairs" in line
