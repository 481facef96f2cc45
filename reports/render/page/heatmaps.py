"""The page's layer x head heatmaps as data for ``templates/sections/heatmaps.html.j2``: one
cell per head with its colour, text and tooltip (the template writes the markup)."""

from __future__ import annotations

import logging
import math
from typing import Any

import matplotlib
import numpy as np
import pandas as pd

from headlens.analyses.heads.classify import roles_of
from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.values import finite, metric_label, num
from headlens.reports.render.tables import baseline_label

log = logging.getLogger(__name__)

__all__ = ["heatmaps", "head_grid", "scored_detectors", "ablation_wording", "DETECTOR_NOTES"]

#: Short definitions shown under each detector's heatmap (docs/methods.md, "Head scores").
DETECTOR_NOTES = {
    "previous_token": "mean attention from each token to the one before it",
    "next_token": "mean attention from each token to the one after it (encoders; not measurable on causal attention)",
    "duplicate_token": "repeated random tokens: attention from the second copy to the same token's first occurrence",
    "induction": "repeated random tokens: attention from the second copy to the token after the first occurrence",
    "sink": "mean attention to the first position (Gu et al. alpha)",
    "referent": (
        "attention from a pronoun to its antecedent (the role needs a Holm-corrected sign test "
        "over sentence pairs, more than half the pairs won, and antecedent above distractor)"
    ),
}


