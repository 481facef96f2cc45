"""What a circuit run will cost, said before it starts (issue 46 item 14).

:func:`circuit_cost` counts the work of :func:`~headlens.analyses.circuits.run.run_circuit` from its
settings and the model's shape alone, in the units the progress lines count: the forwards and
backwards of edge scoring (EAP: one each per pair; EAP-IG: ``steps`` each; exact: one patched row per
edge and pair, run ``max_rows`` rows a forward), the exact rows of confirmation, and the circuits x
pairs of the faithfulness curves (the choosing pairs' and the held-out pairs').  Time is not
guessed here: the progress lines say it once the first unit is measured
(:class:`~headlens.reports.render.progress.ProgressBars`).
"""

from __future__ import annotations

import math

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.exact import auto_rows
from headlens.analyses.circuits.faithfulness import curve_points
from headlens.analyses.circuits.heldout import READABLE_SIZES, split_sizes
from headlens.analyses.circuits.method_choice import choose_method
from headlens.probes.loading import LoadedModel

__all__ = ["circuit_cost", "split_sizes"]


def circuit_cost(model: LoadedModel, n_edges: int, n_pairs: int, width: int, config: CircuitConfig) -> str:
    """One line: what the run of ``config`` on ``n_pairs`` pairs of ``width`` tokens over ``n_edges``
    edges will do (see the module doc)."""
    config, _ = choose_method(config, n_edges)  # method='auto' costed as what it will run
    n_choose, n_held = split_sizes(n_pairs, config.held_out)
    rows_each = config.max_rows or auto_rows(model, width)
    if config.method == "exact":
        rows = n_edges * n_choose
        scoring = f"exact scoring: {n_edges:,} edges x {n_choose} pairs = {rows:,} patched rows ({_forwards(rows, rows_each)})"
        confirm = "no confirmation (exact scores every edge)"
    else:
        steps = config.steps if config.method == "eap-ig" else 1
        scoring = f"{config.method} scoring: {steps:,} forward{'s' if steps > 1 else ''} and backward{'s' if steps > 1 else ''}"
        scoring += f" per pair on {n_choose} pairs ({math.ceil(n_choose / config.batch_size) * steps:,} batches)"
        n_conf = min(config.confirm, n_edges) + min(config.confirm_sample, max(0, n_edges - config.confirm))
        rows = n_conf * n_choose
        confirm = f"confirmation: {n_conf} edges x {n_choose} pairs = {rows:,} exact rows ({_forwards(rows, rows_each)})"
    sizes = len(curve_points(n_edges, config.curve_points, READABLE_SIZES)) + 2  # with the corrupted and the clean run
    search = math.ceil(math.log2(max(2, n_edges)))  # the bisection for the smallest circuit reaching the target
    faith = f"faithfulness: about {sizes + search} circuits x {n_choose} pairs"
    if n_held:
        faith += f", then {sizes} circuits x {n_held} held-out pairs"
    return f"cost: {scoring}; {confirm}; {faith}"


def _forwards(rows: int, per: int) -> str:
    n = math.ceil(rows / max(1, per))
    return f"about {n:,} forward{'s' if n != 1 else ''} of up to {per} rows"
