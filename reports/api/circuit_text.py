"""What ``headlens circuit`` prints: the circuit's lines (:func:`circuit_lines`) and its warnings (:func:`circuit_warnings`).

Read from a :class:`~headlens.reports.api.circuit.CircuitResult` (a fresh run or a folder read
back): the faithfulness of the circuit on the held-out pairs first, the in-sample figure beside
it, how the pairs were split, the top edges with intervals, stability and their exact values,
the random sample of edges confirmed outside the top, then what the numbers cannot say.  The
comparisons of estimate and exact are the analysis' (:mod:`~headlens.analyses.circuits.confirm`,
``summary["confirmation"]`` in the manifest); this module words them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import pandas as pd

from headlens.analyses.circuits.confirm import OFF_FACTOR
from headlens.reports.api.circuit_scores_text import mib_lines, truth_lines
from headlens.reports.render.against_exact_lines import against_exact_lines


class CircuitResult(Protocol):
    """What the words read of a :class:`~headlens.reports.api.circuit.CircuitResult`."""

    @property
    def summary(self) -> dict[str, Any]: ...
    @property
    def notes(self) -> list[str]: ...
    @property
    def edges(self) -> pd.DataFrame: ...
    @property
    def circuit_edges(self) -> pd.DataFrame: ...
    @property
    def faithfulness(self) -> pd.DataFrame: ...


__all__ = ["circuit_lines", "circuit_warnings", "figure_title", "NAMED", "OFF_FACTOR", "STABLE", "TOP_EDGES", "WIDE_INTERVAL"]

#: Edges of the circuit listed in the findings.
TOP_EDGES = 12
#: An interval wider than this (in the normalised 0 .. 1 units) is called wide.
WIDE_INTERVAL = 0.5
#: Edges a note names before "and N more".
NAMED = 6
#: Stability at or above this is called stable in the note on estimates that disagree with exact.
STABLE = 0.9


def _method_words(summary: dict[str, Any]) -> str:
    method = str(summary.get("method", "?"))
    if method == "exact":
        return "exact edge patching"
    steps = f", {summary.get('steps')} steps" if method == "eap-ig" else ""
    return f"{method.upper()} ESTIMATE{steps}"


def figure_title(summary: dict[str, Any]) -> str:
    n, f = summary.get("n_circuit"), summary.get("circuit_faithfulness")
    where = "held-out " if summary.get("held_out") else ""
    faith = f", {where}faithfulness {float(f):.2f}" if isinstance(f, int | float) and np.isfinite(f) else ""
    return f"circuit: {n} edges ({_method_words(summary)}{faith}); width by |score|, dashed < 0"


def _interval(low: Any, high: Any) -> str:
    lo, hi = float(low), float(high)
    return f"[{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else "[no interval]"


def _figure(at: Mapping[str, Any] | None) -> str:
    if not at or not np.isfinite(float(at.get("faithfulness", np.nan))):
        return "n/a"
    return f"{float(at['faithfulness']):.2f} {_interval(at.get('ci_low', np.nan), at.get('ci_high', np.nan))}"


def _faithfulness_words(result: CircuitResult) -> str:
    """Held-out first, in-sample beside it; a run from before the split (no ``in_sample``) reads its curve."""
    s = result.summary
    held, inside = s.get("held_out"), s.get("in_sample")
    if inside is None:
        row = result.faithfulness[result.faithfulness["n_edges"] == s.get("n_circuit")]
        inside = row.iloc[0].to_dict() if len(row) else None
        return f"faithfulness {_figure(inside)}"
    if held:
        return (
            f"faithfulness {_figure(held)} on {held['n_pairs']} held-out pairs"
            f" (in-sample {_figure(inside)} on the {inside['n_pairs']} that chose it)"
        )
    return f"faithfulness {_figure(inside)} in-sample (on the {inside.get('n_pairs')} pairs that chose it; none held out)"


def _split_line(split: Mapping[str, Any]) -> list[str]:
    if not split:
        return []
    if split.get("in_sample"):
        return [f"pairs: {split['n_pairs']}, not split: every pair scores the edges, chooses the circuit and measures it"]
    return [
        f"pairs: {split['n_pairs']}, split at random (seed {split['seed']}): {split['n_choose']} score the edges and choose the circuit,"
        f" {split['n_held_out']} held out measure its faithfulness (the pairs of each side: manifest, summary.split)"
    ]


def _exact_words(row: Mapping[str, Any]) -> str:
    if not np.isfinite(float(row.get("exact", np.nan))):
        return ""
    words = f"  exact {float(row['exact']):.2f} {_interval(row['exact_ci_low'], row['exact_ci_high'])}"
    ratio = float(row.get("estimate_over_exact", np.nan))
    if bool(row.get("exact_near_zero", False)):
        words += "  exact ~ 0"
    elif np.isfinite(ratio):
        words += f"  estimate/exact {ratio:.2f}"
    if bool(row.get("disagree", False)):
        words += "  DISAGREES"
    return words


def circuit_lines(result: CircuitResult) -> list[str]:
    """The circuit: its size and faithfulness (held-out, in-sample beside it), how the pairs were split, the smallest
    circuit reaching the target, its top edges with intervals, stability and the exact value where confirmed, the
    random sample confirmed outside the top, the graph's size."""
    s = result.summary
    target, reach = s.get("target_faithfulness"), s.get("smallest_reaching_target")
    reach_words = (
        f"smallest circuit reaching {target} (point estimate): {reach} edges" if reach is not None else f"no circuit reaches {target}"
    )
    lines = [
        f"circuit: {s.get('n_circuit')} of {len(result.edges)} edges ({_method_words(s)}, {s.get('direction')}), "
        f"{_faithfulness_words(result)}; {reach_words}"
    ]
    lines.extend(_split_line(s.get("split") or {}))
    lines.extend(_reach_lines(s.get("reach") or {}, result.faithfulness))
    lines.extend(_readable_lines(s))
    auc = s.get("auc")
    if isinstance(auc, int | float):
        lines.append(f"faithfulness curve: area {float(auc):.3f} (over the fraction of edges kept, the measured sizes; in-sample)")
    lines.extend(mib_lines(s))
    lines.extend(truth_lines(s))
    top = result.circuit_edges.head(TOP_EDGES)
    if len(top):
        lines.append(
            "edges (score: the share of the clean-corrupt gap it carries, 95% interval over pairs; stability: share of resamples"
            " selecting it with this sign; exact where confirmed, estimate/exact):"
        )
    for row in top.to_dict("records"):
        sign = "  (spans 0: sign not established)" if _spans_zero(row) else ""
        lines.append(
            f"  {row['sender']} -> {row['receiver']} ({row['input']})  {float(row['score']):.2f} {_interval(row['ci_low'], row['ci_high'])}"
            f"{sign}  stability {float(row['stability']):.2f}{_exact_words(row)}"
        )
    more = int(result.circuit_edges.shape[0]) - len(top)
    if more > 0:
        lines.append(f"  ... {more} more edges in edges.csv (in_circuit)")
    lines.extend(_sample_lines((s.get("confirmation") or {}).get("sample") or {}, s))
    lines.extend(against_exact_lines(s))
    g = s.get("graph") or {}
    by = ", ".join(f"{k} {v}" for k, v in (g.get("by_input") or {}).items())
    lines.append(f"graph: {g.get('n_nodes')} nodes, {g.get('n_edges')} edges ({by})")
    return lines


