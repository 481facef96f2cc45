"""A circuit run's edge scores against known true edges: the edge ROC AUC with its interval over pairs.

The true edges come from a file in the format of a tracr folder's ``ground_truth.json``
(:mod:`headlens.analyses.tracr.ground_truth`): ``{"edges": [{"sender": ..., "receiver": ..., "input": ...}, ...]}``
in the node names of the edge graph (``embed``, ``L.H``, ``mlpL``, ``logits``; inputs ``q``, ``k``, ``v``,
``mlp``, ``logits``).  An edge may carry ``varies`` (tracr's label: false for an edge whose signal is the same on
every input, which no clean/corrupt patch can see).  :func:`truth_auc` gives

* ``auc_all``: every true edge against every other edge of the graph (a tracr folder's true edges are its compiled
  edges and the edges its readout needs, ``origin: "readout"``);
* ``auc_used`` (when some edges carry ``receiver_ignores``: tracr's TRUE/FALSE selectors, whose queries and keys
  change nothing): the other true edges against the false edges, the ignored ones left out of both classes (ACDC's
  zero-ablation reference circuit for tracr's reverse leaves them out too);
* ``auc_input`` (when the file labels ``varies``): the input-dependent true edges against the false edges, the
  constant true edges left out of both classes (the score of discovery under corrupted-input patching);
* ``auc_acdc`` (when edges carry ``acdc_reference``: tracr's reverse and frac_prevs): ACDC's reference circuit for
  the program (with the checkpoint's readout edges, which ACDC's model does not have) against every other edge of
  the graph, nothing left out (ACDC's own classes; its published tracr AUCs are against that circuit, the output
  of its own zero-ablation run, not against the compiled edges);

each as :func:`~headlens.analyses.circuits.roc.edge_roc_auc` (``|score|``, ties half) with a 95% percentile
interval over ``n_bootstrap`` resamples of the pairs that scored the edges (the scores re-averaged).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.roc import edge_roc_auc
from headlens.probes.errors import InputError

__all__ = ["GROUND_TRUTH_FILE", "bootstrap_auc", "folder_defaults", "read_truth", "truth_auc"]

#: The file a tracr folder holds (:func:`headlens.analyses.tracr.build.build_tracr_model`).
GROUND_TRUTH_FILE = "ground_truth.json"

Edge = tuple[str, str, str]


def read_truth(path: str | Path) -> dict[str, Any]:
    """The true edges of ``path``: ``{"path", "edges": [(sender, receiver, input)], "varying"/"used"/"acdc": [...] or None,
    "readout": [...]}`` (``readout``: the edges of ``origin: "readout"``, which the checkpoint's readout needs)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(f"ground truth {str(p)!r}: no such file", ground_truth=str(p)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"ground truth {str(p)!r} is not a JSON file: {e}", ground_truth=str(p)) from None
    edges = raw.get("edges") if isinstance(raw, dict) else None
    if not isinstance(edges, list) or not edges:
        raise InputError(f"ground truth {str(p)!r} has no 'edges' list (the format of a tracr folder's ground_truth.json)")
    out, varying, used, acdc, readout = [], [], [], [], []
    for i, e in enumerate(edges):
        if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("sender", "receiver", "input")):
            raise InputError(f"ground truth {str(p)!r}: edge {i} needs 'sender', 'receiver' and 'input' (text)")
        key = (e["sender"], e["receiver"], e["input"])
        out.append(key)
        if e.get("varies", True):
            varying.append(key)
        if "receiver_ignores" not in e:
            used.append(key)
        if e.get("acdc_reference"):
            acdc.append(key)
        if e.get("origin") == "readout":
            readout.append(key)
    labelled = any("varies" in e for e in edges)
    return {"path": str(p), "edges": out, "varying": varying if labelled else None, "used": used if len(used) < len(out) else None,
            "acdc": acdc if any("acdc_reference" in e for e in edges) else None, "readout": readout}  # fmt: skip


