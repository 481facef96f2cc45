"""Exact edge scores in chunks of edges x pairs, on a pool of Ray workers or one after another here.

:func:`exact_scores_parallel` cuts the ``pairs x edges`` table of :func:`~headlens.analyses.circuits.exact.exact_scores`
into chunks (:func:`plan_chunks`: ``edges_per_chunk`` consecutive edges x ``pairs_per_chunk`` consecutive pairs),
scores each chunk with one :func:`~headlens.analyses.circuits.exact.exact_scores` call on its edges and its pairs,
and puts the chunks' values back in their places.  With a :class:`~headlens.probes.cluster.pool.Cluster` the chunks
run on Ray (:func:`~headlens.probes.cluster.pool.run_pool`): each worker loads the model once (the same
:class:`~headlens.probes.config.ModelConfig`, its weights' fingerprint checked against the others') and builds
its graph; without one they run one after another in this process.  The same chunks on the same device with the
same torch threads give the same bits either way (each chunk is the same computation wherever it runs); against
one :func:`exact_scores` call over every edge and pair, a chunk's forwards batch other rows, which moves the values
by float rounding only (about 1e-7 of the metric).

``journal``: a JSONL file of finished chunks (:class:`~headlens.probes.cluster.journal.Journal`, their values as
exact bytes); a rerun with the same settings runs only the chunks it does not hold.

Cost: each chunk reruns its pairs' capture (two forwards per pair) besides its patched forwards (about
``(L - l) / L`` of a forward per edge and pair, for an edge read at layer ``l``), so ``forwards`` counts
``2 x edge chunks`` forwards per pair more than one call does; chunks of a few hundred edges make that a few percent.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.circuits.exact import exact_scores
from headlens.analyses.circuits.graph import EdgeGraph, build_graph
from headlens.analyses.circuits.heldout import subset
from headlens.analyses.circuits.scores import PerPair, check_direction
from headlens.analyses.patching.pairs import PairTask
from headlens.probes.cluster.journal import Journal, decode_array, encode_array
from headlens.probes.cluster.pool import Cluster, Finished, Job, run_pool
from headlens.probes.config import ModelConfig
from headlens.probes.errors import HeadlensError, InputError
from headlens.probes.loading import LoadedModel, load_model, weights_fingerprint
from headlens.probes.progress import Progress

log = logging.getLogger(__name__)

__all__ = [
    "Chunk",
    "ChunkFailed",
    "exact_scores_parallel",
    "chunked",
    "configured_scores",
    "model_spec",
    "plan_chunks",
    "CHUNKS_PER_RUN",
    "MIN_EDGES_PER_CHUNK",
]

#: Default chunking: the edges in about this many chunks (each at least :data:`MIN_EDGES_PER_CHUNK` edges), every pair in each.
CHUNKS_PER_RUN = 64
MIN_EDGES_PER_CHUNK = 32


class ChunkFailed(HeadlensError):
    """A chunk failed on every try (its error, or its workers lost), or no worker could load the model."""

    exit_code = 1


@dataclass(frozen=True)
class Chunk:
    """Pairs ``pairs[0]:pairs[1]`` x the edges at positions ``edges[0]:edges[1]`` of the edge ids asked for."""

    pairs: tuple[int, int]
    edges: tuple[int, int]

    @property
    def key(self) -> str:
        return f"p{self.pairs[0]}-{self.pairs[1]}:e{self.edges[0]}-{self.edges[1]}"

    @property
    def cells(self) -> int:
        return (self.pairs[1] - self.pairs[0]) * (self.edges[1] - self.edges[0])


def plan_chunks(n_pairs: int, n_edges: int, *, edges_per_chunk: int | None = None, pairs_per_chunk: int | None = None) -> list[Chunk]:
    """Every (pair block, edge block), pair blocks outer; default sizes: :data:`CHUNKS_PER_RUN` edge blocks, one pair block."""
    e = edges_per_chunk or max(MIN_EDGES_PER_CHUNK, math.ceil(n_edges / CHUNKS_PER_RUN))
    p = pairs_per_chunk or max(1, n_pairs)
    if e < 1 or p < 1:
        raise InputError(f"edges_per_chunk and pairs_per_chunk must be >= 1, got {e} and {p}")
    return [Chunk((p0, min(p0 + p, n_pairs)), (e0, min(e0 + e, n_edges))) for p0 in range(0, n_pairs, p) for e0 in range(0, n_edges, e)]


def model_spec(model: LoadedModel | ModelConfig | str) -> ModelConfig:
    """What a worker loads to hold the same model: the loaded model's settings with its resolved folder (or Hub id)."""
    if isinstance(model, LoadedModel):
        return replace(model.config, model=model.path)
    return model if isinstance(model, ModelConfig) else ModelConfig(model=model)


