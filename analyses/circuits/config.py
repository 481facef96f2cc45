"""The settings of a circuit run and of weight-based composition (keyword-only, serialised to the manifest).

Each field carries its type, default, help text and range (:func:`headlens.probes.settings.setting`):
the study signatures of :mod:`headlens.reports.api` repeat them and the click options of
``headlens circuit`` and ``headlens composition`` are generated from them.  Light (``--help`` reads
it); :mod:`~headlens.analyses.circuits.composition` re-exports :class:`CompositionConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from os import PathLike
from typing import Any

from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.settings import check_range, check_seed, seed_setting, setting

__all__ = [
    "ABLATIONS",
    "CircuitConfig",
    "CompositionConfig",
    "METHODS",
    "DIRECTIONS",
    "MODES",
    "MAX_BASELINE",
    "MAX_PAIRS",
    "check_ablation",
    "check_direction",
]

#: Edge scorers: auto (exact where cheap, else eap-ig: :mod:`~headlens.analyses.circuits.method_choice`), first-order
#: estimate, integrated gradients, exact patching of every edge.
METHODS: tuple[str, ...] = ("auto", "eap", "eap-ig", "exact")
#: Which run an edge is patched in: the clean run with the sender corrupted, or the reverse.
DIRECTIONS: tuple[str, ...] = ("noising", "denoising")
#: What an edge outside the circuit carries (:mod:`~headlens.analyses.circuits.ablation_kinds`).
ABLATIONS: tuple[str, ...] = ("corrupted", "mean", "zero")
#: The three kinds of composition, by the receiver's input they act on.
MODES: tuple[str, ...] = ("q", "k", "v")
#: Most pairs a circuit run takes: per-pair edge values are ``pairs x edges`` (32k edges at GPT-2 small) and bootstrapped.
MAX_PAIRS = 4096
#: Largest n_baseline and n_tokens accepted (beyond them the run is minutes of random matrices for no gain).
MAX_BASELINE = 100_000


def check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise InputError(f"unknown direction {direction!r}: choose from {', '.join(DIRECTIONS)}", direction=direction)


@dataclass(frozen=True, kw_only=True)
class CircuitConfig:
    method: str = setting(
        "auto",
        help="Edge scores: auto (exact when scoring every edge exactly is estimated at no more than 200 forward equivalents, "
        "one per edge; else eap-ig), eap (one backward, a first-order ESTIMATE), eap-ig (integrated gradients over --steps, "
        "an ESTIMATE), exact (every edge patched: exact, ~one forward per edge).",
        choices=METHODS,
    )
    #: Integrated-gradient steps (``method="eap-ig"``): at least 2 (one step is ``method="eap"``).
    steps: int = setting(5, help="Integrated-gradient steps of --method eap-ig: at least 2 (one step is --method eap).", minimum=2)
    direction: str = setting(
        "noising",
        help="noising: clean run, the edge's sender set to its corrupted value; denoising: the reverse.",
        choices=DIRECTIONS,
    )
    #: The circuit: the ``top_n`` edges by ``|score|``, or those with ``|score| >= threshold``;
    #: neither: the smallest circuit of the faithfulness curve reaching ``target_faithfulness``.
    top_n: int | None = setting(None, help="The circuit: the N strongest edges (default: the smallest reaching the target).", minimum=1)
    threshold: float | None = setting(None, help="The circuit: every edge with |score| >= T.", minimum=0, min_open=True)
    #: Top edges of the circuit confirmed by exact patching.
    confirm: int = setting(20, help="Top circuit edges confirmed by exact patching.", minimum=0)
    #: Edges outside the confirmed top, drawn at random (seeded) and confirmed too: the edges the estimate's ranking may miss.
    confirm_sample: int = setting(
        20,
        help="Edges outside the confirmed top, a seeded random sample, also confirmed by exact patching: how many carry more "
        "than the smallest confirmed top edge and are not negligible (missed by the ranking).",
        minimum=0,
    )
    n_bootstrap: int = setting(1000, help="Bootstrap resamples of the pairs (intervals).", minimum=1)
    seed: int = seed_setting(0, help="Seed of the built-in task and of the bootstrap.")
    #: What the edges outside a circuit carry (:mod:`~headlens.analyses.circuits.ablation_kinds`).
    ablation: str = setting(
        "corrupted",
        help="What an edge outside the circuit carries: corrupted (its sender's output on the corrupted input), mean (its "
        "mean over the choosing pairs' clean and corrupted input, position by position) or zero; mean and zero score edges exactly "
        "(--method exact).",
        choices=ABLATIONS,
    )
    #: Known true edges (``ground_truth.json``'s format): the edge ROC AUC against them (:mod:`~headlens.analyses.circuits.ground_truth`).
    ground_truth: str | None = setting(
        None,
        help="A file of true edges in the format of a tracr folder's ground_truth.json: prints the edge ROC AUC against them "
        "(default: the model folder's ground_truth.json, if it has one).",
        path="file",
    )
    target_faithfulness: float = setting(
        0.95,
        help="Without --top-n/--threshold: the smallest circuit reaching this faithfulness (0 corrupted .. 1 clean).",
        minimum=0,
        maximum=1.5,
        min_open=True,
    )
    #: Share of the pairs held out to measure the circuit (:mod:`~headlens.analyses.circuits.heldout`).
    held_out: float = setting(
        0.5,
        help="Share of the pairs held out (seeded): the rest score the edges and choose the circuit, these measure its faithfulness "
        "(0: in-sample; either side below 8 pairs: in-sample, with a note).",
        minimum=0,
        maximum=0.9,
    )
    batch_size: int = setting(8, help="Pairs per forward (each holds one copy per patched head).", minimum=1)
    #: Copies x pairs per forward of exact patching (the chunk size); None: as many as fit in
    #: :data:`~headlens.analyses.circuits.cost.ROW_BYTES`, at least 256 (:func:`~headlens.analyses.circuits.cost.auto_rows`).
    max_rows: int | None = setting(
        None, help="Copies x pairs per forward of exact patching (default: as many as fit in 256 MiB, at least 256).", minimum=1, cli=False
    )
    #: Exact scores on Ray (:mod:`~headlens.analyses.circuits.exact_chunks`): the cluster, the workers, the journal of chunks.
    address: str | None = setting(
        None,
        help="Exact scores on a Ray cluster: auto (the one 'ray start' runs here), HOST:PORT or ray://HOST:PORT, or local (a Ray of "
        "its own); with workers alone, $RAY_ADDRESS or a local Ray; neither: in this process.",
    )
    workers: int | None = setting(
        None,
        help="Exact scores on this many Ray workers, each holding one copy of the model (a GPU each where the cluster has GPUs, "
        "else one CPU thread); default with an address: as many as the cluster holds.",
        minimum=1,
    )
    journal: str | None = setting(
        None,
        help="A file of the exact scores' finished chunks (edges x pairs): a rerun with the same settings runs only the missing ones.",
    )
    #: Sizes measured on the faithfulness curve (besides 0, the whole graph and the circuit).
    curve_points: int = setting(
        12, help="Sizes measured on the faithfulness curve (besides 0, the whole graph and the circuit).", minimum=0, cli=False
    )

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.method not in METHODS:
            raise InputError(f"unknown method {self.method!r}: choose from {', '.join(METHODS)}", method=self.method)
        check_direction(self.direction)
        check_ablation(self.ablation)
        if self.ablation != "corrupted" and self.method not in ("exact", "auto"):
            raise InputError(
                f"ablation={self.ablation!r} scores the edges by exact patching: give method='exact' (EAP's gradients are taken "
                "between the clean and the corrupted run)",
                ablation=self.ablation,
                method=self.method,
            )
        if (self.address is not None or self.workers is not None or self.journal is not None) and (
            self.method != "exact" or self.ablation != "corrupted"
        ):
            raise InputError(
                "address=, workers= and journal= run method='exact' (with ablation='corrupted') in chunks; "
                f"give method='exact' (method={self.method!r}, ablation={self.ablation!r})",
                method=self.method,
                ablation=self.ablation,
            )
        if self.workers is not None:
            check_count("workers", self.workers)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 2:
            raise InputError(f"steps must be a whole number >= 2 (one step is method='eap'), got {self.steps!r}", steps=self.steps)
        check_count("steps", self.steps, minimum=2)  # at most MAX_COUNT: IG's alphas are a list of that length
        if self.top_n is not None and self.threshold is not None:
            raise InputError("give top_n= or threshold=, not both", top_n=self.top_n, threshold=self.threshold)
        if self.top_n is not None:
            check_count("top_n", self.top_n)
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float) or not self.threshold > 0
        ):
            raise InputError(f"threshold must be a number > 0, got {self.threshold!r}", threshold=self.threshold)
        if self.ground_truth is not None and not isinstance(self.ground_truth, str | PathLike):
            raise InputError(f"ground_truth= must be a file path, got {self.ground_truth!r}", ground_truth=self.ground_truth)
        check_count("confirm", self.confirm, minimum=0)
        check_count("confirm_sample", self.confirm_sample, minimum=0)
        check_range(self, "held_out")
        check_count("n_bootstrap", self.n_bootstrap)
        check_count("batch_size", self.batch_size)
        if self.max_rows is not None:
            check_count("max_rows", self.max_rows)
        check_count("curve_points", self.curve_points, minimum=0)
        if not 0 < float(self.target_faithfulness) <= 1.5:
            raise InputError(
                f"target_faithfulness must lie in (0, 1.5], got {self.target_faithfulness!r}", target_faithfulness=self.target_faithfulness
            )

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def check_ablation(kind: str) -> None:
    """InputError (one line) unless ``kind`` is one of :data:`ABLATIONS`."""
    if kind not in ABLATIONS:
        raise InputError(f"unknown ablation {kind!r}: choose from {', '.join(ABLATIONS)}", ablation=kind)


@dataclass(kw_only=True)
class CompositionConfig:
    """Settings of :func:`~headlens.analyses.circuits.composition.run_composition` (serialised to the manifest)."""

    modes: tuple[str, ...] = setting(MODES, help="Which compositions: q, k and/or v, comma-separated.", choices=MODES)
    fold_ln: bool = setting(
        True,
        help="Score the raw weights; by default the norm gains are folded in and LayerNorm writers centred (TransformerLens' "
        "process_weights).",
        flag="--no-fold-ln",
    )
    #: random samples for each mode's baseline
    n_baseline: int = setting(
        200, help="Random matrix samples per mode for the baseline (mean, sd, 99th percentile).", minimum=2, maximum=MAX_BASELINE
    )
    #: tokens sampled for the diagonal copying score (0: no diagonal score)
    n_tokens: int = setting(1000, help="Tokens sampled for the diagonal copying score (0: none).", minimum=0, maximum=MAX_BASELINE)
    copying: bool = setting(True, help="No OV copying scores (they read the unembedding).", flag="--no-copying")
    seed: int = seed_setting(0, help="Seed of the baseline's random matrices and of the token sample.")

    def __post_init__(self) -> None:
        check_seed(self.seed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
