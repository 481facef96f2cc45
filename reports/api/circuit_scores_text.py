"""What ``headlens circuit`` prints of MIB's metrics (``summary["mib"]``) and of the ground truth (``summary["ground_truth"]``).

Read from a circuit result's summary (:func:`headlens.analyses.circuits.mib.mib_metrics`,
:func:`headlens.analyses.circuits.ground_truth.truth_auc`); a folder written before them prints nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["mib_lines", "truth_lines"]


def _num(x: Any, digits: int = 3) -> str:
    return f"{float(x):.{digits}f}" if isinstance(x, int | float) and np.isfinite(float(x)) else "n/a"


def mib_lines(s: Mapping[str, Any]) -> list[str]:
    """CPR and CMD on MIB's grid, with the pairs and the ablation they were measured with."""
    m = s.get("mib")
    if not isinstance(m, Mapping):
        return []
    on = m.get("measured_on") or "the pairs"
    cpr, cmd = _with_ci(m, "cpr"), _with_ci(m, "cmd")
    bare = "cpr_ci" not in m or not np.isfinite(np.asarray(m["cpr_ci"], dtype=float)).all()
    return [
        f"MIB metrics (circuits of 0.1% .. 100% of the edges, 10 sizes, trapezoids): CPR {cpr} (area under "
        f"faithfulness, edges by signed score; higher is better), CMD {cmd} (area under |1 - faithfulness|, edges "
        f"by |score|; lower is better); on {m.get('n_pairs')} {on}{', no interval' if bare else ' (95% intervals over pairs)'}, "
        f"edges outside ablated: {m.get('ablation', 'corrupted')}"
    ]


def _with_ci(m: Mapping[str, Any], key: str) -> str:
    ci = list(m.get(key + "_ci") or [])
    if len(ci) == 2 and np.isfinite(np.asarray(ci, dtype=float)).all():
        return f"{_num(m.get(key))} [{_num(ci[0])}, {_num(ci[1])}]"
    return _num(m.get(key))


def _auc(t: Mapping[str, Any], key: str) -> str:
    return f"{_num(t.get(key))} [{_num(t.get(key + '_low'))}, {_num(t.get(key + '_high'))}]"


def truth_lines(s: Mapping[str, Any]) -> list[str]:
    """The edge ROC AUC of the scores against the true edges, with its 95% interval over pairs."""
    t = s.get("ground_truth")
    if not isinstance(t, Mapping):
        return []
    words = (
        f"ground truth ({t.get('path')}): edge ROC AUC {_auc(t, 'auc_all')} against its {t.get('n_true')} true edges of {t.get('n_edges')}"
    )
    if "auc_used" in t:
        words += (
            f"; {_auc(t, 'auc_used')} against the {t.get('n_used')} edges the program uses (edges into a query or key its selector"
            " ignores left out)"
        )
    if "auc_input" in t:
        words += (
            f"; {_auc(t, 'auc_input')} against the {t.get('n_varying')} input-dependent ones (constant true edges left out:"
            " no clean/corrupt patch can see them)"
        )
    if "auc_acdc" in t:
        words += (
            f"; {_auc(t, 'auc_acdc')} against ACDC's reference circuit of {t.get('n_acdc')} edges (its published tracr ground truth"
            + (f", with this checkpoint's {t['n_acdc_readout']} readout edge(s)" if t.get("n_acdc_readout") else "")
            + ", the comparable figure for ACDC's AUC)"
        )
    return [words + f"; 95% intervals over the {t.get('n_pairs')} pairs that scored the edges ({t.get('n_bootstrap')} resamples)"]
