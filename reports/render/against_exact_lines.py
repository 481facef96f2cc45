"""What ``headlens circuit`` prints of an estimate judged by exact patching on a sample of edges (``summary["against_exact"]``).

Read from a row of :func:`headlens.analyses.circuits.against_exact.against_exact` (:meth:`AgainstExact.row`), as the
manifest keeps it; an interval wider than :data:`~headlens.analyses.circuits.against_exact.WIDE_INTERVAL` is said to be
too wide to read, not worded as a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headlens.analyses.circuits.against_exact import WIDE_INTERVAL

__all__ = ["against_exact_line", "against_exact_lines"]


def against_exact_line(row: Mapping[str, Any]) -> str:
    """``EAP-IG: AUROC 0.xx [lo, hi] against exact patching over N edges (top K + random M of R), Spearman rho ...``."""
    n_top, n_random = int(row["n_top"]), int(row["n_random"])
    sampled = f"{n_top + n_random:,} edges (top {n_top:,} + random {n_random:,} of {int(row['n_rest']):,})"
    name = str(row["method"]).upper()
    if row.get("reason"):
        return f"{name}: no AUROC against exact patching over {sampled}: {row['reason']}"
    lo, hi = float(row["auc_low"]), float(row["auc_high"])
    auc = f"AUROC {float(row['auc']):.2f} [{lo:.2f}, {hi:.2f}]"
    if row.get("wide"):
        auc = f"AUROC {float(row['auc']):.2f}, interval [{lo:.2f}, {hi:.2f}] too wide to read (wider than {WIDE_INTERVAL:g})"
    hidden = float(row.get("hidden_bound") or 0.0)
    if hidden > 0:
        auc += (f" (the random {int(row['n_random']):,} cannot rule out up to {hidden:,.0f} more edges of the exact circuit among "
                f"the {int(row['n_rest']):,} outside the top than they estimate (95%), placed at both ends of the ranking in the "
                "interval)")  # fmt: skip
    return (
        f"{name}: {auc} against exact patching over {sampled}, Spearman rho {float(row['spearman']):.2f} "
        f"[{float(row['spearman_low']):.2f}, {float(row['spearman_high']):.2f}]; exact circuit (|exact| >= "
        f"{float(row['circuit_share']):g} of the gap): {int(row['n_positive']):,} sampled edges, about "
        f"{float(row['est_circuit']):,.0f} of {int(row['n_edges']):,} in the graph; interval: 95% over resamples of the "
        f"{row['interval']}"
    )


def against_exact_lines(s: Mapping[str, Any]) -> list[str]:
    """One line per estimate of ``summary["against_exact"]`` (a list of rows); none for a folder without it."""
    rows = s.get("against_exact")
    if not isinstance(rows, list):
        return []
    return [against_exact_line(r) for r in rows if isinstance(r, Mapping)]