def _named(items: list[Mapping[str, Any]], word: Any = None) -> str:
    """The first :data:`NAMED` edges (with ``word(item)`` after each name), then "and N more"."""
    shown = ", ".join(f"{it['edge']}{word(it) if word else ''}" for it in items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def _sample_lines(sample: Mapping[str, Any], s: Mapping[str, Any]) -> list[str]:
    """The random sample confirmed outside the top (:func:`~headlens.analyses.circuits.confirm.confirmation_summary`)."""
    if not sample.get("n"):
        return []
    n, n_top = int(sample["n"]), int((s.get("confirmation") or {}).get("n_top") or 0)
    head = (
        f"outside the top {n_top}: {n} of the other {sample['outside']} edges drawn at random (seed {sample.get('seed', 0)})"
        f" and patched exactly: "
    )
    if not n_top:
        return [f"{n} of the {sample['outside']} edges drawn at random (seed {sample.get('seed', 0)}) and patched exactly (exact column)"]
    missed = list(sample.get("missed") or [])
    rate = _missed_range(sample, len(missed))
    bar = _missed_bar(sample)
    if not missed:
        return [head + f"none carries more than {bar}" + rate]
    return [
        head
        + f"{len(missed)} carr{'ies' if len(missed) == 1 else 'y'} more than {bar}, missed by the ranking: "
        + _named(missed, lambda it: f" exact {float(it['exact']):.2f} (estimate rank {it['rank']})")
        + rate
    ]


def _missed_bar(sample: Mapping[str, Any]) -> str:
    """What a missed edge carries more than: the smallest confirmed top edge, or the negligible floor where that edge
    is below it (``missed_floor``; a result saved before it was recorded: the smallest top edge alone)."""
    smallest, floor = float(sample["smallest_top_exact"]), float(sample.get("missed_floor") or 0.0)
    if not np.isfinite(smallest):
        return "the smallest confirmed top edge (none has a finite exact value)"
    if smallest >= floor:
        return f"the smallest confirmed top edge (|exact| {smallest:.2g})"
    return f"|exact| {floor:g}, below which an edge is negligible (the smallest confirmed top edge carries {smallest:.2g})"


def _missed_range(sample: Mapping[str, Any], k: int) -> str:
    """``k`` of the sample missed: the rate's Wilson 95% interval and the count outside the top it allows (a range;
    the point extrapolation only from 2 missed up)."""
    low, high = [*(sample.get("missed_rate_ci") or []), np.nan, np.nan][:2]
    if not (np.isfinite(low) and np.isfinite(high)):
        return ""
    n, outside = int(sample["n"]), int(sample["outside"])
    point = f"about {float(sample['estimated_missed']):.0f}, " if k >= 2 and sample.get("estimated_missed") is not None else ""
    return (f"; missed rate {k}/{n}, 95% interval [{low:.2f}, {high:.2f}] (Wilson): {point}{low * outside:.0f} to "
            f"{high * outside:.0f} of the {outside} edges outside the top may be missed")  # fmt: skip


def _spans_zero(row: Mapping[Any, Any]) -> bool:
    lo, hi = float(row.get("ci_low", np.nan)), float(row.get("ci_high", np.nan))
    return bool(np.isfinite(lo) and np.isfinite(hi) and lo <= 0 <= hi)


def _reach_lines(reach: dict[str, Any], curve: pd.DataFrame) -> list[str]:
    """What the smallest size reaching the target rests on (:func:`~headlens.analyses.circuits.run.reach_evidence`)."""
    if reach.get("n") is None or "faithfulness" not in reach:
        return []
    n, target = int(reach["n"]), reach.get("target")
    words = (
        f"smallest circuit: {n} edges at faithfulness {float(reach['faithfulness']):.3f} {_interval(reach['ci_low'], reach['ci_high'])}"
        " (point estimate; in-sample: faithfulness measured on the same pairs that ranked the edges)"
    )
    m = reach.get("indistinguishable_from")
    if m is not None:
        words += f"; not distinguishable from {int(m)} edges, whose interval also includes {target}"
    if reach.get("monotone") is False and reach.get("drop_from") is not None:
        f = curve.drop_duplicates("n_edges").set_index("n_edges")["faithfulness"]
        a, b = int(reach["drop_from"]), int(reach["drop_to"])
        words += (
            f"; the measured curve is not monotone ({a} edges {float(f.get(a, np.nan)):.3f}, {b} edges {float(f.get(b, np.nan)):.3f}),"
            " so the bisection's answer may not be the smallest"
        )
    return [words]


def _readable_lines(s: Mapping[str, Any]) -> list[str]:
    """The faithfulness of circuits a person can read (the top 10 .. 200 edges, ``summary["readable"]``) beside the
    size that reaches the target: held-out where the pairs were split, else in-sample."""
    rows = [r for r in s.get("readable") or [] if isinstance(r, Mapping)]
    if not rows:
        return []
    held = all(r.get("held_out") for r in rows)
    figures = ", ".join(f"top {int(r['n_edges'])} {_figure(r['held_out'] if held else r)}" for r in rows)
    reach, target, n_edges = s.get("smallest_reaching_target"), s.get("target_faithfulness"), (s.get("graph") or {}).get("n_edges")
    of = f" of {n_edges:,}" if isinstance(n_edges, int) else ""
    beside = f"the smallest reaching {target}: {reach:,}{of} edges" if isinstance(reach, int) else f"no circuit reaches {target}"
    return [f"readable circuits (faithfulness of the top n edges, {'held-out' if held else 'in-sample'}): {figures}; {beside}"]


def _edges(n: int) -> str:
    return f"{n} edge" if n == 1 else f"{n} edges"


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def _ratio_words(it: Mapping[str, Any]) -> str:
    return " exact ~ 0" if it.get("exact_near_zero") or it.get("ratio") is None else f" {float(it['ratio']):.2f}"


def _legacy_confirmation(ce: pd.DataFrame) -> dict[str, Any]:
    """A folder written before ``summary["confirmation"]``: the disagreeing and off edges from its table."""

    def named(rows: pd.DataFrame) -> list[dict[str, Any]]:
        return [
            {
                "edge": f"{r['sender']} -> {r['receiver']} ({r['input']})",
                "ratio": float(r["estimate_over_exact"]),
                "stability": r["stability"],
            }
            for r in rows.to_dict("records")
        ]

    ratio = ce["estimate_over_exact"].to_numpy(dtype=float) if "estimate_over_exact" in ce else np.full(len(ce), np.nan)
    off = np.isfinite(ratio) & ((np.abs(ratio) > OFF_FACTOR) | (np.abs(ratio) < 1 / OFF_FACTOR))
    return {"disagree": named(ce[ce["disagree"].astype(bool)]), "off": named(ce[off])}


def _confirmation_warnings(s: Mapping[str, Any], ce: pd.DataFrame) -> list[str]:
    conf = s.get("confirmation") or _legacy_confirmation(ce)
    out = []
    dis = list(conf.get("disagree") or [])
    if dis:
        stable = sum(float(d.get("stability", np.nan)) >= STABLE for d in dis)
        out.append(
            f"{len(dis)} of {s.get('confirmed')} confirmed edges: estimate and exact disagree ({_named(dis)}); "
            f"{stable} of them at stability >= {STABLE}: an estimate's interval and stability describe resampling of the pairs, "
            "not the estimator's bias (read the exact column)"
        )
    off = list(conf.get("off") or [])
    if off:
        out.append(
            f"{_edges(len(off))} confirmed: estimate more than {float(conf.get('off_factor', OFF_FACTOR)):g}x off exact "
            f"(estimate/exact {_named(off, _ratio_words)})"
        )
    return out


def circuit_warnings(result: CircuitResult) -> list[str]:
    """What the circuit cannot say: the run's notes, estimates contradicted by exact patching, wide intervals, few pairs."""
    s, out = result.summary, list(result.notes)
    if s.get("estimate"):
        out.append(f"the scores are estimates ({_method_words(s)}: gradient attribution); the 'exact' column is exact edge patching")
    ce = result.circuit_edges
    out.extend(_confirmation_warnings(s, ce))
    spans = [r for r in ce.to_dict("records") if _spans_zero(r)]
    if spans:
        out.append(
            f"{_edges(len(spans))} of the circuit {_have(len(spans))} a 95% interval spanning 0: "
            f"{'its' if len(spans) == 1 else 'their'} sign is not established"
        )
    wide = ce[(ce["ci_high"] - ce["ci_low"]) > WIDE_INTERVAL]
    if len(wide):
        out.append(
            f"{_edges(len(wide))} of the circuit {_have(len(wide))} a 95% interval wider than {WIDE_INTERVAL}: too few pairs to place them"
        )
    unstable = ce[ce["stability"] < 0.5]
    if len(unstable):
        out.append(
            f"{_edges(len(unstable))} of the circuit {_are(len(unstable))} picked with the same sign in under half the bootstrap resamples"
            " (stability < 0.5)"
        )
    out.extend(_held_out_below_target(s))
    n_pairs = (s.get("in_sample") or {}).get("n_pairs") or (s.get("task") or {}).get("n_pairs")
    if isinstance(n_pairs, int) and n_pairs < 16:
        out.append(f"only {n_pairs} pairs score the edges: intervals and stability rest on few pairs")
    return out


def _held_out_below_target(s: Mapping[str, Any]) -> list[str]:
    """A circuit sized to reach the target on the pairs that chose it, short of it on the held-out pairs."""
    held, target, reach = s.get("held_out"), s.get("target_faithfulness"), s.get("smallest_reaching_target")
    if not held or reach is None or s.get("n_circuit") != reach or not isinstance(target, int | float):
        return []
    f = float(held.get("faithfulness", np.nan))
    if not np.isfinite(f) or f >= float(target):
        return []
    return [
        f"the circuit reaches {target} on the pairs that chose it but {_figure(held)} on the held-out pairs: "
        "its size was fitted to the choosing pairs"
    ]
