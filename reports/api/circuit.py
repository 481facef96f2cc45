"""``headlens.circuit``: which edges between heads, MLPs, embeddings and logits carry a task, with intervals and exact confirmation.

The analysis is :func:`headlens.analyses.circuits.run.run_circuit` (edge graph, EAP / EAP-IG /
exact edge scores, faithfulness curve, the circuit, exact confirmation of its top edges).
``headlens circuit --out DIR`` is this call and :meth:`CircuitResult.save`: ``edges.csv`` (every
edge of the graph: sender, receiver, input, score with its 95% interval, stability, exact with
its interval where confirmed, estimate_over_exact, disagree, in_circuit), ``faithfulness.csv`` (the curve over circuit
size, 0 = corrupted .. 1 = clean), ``circuit.png``/``circuit.svg`` (the circuit diagram) and
``manifest.json``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headlens.analyses.circuits.config import MAX_PAIRS, CircuitConfig
from headlens.analyses.circuits.graph import build_graph
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags
from headlens.analyses.circuits.run import run_circuit
from headlens.analyses.patching.builtin import builtin_task
from headlens.analyses.patching.config import BUILTINS
from headlens.analyses.patching.pairs import pair_task
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_csv_table, read_manifest
from headlens.reports.render.figures.circuit import circuit_figure
from headlens.reports.render.finding_lines import Findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["circuit", "CircuitResult", "circuit_lines", "circuit_warnings", "BUILTINS", "MAX_PAIRS", "TOP_EDGES", "WIDE_INTERVAL"]

#: Edges of the circuit listed in the findings.
TOP_EDGES = 12
#: An interval wider than this (in the normalised 0 .. 1 units) is called wide.
WIDE_INTERVAL = 0.5
#: A confirmed estimate more than this factor off its exact value (either way) is called off.
OFF_FACTOR = 2.0
_TEXT = ("sender", "receiver", "input", "sender_kind")
_TABLES = ("edges", "faithfulness")


@dataclass(kw_only=True, repr=False)
class CircuitResult(Result):
    """``edges`` (every edge of the graph with score, interval, stability, exact where confirmed,
    ``in_circuit``) and ``faithfulness`` (the curve over circuit size)."""

    kind = "circuit"
    marker_files = ("edges.csv", "faithfulness.csv")

    @property
    def edges(self) -> pd.DataFrame:
        """Every edge of the graph, strongest first within the circuit (``rank``)."""
        return self.tables["edges"]

    @property
    def circuit_edges(self) -> pd.DataFrame:
        """The edges of the circuit, by rank."""
        e = self.edges
        return e[e["in_circuit"].astype(bool)].sort_values("rank")

    @property
    def faithfulness(self) -> pd.DataFrame:
        """n_edges, fraction, faithfulness (0 = corrupted .. 1 = clean), ci_low, ci_high, metric."""
        return self.tables["faithfulness"]

    @property
    def summary(self) -> dict[str, Any]:
        """The run's summary: graph size, method, steps, gap, n_circuit, circuit_faithfulness, smallest_reaching_target, auc ..."""
        return dict((self.manifest.get("circuit") or {}).get("summary") or {})

    @property
    def notes(self) -> list[str]:
        return [str(n) for n in (self.manifest.get("circuit") or {}).get("notes") or []]

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        edges = self.tables["edges"]
        m = self.manifest.get("model") or {}
        n_layers, n_heads = int(m["n_layers"]), int(m["n_heads"])
        return {"circuit": lambda: circuit_figure(edges, n_layers=n_layers, n_heads=n_heads, title=_figure_title(self.summary))}

    def findings(self) -> Findings:
        """What ``headlens circuit`` prints (:func:`circuit_lines`) and its warnings (:func:`circuit_warnings`)."""
        if "edges" not in self.tables:
            return Findings()
        return Findings(tuple(circuit_lines(self)), tuple(circuit_warnings(self)))

    def _repr_html_(self) -> str:
        """The findings first (the circuit, its faithfulness, its top edges with intervals, the notes),
        then the circuit diagram, then the tables collapsed."""
        page = super()._repr_html_()
        if not self.figure_names():
            return page
        png = getattr(self.plot("circuit"), "_repr_png_", None)
        if png is None:
            return page
        img = f'<img alt="circuit diagram" style="max-width: 100%" src="data:image/png;base64,{base64.b64encode(png()).decode()}"/>'
        at = page.find("<details")
        return page[:at] + img + "\n" + page[at:] if at >= 0 else page + img

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        return {name: read_csv_table(folder / f"{name}.csv", _TEXT) for name in _TABLES if (folder / f"{name}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> CircuitResult:
        p = Path(folder)
        return cls(tables=cls.read_tables(p), manifest=read_manifest(p))


def _method_words(summary: dict[str, Any]) -> str:
    method = str(summary.get("method", "?"))
    if method == "exact":
        return "exact edge patching"
    steps = f", {summary.get('steps')} steps" if method == "eap-ig" else ""
    return f"{method.upper()} ESTIMATE{steps}"


def _figure_title(summary: dict[str, Any]) -> str:
    n, f = summary.get("n_circuit"), summary.get("circuit_faithfulness")
    faith = f", faithfulness {float(f):.2f}" if isinstance(f, int | float) and np.isfinite(f) else ""
    return f"circuit: {n} edges ({_method_words(summary)}{faith}); width by |score|, dashed < 0"


def _interval(low: Any, high: Any) -> str:
    lo, hi = float(low), float(high)
    return f"[{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) and np.isfinite(hi) else "[no interval]"


def circuit_lines(result: CircuitResult) -> list[str]:
    """The circuit: its size and faithfulness, the smallest circuit reaching the target, its top edges with
    intervals, stability and the exact value where confirmed, the graph's size."""
    s, e = result.summary, result.edges
    lines = []
    n_total = len(e)
    f_row = result.faithfulness[result.faithfulness["n_edges"] == s.get("n_circuit")]
    faith = "faithfulness n/a"
    if len(f_row):
        r = f_row.iloc[0]
        faith = f"faithfulness {float(r['faithfulness']):.2f} {_interval(r['ci_low'], r['ci_high'])}"
    reach = s.get("smallest_reaching_target")
    target = s.get("target_faithfulness")
    reach_words = (
        f"smallest circuit reaching {target} (point estimate): {reach} edges" if reach is not None else f"no circuit reaches {target}"
    )
    lines.append(f"circuit: {s.get('n_circuit')} of {n_total} edges ({_method_words(s)}, {s.get('direction')}), {faith}; {reach_words}")
    lines.extend(_reach_lines(s.get("reach") or {}, result.faithfulness))
    auc = s.get("auc")
    if isinstance(auc, int | float):
        lines.append(f"faithfulness curve: area {float(auc):.3f} (MIB-style, over the fraction of edges kept)")
    top = result.circuit_edges.head(TOP_EDGES)
    if len(top):
        lines.append(
            "edges (score: the share of the clean-corrupt gap it carries, 95% interval over pairs; stability: share of resamples"
            " selecting it with this sign; exact where confirmed, estimate/exact):"
        )
    for row in top.to_dict("records"):
        exact = ""
        if np.isfinite(float(row.get("exact", np.nan))):
            exact = f"  exact {float(row['exact']):.2f} {_interval(row['exact_ci_low'], row['exact_ci_high'])}"
            ratio = float(row.get("estimate_over_exact", np.nan))
            if np.isfinite(ratio):
                exact += f"  estimate/exact {ratio:.2f}"
            if bool(row.get("disagree", False)):
                exact += "  DISAGREES"
        sign = "  (spans 0: sign not established)" if _spans_zero(row) else ""
        lines.append(
            f"  {row['sender']} -> {row['receiver']} ({row['input']})  {float(row['score']):.2f} {_interval(row['ci_low'], row['ci_high'])}"
            f"{sign}  stability {float(row['stability']):.2f}{exact}"
        )
    more = int(result.circuit_edges.shape[0]) - len(top)
    if more > 0:
        lines.append(f"  ... {more} more edges in edges.csv (in_circuit)")
    g = s.get("graph") or {}
    by = ", ".join(f"{k} {v}" for k, v in (g.get("by_input") or {}).items())
    lines.append(f"graph: {g.get('n_nodes')} nodes, {g.get('n_edges')} edges ({by})")
    return lines


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


def _edges(n: int) -> str:
    return f"{n} edge" if n == 1 else f"{n} edges"


def _have(n: int) -> str:
    return "has" if n == 1 else "have"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def circuit_warnings(result: CircuitResult) -> list[str]:
    """What the circuit cannot say: the run's notes, estimates contradicted by exact patching, wide intervals, few pairs."""
    s, out = result.summary, list(result.notes)
    if s.get("estimate"):
        out.append(f"the scores are estimates ({_method_words(s)}: gradient attribution); the 'exact' column is exact edge patching")
    n_dis = int(s.get("disagreements") or 0)
    if n_dis:
        ce = result.circuit_edges
        apart = ce[ce["disagree"].astype(bool)].head(6).to_dict("records")
        names = ", ".join(f"{r['sender']} -> {r['receiver']} ({r['input']})" for r in apart)
        out.append(f"{n_dis} of {s.get('confirmed')} confirmed edges: estimate and exact disagree ({names})")
    ce = result.circuit_edges
    spans = [r for r in ce.to_dict("records") if _spans_zero(r)]
    if spans:
        out.append(
            f"{_edges(len(spans))} of the circuit {_have(len(spans))} a 95% interval spanning 0: "
            f"{'its' if len(spans) == 1 else 'their'} sign is not established"
        )
    if "estimate_over_exact" in ce:
        ratio = ce["estimate_over_exact"].to_numpy(dtype=float)
        off = ce[np.isfinite(ratio) & ((np.abs(ratio) > OFF_FACTOR) | (np.abs(ratio) < 1 / OFF_FACTOR))]
        if len(off):
            names = ", ".join(
                f"{r['sender']} -> {r['receiver']} ({r['input']}) {float(r['estimate_over_exact']):.2f}"
                for r in off.head(6).to_dict("records")
            )
            out.append(f"{_edges(len(off))} confirmed: estimate more than {OFF_FACTOR:g}x off exact (estimate/exact {names})")
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
    n_pairs = (s.get("task") or {}).get("n_pairs")
    if isinstance(n_pairs, int) and n_pairs < 16:
        out.append(f"only {n_pairs} pairs: intervals and stability rest on few pairs")
    return out


def _check_pairs(n: object, *, subject: str | None = None) -> int:
    """The circuit's pair count: the count rule (:func:`~headlens.probes.counts.check_count`) with :data:`MAX_PAIRS` as its cap."""
    why = "an interval over pairs needs two"
    return check_count(
        "n_pairs", n, minimum=2, why=why, subject=subject, maximum=MAX_PAIRS, why_most="a circuit run keeps pairs x edges values"
    )


@study("circuit", CircuitConfig)
def circuit(
    model: LoadedModel | str,
    config: CircuitConfig | None = None,
    /,
    *,
    method: str = "eap-ig",
    steps: int = 5,
    direction: str = "noising",
    top_n: int | None = None,
    threshold: float | None = None,
    confirm: int = 20,
    n_bootstrap: int = 1000,
    seed: int = 0,
    target_faithfulness: float = 0.95,
    batch_size: int = 8,
    max_rows: int | None = None,
    curve_points: int = 12,
    task: str | None = None,
    builtin: str | None = None,
    n_pairs: int = 64,
    prepend_bos: bool = True,
    device: str = "auto",
    dtype: str = "float32",
    revision: str | None = None,
    allow_new_weights: bool = False,
    device_map: Any = None,
    max_memory: Any = None,
    offload_folder: str | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> CircuitResult:
    """Which edges carry a task: score every edge of the model's graph on clean/corrupted pairs,
    take the circuit, measure its faithfulness and confirm its top edges by exact patching.

    ``config`` and keywords: :class:`~headlens.analyses.circuits.config.CircuitConfig`'s fields
    (``method`` ``"eap"``, ``"eap-ig"`` or ``"exact"``, ``steps``, ``top_n`` or ``threshold``,
    ``confirm``, ``n_bootstrap``, ``target_faithfulness``, ``direction``, ``batch_size``, ``seed``
    ...).  The pairs, :class:`~headlens.analyses.patching.config.PairSource`'s fields as
    :func:`headlens.reports.api.patch.patch` takes them: ``task``, a JSONL file of pairs
    (``clean``, ``corrupt``, ``correct``, ``incorrect``), or ``builtin``: ``"induction"`` (the
    default), ``"names"`` or ``"referent"`` with ``n_pairs`` pairs (2 to :data:`MAX_PAIRS`).
    """
    values = locals()
    cfg = config_of(CircuitConfig, values)
    load = loading_of(values)
    if task is not None and builtin is not None:
        raise InputError("give either task= (a pair file) or builtin=, not both", task=str(task), builtin=builtin)
    if builtin is not None and builtin not in BUILTINS:
        raise InputError(f"builtin={builtin!r} is not a built-in task: choose from {', '.join(BUILTINS)}", builtin=builtin)
    if task is None:
        _check_pairs(n_pairs)
    loaded = as_loaded(model, load)
    graph = build_graph(loaded)
    n_edges = len(graph.edges)
    if cfg.top_n is not None and cfg.top_n > n_edges:
        raise InputError(f"top_n={cfg.top_n} is above the graph's {n_edges} edges", top_n=cfg.top_n)
    with edge_flags(loaded):  # a family whose edges cannot be patched: refused before any pair is built
        check_edge_model(loaded, graph)
    if task is not None:
        pairs = pair_task(loaded, task, prepend_bos=prepend_bos)
        _check_pairs(len(pairs), subject=f"task={str(task)!r} holds {len(pairs)} pairs")
    else:
        pairs = builtin_task(loaded, builtin or "induction", n=n_pairs, seed=cfg.seed, prepend_bos=prepend_bos)
    run = run_circuit(loaded, pairs, cfg, graph=graph, progress=progress)
    tables = {"edges": run.edges, "faithfulness": run.faithfulness}
    manifest = build_manifest(
        model=loaded,
        command=command,
        seed=cfg.seed,
        prepend_bos=prepend_bos,
        configs={"circuit": cfg.describe()},
        extra={"circuit": {"summary": run.summary, "notes": run.notes}, "task_file": str(task) if task is not None else None},
    )
    return CircuitResult(tables=tables, manifest={"result": CircuitResult.kind, **manifest})