def _hex(rgba: Any) -> str:
    r, g, b = (int(np.rint(255 * c)) for c in rgba[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _luminance(rgba: Any) -> float:
    r, g, b = rgba[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b


def head_grid(df: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    """``df[column]`` as a ``[layer, head]`` grid (rows from the ``layer`` and ``head`` columns);
    NaN where a head has no row or no finite value; rows outside the grid are left out."""
    g = np.full((n_layers, n_heads), np.nan)
    for layer, head, value in zip(df["layer"], df["head"], df[column], strict=True):
        layer, head = int(layer), int(head)
        if 0 <= layer < n_layers and 0 <= head < n_heads:
            v = finite(value)
            g[layer, head] = np.nan if v is None else v
    return g


def _heatmap(
    title: str,
    note: str,
    values: np.ndarray,
    *,
    cmap: str,
    vmin: float,
    vmax: float,
    fmt: str,
    map_id: str,
    outlined: np.ndarray | None = None,
) -> dict[str, Any]:
    cm = matplotlib.colormaps[cmap]
    n_layers, n_heads = values.shape
    show = n_heads <= 16
    rows = []
    for layer in range(n_layers):
        cells = []
        for h in range(n_heads):
            v = values[layer, h]
            name = f"{layer}.{h}"
            if not math.isfinite(v):
                cells.append({"head": name, "cls": "cell nan", "style": None, "tip": f"{name}: n/a", "text": ""})
                continue
            t = 0.5 if vmax == vmin else min(1.0, max(0.0, (v - vmin) / (vmax - vmin)))
            rgba = cm(t)
            text = format(v, fmt)
            cells.append(
                {
                    "head": name,
                    "cls": "cell role" if outlined is not None and outlined[layer, h] else "cell",
                    "style": f"background:{_hex(rgba)};color:{'#fff' if _luminance(rgba) < 0.55 else '#111'}",
                    "tip": f"{name}: {text}",
                    "text": text if show else "",
                }
            )
        rows.append({"layer": layer, "cells": cells})
    stops = ", ".join(_hex(cm(t)) for t in np.linspace(0, 1, 7))
    return {
        "id": map_id,
        "title": title,
        "note": note,
        "heads": list(range(n_heads)),
        "rows": rows,
        "lo": format(vmin, fmt),
        "hi": format(vmax, fmt),
        "gradient": f"background:linear-gradient(to right, {stops})",
    }


def _prompts_note(scores: pd.DataFrame) -> str:
    """``; mean over 20 prompts``: what a detector's scores rest on (the most prompts any head was measured on)."""
    n = pd.to_numeric(scores["n"], errors="coerce") if "n" in scores else pd.Series(dtype=float)
    return f"; mean over {int(n.max())} prompts" if n.notna().any() else ""


def scored_detectors(scores: pd.DataFrame | None) -> tuple[list[str], list[str]]:
    """``(shown, unscored)``: the census's detectors with at least one score, and those with none
    (e.g. ``next_token`` on causal attention), which get no heatmap and no table column."""
    if scores is None:
        return [], []
    shown, unscored = [], []
    for det, g in scores.groupby("detector", sort=False):
        (shown if pd.Series(pd.to_numeric(g["score"], errors="coerce")).notna().any() else unscored).append(str(det))
    return shown, unscored


def ablation_wording(metric: str, method: str, unablated: Any) -> tuple[str, str]:
    """``(title, note)`` of an ablation heatmap.  The embedding change is already a change from
    the unablated model (0 there by construction): no "change in" and no unablated value."""
    if metric == "embedding":
        return (
            f"{method} ablation: embedding change",
            f"1 - cosine between the sentence embedding with the head alone {method}-ablated and the unablated one",
        )
    label = metric_label(metric)
    return f"{method} ablation: \u0394 {label}", f"change in {label} when the head alone is {method}-ablated; unablated {num(unablated, 4)}"


def heatmaps(report: ReportView, exact_importance: bool) -> list[dict[str, Any]]:
    """Every heatmap the finished stages allow: detector scores (heads with the role outlined),
    sink alpha, zero and mean ablation, pruning importance."""
    if not (report.n_layers and report.n_heads):
        return []
    has = roles_of(report.roles) if report.roles is not None else {}
    maps = _detector_maps(report, report.scores, has) if report.scores is not None else []
    if report.sinks is not None:
        maps += _sink_map(report, report.sinks, has)
    maps += _ablation_maps(report)
    if report.importance is not None:
        maps.append(_importance_map(report, report.importance, exact_importance))
    return maps


def _detector_maps(report: ReportView, scores: pd.DataFrame, has: dict[tuple[int, int], Any]) -> list[dict[str, Any]]:
    """One map per detector with a score: the heads with its role outlined, its baseline and threshold in the note."""
    L, H = report.n_layers, report.n_heads
    maps = []
    shown = scored_detectors(scores)[0]
    for det, g in scores.groupby("detector", sort=False):
        if det not in shown:
            continue  # no head has a score (the page says which): no empty, hatched map
        outlined = np.array([[det in has.get((a, b), ()) for b in range(H)] for a in range(L)])
        th = report.thresholds.get(str(det))
        note = DETECTOR_NOTES.get(str(det), "")
        note += (
            f"; uniform baseline {baseline_label(g['baseline'])}"
            + (f"; role threshold {th:g}" if th is not None else "")
            + f"; outlined: heads with the role ({int(outlined.sum())} of {L * H})"
            + _prompts_note(g)
        )
        grid = head_grid(g, "score", L, H)
        maps.append(
            _heatmap(f"{det} score", note, grid, cmap="viridis", vmin=0.0, vmax=1.0, fmt=".2f", outlined=outlined, map_id=f"hm-{det}")
        )
    return maps


def _sink_map(report: ReportView, sinks: pd.DataFrame, has: dict[tuple[int, int], Any]) -> list[dict[str, Any]]:
    """The sinks stage's alpha for the report's BOS setting (none when it has no rows for it)."""
    L, H = report.n_layers, report.n_heads
    bos = bool(report.settings.get("prepend_bos", True))
    sub = sinks[sinks["bos"].astype(bool) == bos]
    if not len(sub):
        return []
    grid = head_grid(sub, "alpha_mean", L, H)
    n = int(report.sink_rates["n_sequences"].iloc[0]) if report.sink_rates is not None and len(report.sink_rates) else "its"
    outlined = np.array([["sink" in has.get((a, b), ()) for b in range(H)] for a in range(L)]) if report.roles is not None else None
    note = (
        f"Gu et al. alpha on the sinks stage's own {n} sequences, "
        f"{'with' if bos else 'no'} BOS; uniform {num(sub['uniform_alpha'].iloc[0])}; "
        "outlined: heads with the census's sink role (the 'sink score' map)"
    )
    title = "sinks stage: alpha" + (" (smoke test)" if report.smoke_test("sinks") else "")
    return [_heatmap(title, note, grid, cmap="viridis", vmin=0.0, vmax=1.0, fmt=".2f", outlined=outlined, map_id="hm-sink-alpha")]


def _ablation_maps(report: ReportView) -> list[dict[str, Any]]:
    """Zero and mean ablation's change per head, on a colour scale symmetric about 0."""
    maps = []
    for name, label in (("ablation_zero", "zero"), ("ablation_mean", "mean")):
        table = getattr(report, name)
        if table is not None and len(table):
            grid = head_grid(table, "delta", report.n_layers, report.n_heads)
            finite_cells = grid[np.isfinite(grid)]
            bound = (float(np.abs(finite_cells).max()) if finite_cells.size else 1.0) or 1.0
            title, note = ablation_wording(str(table["metric"].iloc[0]), label, report.stage(name).info.get("unablated_value"))
            title += " (smoke test)" if report.smoke_test(name) else ""
            maps.append(_heatmap(title, note, grid, cmap="RdBu_r", vmin=-bound, vmax=bound, fmt="+.3f", map_id=f"hm-{label}-ablation"))
    return maps


def _importance_map(report: ReportView, importance: pd.DataFrame, exact_importance: bool) -> dict[str, Any]:
    """Pruning importance: the exact single-head change (embedding metric) or Michel et al.'s gradient importance."""
    smoke = " (smoke test)" if report.smoke_test("pruning") else ""
    grid = head_grid(importance, "importance", report.n_layers, report.n_heads)
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
    if exact_importance:
        low = min(0.0, float(np.nanmin(grid))) if np.isfinite(grid).any() else 0.0
        note = "exact: embedding change when the head alone is zero-ablated (unpruned model)"
        return _heatmap(
            "pruning importance" + smoke, note, grid, cmap="viridis", vmin=low, vmax=top or 1.0, fmt=".3f", map_id="hm-importance"
        )
    note = "Michel et al. gradient importance, L2-normalised per layer"
    return _heatmap("pruning importance" + smoke, note, grid, cmap="viridis", vmin=0.0, vmax=top or 1.0, fmt=".2f", map_id="hm-importance")