@dataclass(frozen=True, kw_only=True)
class _Settings:
    """What every chunk is scored with (the journal's settings, and each job's fixed part)."""

    direction: str
    batch_size: int
    max_rows: int | None


def _worker_setup(spec: ModelConfig, n_edges: int) -> tuple[LoadedModel, EdgeGraph, str]:
    """A worker's state: its copy of the model, its graph (the driver's size), its weights' fingerprint."""
    loaded = load_model(spec)
    graph = build_graph(loaded)
    if len(graph.edges) != n_edges:
        raise InputError(f"the worker's graph of {spec.model} has {len(graph.edges)} edges, the run's {n_edges}")
    return loaded, graph, weights_fingerprint(loaded)


def _score_chunk(state: tuple[LoadedModel, EdgeGraph, str], payload: tuple[PairTask, np.ndarray, _Settings]) -> dict[str, Any]:
    """One chunk's :func:`exact_scores`, as a journal result (arrays as their bytes)."""
    model, graph, fingerprint = state
    task, ids, s = payload
    pp = exact_scores(model, task, graph, ids, direction=s.direction, batch_size=s.batch_size, max_rows=s.max_rows)
    return {
        "values": encode_array(pp.values),
        "clean": encode_array(pp.clean),
        "corrupt": encode_array(pp.corrupt),
        "metric": pp.metric,
        "forwards": pp.forwards,
        "info": pp.info,
        "weights": fingerprint,
    }


def exact_scores_parallel(
    model: LoadedModel | ModelConfig | str,
    task: PairTask,
    graph: EdgeGraph | None = None,
    edge_ids: Sequence[int] | np.ndarray | None = None,
    *,
    direction: str = "noising",
    batch_size: int = 8,
    max_rows: int | None = None,
    cluster: Cluster | None = None,
    journal: str | Path | None = None,
    edges_per_chunk: int | None = None,
    pairs_per_chunk: int | None = None,
    progress: Progress | None = None,
) -> PerPair:
    """:func:`~headlens.analyses.circuits.exact.exact_scores` of ``edge_ids`` (default: every edge) in chunks (module doc).

    ``model``: the loaded model, or what to load (a :class:`ModelConfig` or a model name: loaded here too when
    ``cluster`` is None or ``graph`` is not given).  ``cluster``: where the chunks run (None: here, one after
    another).  ``journal``: a file of finished chunks, read first (a rerun runs only the missing ones) and
    appended to.  ``progress("exact", cells done, cells)`` after each chunk.
    """
    check_direction(direction)
    spec = model_spec(model)
    loaded = model if isinstance(model, LoadedModel) else None
    if loaded is None and (cluster is None or graph is None):
        loaded = load_model(spec)
    graph = graph if graph is not None else build_graph(loaded)  # type: ignore[arg-type]
    n_total = len(graph.edges)
    ids = np.arange(n_total) if edge_ids is None else np.asarray(edge_ids, dtype=np.int64)
    if len(ids) and (ids.min() < 0 or ids.max() >= n_total):
        raise InputError(f"edge ids must lie in 0..{n_total - 1}", edge_ids=list(ids[:3]))
    settings = _Settings(direction=direction, batch_size=batch_size, max_rows=max_rows)
    chunks = plan_chunks(len(task), len(ids), edges_per_chunk=edges_per_chunk, pairs_per_chunk=pairs_per_chunk)
    record = {"model": spec.model, "revision": spec.revision, "dtype": spec.dtype, "task": task.fingerprint(), "edges": n_total,
              "edge_ids": encode_array(ids)["bytes"] if edge_ids is not None else "all", "direction": direction,
              "batch_size": batch_size, "max_rows": max_rows, "chunks": [c.key for c in chunks]}  # fmt: skip
    book = Journal(journal, record) if journal is not None else None
    results: dict[str, Any] = dict(book.done) if book is not None else {}
    by_key = {c.key: c for c in chunks}
    total, done = sum(c.cells for c in chunks), sum(by_key[k].cells for k in results if k in by_key)
    if progress is not None:
        progress("exact", done, total)

    def finished(key: str, result: dict[str, Any]) -> None:
        nonlocal done
        if book is not None:
            book.record(key, result)
        results[key] = result
        done += by_key[key].cells
        if progress is not None:
            progress("exact", done, total)

    todo = [c for c in chunks if c.key not in results]
    payloads = {c.key: (subset(task, np.arange(*c.pairs)), ids[c.edges[0] : c.edges[1]], settings) for c in todo}
    log.info("exact edge scores: %d chunks (%d from the journal), %d edges x %d pairs", len(chunks), len(chunks) - len(todo), len(ids),
             len(task))  # fmt: skip
    if cluster is None:
        assert loaded is not None
        state = (loaded, graph, weights_fingerprint(loaded))
        for c in todo:
            finished(c.key, _score_chunk(state, payloads[c.key]))
    else:
        _run_on_cluster(spec, n_total, payloads, cluster, finished)
    return _assemble(chunks, results, ids, direction, weights_fingerprint(loaded) if loaded is not None else None)


