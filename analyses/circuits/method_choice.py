"""``method="auto"`` (the default): exact edge patching where it is cheap, EAP-IG elsewhere, and why an estimate may
split the credit.

Exact patching runs one patched row per edge and pair: about one forward of the task per edge (``n_edges`` forward
equivalents; the own-blocks path starts each row at its reader's layer, so it is often less).  EAP-IG costs ``2 x
steps`` passes per pair whatever the graph.  When exact is estimated at no more than :data:`AUTO_EXACT_FORWARDS`
forward equivalents (the demo's 110 edges: 110), ``auto`` scores exactly; otherwise it uses EAP-IG and the run's
notes say why its estimate may split the credit (:data:`SPLIT_CREDIT`).

Why the estimate splits it: integrated gradients give each edge the path integral of its own input's gradient.
When a reader needs two inputs at once -- an induction head ANDs its query and its key: it attends to the earlier
token only when both are right -- the effect of restoring one input depends on the other, and the path integral
divides the joint effect between them, so each edge gets about half of what patching it alone removes (the demo,
``--builtin induction --n-pairs 32``, 5 steps: median estimate/exact 0.51 over the 20 confirmed edges, 0.49 in the issue).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from headlens.analyses.circuits.config import CircuitConfig

__all__ = ["AUTO_EXACT_FORWARDS", "SPLIT_CREDIT", "choose_method", "exact_forwards"]

#: ``method="auto"`` scores exactly when that is estimated at no more than this many forward equivalents.
AUTO_EXACT_FORWARDS = 200

#: The note an estimate's run carries (module doc).
SPLIT_CREDIT = (
    "integrated-gradient and first-order estimates may split the credit of edges whose effect needs another input at the "
    "same time (an induction head ANDs its query and key inputs: on the demo EAP-IG gives a median estimate/exact of 0.51 "
    "over its 20 confirmed edges); read the exact column for sizes"
)


def exact_forwards(n_edges: int) -> int:
    """Forward equivalents of exact scoring of every edge: one patched row per edge and pair, about one forward of
    the task per edge."""
    return int(n_edges)


def choose_method(config: CircuitConfig, n_edges: int) -> tuple[CircuitConfig, dict[str, Any] | None]:
    """``config`` with ``method="auto"`` resolved for a graph of ``n_edges`` edges, and what was chosen and why
    (None when the method was given).  A mean or zero ablation scores exactly whatever the cost."""
    if config.method != "auto":
        return config, None
    need = exact_forwards(n_edges)
    exact = need <= AUTO_EXACT_FORWARDS or config.ablation != "corrupted"
    chosen = "exact" if exact else "eap-ig"
    if config.ablation != "corrupted" and need > AUTO_EXACT_FORWARDS:
        why = f"ablation={config.ablation!r} scores edges exactly ({need:,} forward equivalents estimated)"
    else:
        cmp = "at most" if exact else "more than"
        why = f"exact scoring of every edge is estimated at {need:,} forward equivalents, {cmp} {AUTO_EXACT_FORWARDS}"
    return replace(config, method=chosen), {"asked": "auto", "chosen": chosen, "exact_forwards": need,
                                            "limit": AUTO_EXACT_FORWARDS, "why": why}  # fmt: skip
