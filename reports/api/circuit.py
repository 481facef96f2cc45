"""``headlens.circuit``: which edges between heads, MLPs, embeddings and logits carry a task, with intervals and exact confirmation.

The analysis is :func:`headlens.analyses.circuits.run.run_circuit` (edge graph, EAP / EAP-IG /
exact edge scores, faithfulness curve, the circuit, exact confirmation of its top edges).
``headlens circuit --out DIR`` is this call and :meth:`CircuitResult.save`: ``edges.csv`` (every
edge of the graph: sender, receiver, input, score with its 95% interval, stability, exact with
its interval where confirmed, estimate_over_exact, disagree, in_circuit), ``faithfulness.csv`` (the curve over circuit
size, 0 = corrupted .. 1 = clean), ``against_exact.csv`` (an estimate's AUROC and rank agreement against exact patching
on the confirmed edges, when some were sampled outside the top), ``circuit.png``/``circuit.svg`` (the circuit diagram) and
``manifest.json``.  ``method="exact"`` with ``workers`` and/or ``address`` scores the edges in chunks on Ray, each
worker holding one copy of the model, and ``journal`` keeps the finished chunks for a rerun
(:mod:`~headlens.analyses.circuits.exact_chunks`).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.circuits.config import MAX_PAIRS, CircuitConfig
from headlens.analyses.circuits.cost import circuit_cost
from headlens.analyses.circuits.graph import EdgeGraph, build_graph
from headlens.analyses.circuits.ground_truth import folder_defaults, read_truth
from headlens.analyses.circuits.hooks import check_edge_model, edge_flags
from headlens.analyses.circuits.method_choice import choose_method
from headlens.analyses.circuits.run import CircuitRun, run_circuit
from headlens.analyses.measure.stats import BOOTSTRAP_BYTES
from headlens.analyses.patching.builtin import builtin_task
from headlens.analyses.patching.config import BUILTINS, PairSource
from headlens.analyses.patching.pairs import TaskSource, pair_items, tokenize_pairs
from headlens.probes.config import ModelConfig
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress, announce
from headlens.reports.api.circuit_text import OFF_FACTOR, TOP_EDGES, WIDE_INTERVAL, circuit_lines, circuit_warnings, figure_title
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_csv_table, read_manifest
from headlens.reports.render.figures.circuit import circuit_figure
from headlens.reports.render.finding_lines import Findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = [
    "circuit",
    "CircuitResult",
    "circuit_lines",
    "circuit_warnings",
    "BUILTINS",
    "MAX_PAIRS",
    "OFF_FACTOR",
    "TOP_EDGES",
    "WIDE_INTERVAL",
]

_TEXT = ("sender", "receiver", "input", "sender_kind", "confirmed")
_TABLES = ("edges", "faithfulness")


@dataclass(kw_only=True, repr=False)
class CircuitResult(Result):
    """``edges`` (every edge of the graph with score, interval, stability, exact where confirmed,
    ``in_circuit``) and ``faithfulness`` (the curve over circuit size)."""

    kind = "circuit"
    marker_files = ("edges.csv", "faithfulness.csv")

    #: The analysis' run (:class:`~headlens.analyses.circuits.run.CircuitRun`): :attr:`tables` are its
    #: ``edges`` and ``faithfulness``; read back from a folder (:meth:`from_folder`) it is rebuilt from
    #: them and the manifest (config, summary, notes; no graph).
    run: CircuitRun

    def __post_init__(self) -> None:
        self.tables = {"edges": self.run.edges, "faithfulness": self.run.faithfulness}
        if self.run.summary.get("against_exact"):  # the estimate judged by exact on the confirmed edges: one row per estimate
            self.tables["against_exact"] = pd.DataFrame(self.run.summary["against_exact"])

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        self.run = replace(self.run, edges=self.tables["edges"], faithfulness=self.tables["faithfulness"])

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
        return dict(self.run.summary)

    @property
    def notes(self) -> list[str]:
        return [str(n) for n in self.run.notes]

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        edges = self.tables["edges"]
        m = self.manifest.get("model") or {}
        n_layers, n_heads = int(m["n_layers"]), int(m["n_heads"])
        return {"circuit": lambda: circuit_figure(edges, n_layers=n_layers, n_heads=n_heads, title=figure_title(self.summary))}

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
        """The saved result, its run rebuilt: the tables from their files, the config, summary and notes from the manifest."""
        p = Path(folder)
        manifest, tables = read_manifest(p), cls.read_tables(p)
        run = CircuitRun(
            edges=tables["edges"],
            faithfulness=tables["faithfulness"],
            summary=manifest["circuit"]["summary"],
            notes=manifest["circuit"]["notes"],
            config=config_from_record(CircuitConfig, manifest["config"]["circuit"]),
        )
        return cls(run=run, manifest=manifest)


def _given_pairs(task: Any, builtin: str | None, n_pairs: int) -> tuple[list[Any], dict[str, Any]] | None:
    """The pairs of ``task`` (None for a built-in task) with their source, the choice and the pair count checked."""
    if task is not None and builtin is not None:
        raise InputError("give either task= (pairs) or builtin=, not both", parameter="task", builtin=builtin)
    if builtin is not None and builtin not in BUILTINS:
        raise InputError(f"builtin={builtin!r} is not a built-in task: choose from {', '.join(BUILTINS)}", builtin=builtin)
    given = pair_items(task) if task is not None else None
    if given is not None:
        _check_pairs(len(given[0]), subject=f"task={given[1]['task']!r} holds {len(given[0])} pairs")
    else:
        _check_pairs(n_pairs)
    return given


def _check_graph(loaded: LoadedModel, graph: EdgeGraph, cfg: CircuitConfig) -> None:
    """The checks that need the graph, before any pair is built: the intervals' memory, ``top_n``, patchable edges."""
    n_edges = len(graph.edges)
    # the intervals' resampled means of every edge at once, against this machine's memory
    check_count("n_bootstrap", cfg.n_bootstrap, bytes_each=BOOTSTRAP_BYTES * n_edges)
    if cfg.top_n is not None and cfg.top_n > n_edges:
        raise InputError(f"top_n={cfg.top_n} is above the graph's {n_edges} edges", top_n=cfg.top_n)
    with edge_flags(loaded):  # a family whose edges cannot be patched
        check_edge_model(loaded, graph)