def _run_on_cluster(spec: ModelConfig, n_edges: int, payloads: dict[str, Any], cluster: Cluster, finished: Any) -> None:
    """The chunks as jobs of a Ray pool; a chunk that failed on every try stops the run (:class:`ChunkFailed`)."""

    def on_finished(end: Finished, n: int, of: int) -> None:
        if end.status != "done":
            raise ChunkFailed(f"exact edge scores: chunk {end.key} failed: {end.error}", chunk=end.key)
        finished(end.key, end.result)

    jobs = [Job(key, payload) for key, payload in payloads.items()]
    setup = functools.partial(_worker_setup, spec, n_edges)
    outcome = run_pool(jobs, _score_chunk, setup=setup, cluster=cluster, on_finished=on_finished, depth=2)  # a chunk waits on each worker
    log.info("exact edge scores on Ray: %d chunks on %d workers in %.1f s (Ray up in %.1f s), %d workers lost", len(jobs),
             len(outcome.workers), outcome.wall_s, outcome.ray_start_s, outcome.lost)  # fmt: skip


def _assemble(chunks: list[Chunk], results: dict[str, Any], ids: np.ndarray, direction: str, weights: str | None) -> PerPair:
    """One :class:`PerPair` from the chunks' results, each in its place; every chunk scored on the same weights."""
    n = max((c.pairs[1] for c in chunks), default=0)
    values = np.full((n, len(ids)), np.nan)
    clean, corrupt = np.full(n, np.nan), np.full(n, np.nan)
    fingerprints = {results[c.key]["weights"] for c in chunks} | ({weights} if weights is not None else set())
    if len(fingerprints) > 1:
        raise ChunkFailed(f"exact edge scores: the chunks were scored on different weights ({', '.join(sorted(fingerprints))})")
    forwards, infos, metric = 0.0, [], "logit-diff"
    for c in chunks:
        r = results[c.key]
        (p0, p1), (e0, e1) = c.pairs, c.edges
        values[p0:p1, e0:e1] = decode_array(r["values"])
        clean[p0:p1], corrupt[p0:p1] = decode_array(r["clean"]), decode_array(r["corrupt"])
        forwards += r["forwards"] * (p1 - p0) / max(1, n)
        infos.append(r["info"])
        metric = r["metric"]
    info = dict(infos[0]) if infos else {}
    if infos:
        info |= {"started_late": any(i["started_late"] for i in infos), "own_blocks": all(i["own_blocks"] for i in infos),
                 "head_skipped": all(i["head_skipped"] for i in infos), "max_rows": max(i["max_rows"] for i in infos)}  # fmt: skip
        info["own_blocks_reason"] = next((i["own_blocks_reason"] for i in infos if not i["own_blocks"]), info["own_blocks_reason"])
    info["chunks"] = len(chunks)
    return PerPair(values=values, clean=clean, corrupt=corrupt, metric=metric, method="exact", direction=direction, edge_ids=ids,
                   forwards=forwards, info=info)  # fmt: skip


def chunked(config: CircuitConfig) -> bool:
    """Whether ``config`` scores exactly in chunks (an address, workers or a journal given)."""
    return config.address is not None or config.workers is not None or config.journal is not None


def configured_scores(model: LoadedModel, task: PairTask, graph: EdgeGraph, config: CircuitConfig, progress: Progress | None) -> PerPair:
    """A circuit run's exact scores in chunks: on Ray where ``config`` names an address or workers, else here (a journal alone)."""
    on_ray = config.address is not None or config.workers is not None
    return exact_scores_parallel(
        model, task, graph, direction=config.direction, batch_size=config.batch_size, max_rows=config.max_rows,
        cluster=Cluster(address=config.address, workers=config.workers) if on_ray else None, journal=config.journal, progress=progress,
    )  # fmt: skip