def bootstrap_auc(keys: pd.DataFrame, values: np.ndarray, truth: set[Edge], *, n_bootstrap: int, seed: int) -> tuple[float, float, float]:
    """``(auc, low, high)``: the AUC of the mean of ``values`` ``[pair, edge]`` and its 95% percentile interval."""
    t = keys[["sender", "receiver", "input"]].reset_index(drop=True).copy()
    t["score"] = values.mean(axis=0)
    auc = edge_roc_auc(t, truth)
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    aucs = []
    for _ in range(n_bootstrap if n > 1 else 0):
        t["score"] = values[rng.integers(0, n, size=n)].mean(axis=0)
        aucs.append(edge_roc_auc(t, truth))
    a = np.asarray(aucs, dtype=float)
    a = a[np.isfinite(a)]
    if not len(a):
        return auc, float("nan"), float("nan")
    return auc, float(np.quantile(a, 0.025)), float(np.quantile(a, 0.975))


def truth_auc(truth: dict[str, Any], edges: pd.DataFrame, values: np.ndarray, *, n_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The edge ROC AUCs of the scores ``values`` ``[pair, edge]`` (columns: the rows of ``edges``) against ``truth``
    (:func:`read_truth`; module doc)."""
    keys = list(zip(edges["sender"], edges["receiver"], edges["input"], strict=True))
    known = set(keys)
    true = set(truth["edges"])
    missing = sorted(true - known)
    if missing:
        s, r, i = missing[0]
        raise InputError(
            f"ground truth {truth['path']!r}: true edge {s} -> {r} ({i}) is not an edge of this model's graph"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}: is it the model it was written for?"
        )
    vals = np.asarray(values, dtype=float)
    auc, low, high = bootstrap_auc(edges, vals, true, n_bootstrap=n_bootstrap, seed=seed)
    out: dict[str, Any] = {"path": truth["path"], "n_edges": len(keys), "n_true": len(true),
                           "auc_all": auc, "auc_all_low": low, "auc_all_high": high, "n_pairs": int(vals.shape[0]),
                           "n_bootstrap": int(n_bootstrap)}  # fmt: skip
    for name, subset, count in (("auc_used", "used", "n_used"), ("auc_input", "varying", "n_varying"), ("auc_acdc", "acdc", "n_acdc")):
        if truth.get(subset) is None:
            continue
        part = set(truth[subset])
        # the other true edges leave both classes; ACDC's classes keep every edge (its reference against the rest)
        keep = np.array([subset == "acdc" or k not in true or k in part for k in keys])
        auc_s, lo_s, hi_s = bootstrap_auc(edges[keep], vals[:, keep], part, n_bootstrap=n_bootstrap, seed=seed)
        out |= {name: auc_s, f"{name}_low": lo_s, f"{name}_high": hi_s, count: len(part)}
    if truth.get("acdc") is not None:  # the checkpoint's readout edges in ACDC's set, which its own model does not have
        out["n_acdc_readout"] = len(set(truth["acdc"]) & set(truth.get("readout") or ()))
    return out


def folder_defaults(model: object, ground_truth: str | None, task: Any, builtin: str | None) -> tuple[str | None, Any]:
    """``(ground_truth, task)`` for a model given as a folder that holds ``ground_truth.json`` (a tracr folder): that
    file when no ground truth is given, and the folder's ``pairs.jsonl`` when neither a task nor a built-in is."""
    if not isinstance(model, str | Path) or not Path(model).is_dir():
        return ground_truth, task
    folder = Path(model)
    if ground_truth is None and (folder / GROUND_TRUTH_FILE).is_file():
        ground_truth = str(folder / GROUND_TRUTH_FILE)
        if task is None and builtin is None and (folder / "pairs.jsonl").is_file():
            task = str(folder / "pairs.jsonl")
    return ground_truth, task