def _task_file(given: tuple[list[Any], dict[str, Any]] | None) -> str | None:
    """The manifest's ``task_file``: the pair file's path, None for built-in pairs or pairs given in memory."""
    return given[1]["task"] if given is not None and given[1]["kind"] == "file" else None


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
    method: str = CircuitConfig.method,
    steps: int = CircuitConfig.steps,
    direction: str = CircuitConfig.direction,
    top_n: int | None = CircuitConfig.top_n,
    threshold: float | None = CircuitConfig.threshold,
    confirm: int = CircuitConfig.confirm,
    confirm_sample: int = CircuitConfig.confirm_sample,
    n_bootstrap: int = CircuitConfig.n_bootstrap,
    seed: int = CircuitConfig.seed,
    ablation: str = CircuitConfig.ablation,
    ground_truth: str | None = CircuitConfig.ground_truth,
    target_faithfulness: float = CircuitConfig.target_faithfulness,
    held_out: float = CircuitConfig.held_out,
    batch_size: int = CircuitConfig.batch_size,
    max_rows: int | None = CircuitConfig.max_rows,
    curve_points: int = CircuitConfig.curve_points,
    address: str | None = CircuitConfig.address,
    workers: int | None = CircuitConfig.workers,
    journal: str | None = CircuitConfig.journal,
    task: TaskSource | None = PairSource.task,
    builtin: str | None = PairSource.builtin,
    n_pairs: int = PairSource.n_pairs,
    prepend_bos: bool = PairSource.prepend_bos,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> CircuitResult:
    """Which edges carry a task: score every edge of the model's graph on clean/corrupted pairs,
    take the circuit, measure its faithfulness and confirm its top edges by exact patching.

    ``config`` and keywords: :class:`~headlens.analyses.circuits.config.CircuitConfig`'s fields (``method`` ``"auto"``, ``"eap"``,
    ``"eap-ig"`` or ``"exact"``, ``steps``, ``top_n`` or ``threshold``, ``confirm``, ``n_bootstrap``, ``target_faithfulness``,
    ``direction``, ``batch_size``, ``seed`` ...). The pairs, :class:`~headlens.analyses.patching.config.PairSource`'s fields as
    :func:`headlens.reports.api.patch.patch` takes them: ``task``, a JSONL file of pairs (``clean``, ``corrupt``, ``correct``,
    ``incorrect``) or those pairs in memory (a list of dicts, or a DataFrame), or ``builtin``: ``"induction"`` (the default),
    ``"names"`` or ``"referent"`` with ``n_pairs`` pairs (2 to :data:`MAX_PAIRS`). ``ablation``: what the edges outside a circuit
    carry (``"corrupted"``, ``"mean"`` or ``"zero"``); ``ground_truth``: a file of true edges (a tracr folder's
    ``ground_truth.json``; a model folder holding one uses it, and its ``pairs.jsonl`` when no task is given):
    ``summary["ground_truth"]`` holds the edge ROC AUCs with their intervals.
    """
    values = locals()
    cfg = config_of(CircuitConfig, values)
    truth_file, task = folder_defaults(model, cfg.ground_truth, task, builtin)
    if truth_file is not None:  # a tracr folder's ground_truth.json (and pairs.jsonl), or the file given; read before loading
        read_truth(truth_file)
        cfg = replace(cfg, ground_truth=truth_file)
    load = loading_of(values)
    given = _given_pairs(task, builtin, n_pairs)  # a task's errors before the model loads
    loaded = as_loaded(model, load)
    graph = build_graph(loaded)
    n_edges = len(graph.edges)
    _check_graph(loaded, graph, cfg)
    if given is not None:
        pairs = tokenize_pairs(loaded, given[0], prepend_bos=prepend_bos, source=given[1])
    else:
        pairs = builtin_task(loaded, builtin or "induction", n=n_pairs, seed=cfg.seed, prepend_bos=prepend_bos)
    chosen, _ = choose_method(cfg, n_edges)
    announce(progress, circuit_cost(loaded, n_edges, len(pairs), int(pairs.clean.shape[1]), chosen))  # before it starts
    run = run_circuit(loaded, pairs, cfg, graph=graph, progress=progress)
    manifest = build_manifest(
        model=loaded,
        command=command,
        seed=cfg.seed,
        prepend_bos=prepend_bos,
        configs={"circuit": cfg.describe()},
        extra={"circuit": {"summary": run.summary, "notes": run.notes}, "task_file": _task_file(given)},
    )
    return CircuitResult(run=run, manifest={"result": CircuitResult.kind, **manifest})
