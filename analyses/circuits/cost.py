"""What a circuit run will cost, said before it starts (issue 46 item 14).

:func:`circuit_cost` counts the work of :func:`~headlens.analyses.circuits.run.run_circuit` from its
settings and the model's shape alone, in the units the progress lines count: the forwards and
backwards of edge scoring (EAP: one each per pair; EAP-IG: ``steps`` each; exact: one patched row per
edge and pair, run ``max_rows`` rows a forward), the exact rows of confirmation, the circuits x
pairs of the faithfulness curves (the choosing pairs' and the held-out pairs', the bisection's points in both), and
MIB's CPR/CMD circuits; under mean ablation, the reference's forwards; under mean or zero ablation, exact scoring's
circuits (every edge's, the full and the empty one).  Time is not
guessed here: the progress lines say it once the first unit is measured
(:class:`~headlens.reports.render.progress.ProgressBars`).
"""

from __future__ import annotations

import math

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.faithfulness import curve_points
from headlens.analyses.circuits.heldout import READABLE_SIZES, split_sizes
from headlens.analyses.circuits.method_choice import choose_method
from headlens.analyses.circuits.mib import MIB_FRACTIONS
from headlens.probes.loading import LoadedModel

__all__ = ["circuit_cost", "split_sizes", "auto_rows", "ROW_BYTES", "MIN_AUTO_ROWS", "MAX_AUTO_ROWS"]


#: Device memory (bytes) the activations of one patched forward may take when ``max_rows`` is not given.
ROW_BYTES = 256 * 2**20
#: The default ``max_rows`` is at least this (what it was before it depended on the model) and at most
#: :data:`MAX_AUTO_ROWS` (past that a forward's fixed cost is long amortised).
MIN_AUTO_ROWS, MAX_AUTO_ROWS = 256, 8192


def auto_rows(model: LoadedModel, width: int, *, own: bool = False) -> int:
    """Rows of ``width`` positions per patched forward whose activations fit in :data:`ROW_BYTES`.

    A row's peak, in float32, through the bridge: the split q/k/v inputs of a block (``3 * n_heads`` residual
    copies) and the reader hook's copy of them, the residual stream and its patch, the MLP's hidden layer, one
    head's pattern row per head, and the logits.  ``own`` (:mod:`~headlens.probes.fast_blocks`): the
    stream, its norm, its patch and the attention output, the fused q/k/v product twice (a patched copy), the
    MLP's hidden layer twice (its activation) and the pattern three times (scores, masked, softmax); no split copies,
    no logits."""
    cfg = model.bridge.cfg
    n_h, d_model = int(cfg.n_heads), int(cfg.d_model)
    d_mlp = int(getattr(cfg, "d_mlp", None) or 4 * d_model)
    d_vocab = int(cfg.d_vocab)
    w = max(1, width)
    if own:
        per_row = 4 * w * (4 * d_model + 6 * n_h * int(cfg.d_head) + 2 * d_mlp + 3 * n_h * w)
    else:
        per_row = 4 * w * (6 * n_h * d_model + 4 * d_model + d_mlp + n_h * w + d_vocab)
    return int(min(MAX_AUTO_ROWS, max(MIN_AUTO_ROWS, ROW_BYTES // per_row)))


def circuit_cost(model: LoadedModel, n_edges: int, n_pairs: int, width: int, config: CircuitConfig) -> str:
    """One line: what the run of ``config`` on ``n_pairs`` pairs of ``width`` tokens over ``n_edges``
    edges will do (see the module doc)."""
    config, _ = choose_method(config, n_edges)  # method='auto' costed as what it will run
    n_choose, n_held = split_sizes(n_pairs, config.held_out)
    rows_each = config.max_rows or auto_rows(model, width)
    if config.ablation != "corrupted":  # ablated_exact_scores: every edge's circuit, the full and the empty one, per pair
        scoring = f"mean reference: 2 forwards x {n_choose} pairs; " if config.ablation == "mean" else ""
        scoring += f"exact scoring under {config.ablation} ablation: {n_edges + 2:,} circuits x {n_choose} pairs"
        confirm = "no confirmation (exact scores every edge)"
    elif config.method == "exact":
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
    if n_held:  # every row of the curve again, the bisection's included
        faith += f", then about {sizes + search} circuits x {n_held} held-out pairs"
    mib = f"CPR/CMD: {2 + 2 * len(MIB_FRACTIONS)} circuits x " + (f"{n_held} held-out pairs" if n_held else f"{n_choose} pairs")
    return f"cost: {scoring}; {confirm}; {faith}; {mib}"


def _forwards(rows: int, per: int) -> str:
    n = math.ceil(rows / max(1, per))
    return f"about {n:,} forward{'s' if n != 1 else ''} of up to {per} rows"
