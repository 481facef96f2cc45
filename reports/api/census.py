"""``headlens.census``: score every head with the detectors and give it its roles.

The files are ``headlens classify``'s: ``scores.csv`` (long: layer, head, detector, score, baseline,
interval, n), ``roles.csv`` (long: one row per (head, role)), ``heads.csv`` (one row per head, roles
joined for reading, the strongest detector), ``heatmap_<detector>.png/.svg``, ``summary.md`` and
``manifest.json``; with ``evidence`` also ``evidence.csv`` and an ``evidence`` column in ``heads.csv``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.heads.census import CensusRun, DetectRun, check_census_settings, run_census
from headlens.analyses.heads.census_config import CensusConfig, ClassifyConfig
from headlens.analyses.heads.classify import (
    check_baseline_factor,
    check_thresholds,
    classify_heads,
    default_thresholds,
    parse_thresholds,
)
from headlens.analyses.heads.detectors import get_detectors
from headlens.analyses.measure.masks import HeadMask, read_mask
from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.analyses.stimuli import load_referent_file
from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.census_run import ClassifyRun, classify_run_of
from headlens.reports.api.census_text import census_summary_of
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.evidence import evidence as run_evidence
from headlens.reports.api.folder import TableFileResult
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_csv_table, read_manifest
from headlens.reports.render.census_files import HEADS_FILE, ROLES_FILE, read_roles
from headlens.reports.render.evidence_text import EVIDENCE_FILE
from headlens.reports.render.figures.common import detector_figures
from headlens.reports.render.finding_lines import Findings, census_findings, census_warnings
from headlens.reports.render.tables import head_roles_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = [
    "census",
    "CensusResult",
    "DetectResult",
    "check_census_config",
    "check_classify_settings",
    "used_thresholds",
    "default_thresholds",
    "parse_thresholds",
    "SCORES_FILE",
]

SCORES_FILE = "scores.csv"
SUMMARY_FILE = "summary.md"


@dataclass(kw_only=True, repr=False)
class CensusResult(Result):
    """A head census and its roles: ``scores``, ``roles`` (long), ``heads`` (one row per head) and,
    with evidence, ``evidence``; ``notes`` says what a detector cannot measure on this model."""

    kind = "census"
    marker_files = (SCORES_FILE, ROLES_FILE)

    #: The census, its roles and the evidence run (:attr:`tables` derive from it); a result read back from a
    #: folder has it rebuilt from the tables and the manifest (:func:`~headlens.reports.api.census_run.classify_run_of`).
    run: ClassifyRun
    summary: str = ""

    def __post_init__(self) -> None:
        self.tables = self.run.tables

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        self.run = self.run.with_tables(self.tables)

    @property
    def scores(self) -> pd.DataFrame:
        """One row per (head, detector): score, uniform baseline, bootstrap interval, n."""
        return self.run.census.scores

    @property
    def roles(self) -> pd.DataFrame:
        """One row per (head, role): ``layer, head, name, role``; heads without a role have no row."""
        return self.run.roles

    @property
    def heads(self) -> pd.DataFrame:
        """One row per head: ``layer, head, name, roles`` (``;``-joined, for reading), the strongest detector."""
        return self.run.heads

    @property
    def evidence(self) -> pd.DataFrame | None:
        """One row per (head, role) tested by its intervention, or None when evidence was not run."""
        return self.run.evidence.table if self.run.evidence is not None else None

    @property
    def stimuli(self) -> dict[str, Any]:
        """Per stimulus set: what the census measured on (source, size, notes), as the manifest records it."""
        return self.run.census.stimuli

    @property
    def notes(self) -> dict[str, str]:
        """Detector -> what it cannot measure on this model (e.g. next_token on causal attention); empty when
        read back from a folder (the manifest records these notes per stimulus set, in ``stimuli``)."""
        return dict(self.run.census.detector_notes)

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return detector_figures(self.scores, self.roles)

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.census_findings`),
        with evidence also the data-free composition note."""
        evidence = self.run.evidence
        found = census_findings(self.tables, notes=self.notes, evidence_seed=evidence.config.seed if evidence is not None else None)
        return Findings(found.lines + tuple(evidence.composition if evidence is not None else ()), found.warnings)

    def texts(self) -> dict[str, str]:
        return {SUMMARY_FILE: self.summary}

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        """The census files; a folder written before ``heads.csv`` has its one-row-per-head ``roles.csv`` as ``heads``."""
        tables = {"scores": read_csv_table(folder / SCORES_FILE), "roles": read_roles(folder)}
        if (folder / HEADS_FILE).is_file():
            tables["heads"] = read_csv_table(folder / HEADS_FILE)
        elif "role" not in (wide := read_csv_table(folder / ROLES_FILE)).columns:
            tables["heads"] = wide
        if (folder / EVIDENCE_FILE).is_file():
            tables["evidence"] = read_csv_table(folder / EVIDENCE_FILE)
        return tables

    @classmethod
    def from_folder(cls, folder: str | Path) -> CensusResult:
        """The saved result, its run rebuilt from the tables and the manifest (:func:`classify_run_of`)."""
        p = Path(folder)
        manifest = read_manifest(p)
        summary = (p / SUMMARY_FILE).read_text(encoding="utf-8") if (p / SUMMARY_FILE).is_file() else ""
        return cls(run=classify_run_of(cls.read_tables(p), manifest), manifest=manifest, summary=summary)


@dataclass(kw_only=True, repr=False)
class DetectResult(TableFileResult):
    """The scores alone, as ``headlens detect --out FILE`` writes them: ``table`` (one row per
    (head, detector): score, uniform baseline, bootstrap interval, n) and ``<stem>.manifest.json``."""

    kind = "detect"
    table_name = "scores"
    run_table = "scores"

    #: The census's config and scores (:attr:`tables` derive from it); read back from a file it is rebuilt
    #: from the table and the manifest's ``config.census`` (:meth:`from_table`).
    run: DetectRun

    @classmethod
    def of_census(cls, result: CensusResult) -> DetectResult:
        """The scores of a census with its config and manifest, as ``headlens detect`` writes them."""
        return cls(run=DetectRun(config=result.run.census.config, scores=result.scores), manifest=result.manifest)

    @classmethod
    def from_table(cls, table: pd.DataFrame, manifest: dict[str, Any]) -> DetectResult:
        """The result read back, its run rebuilt: the table, the config from the manifest's ``config.census``."""
        return cls(run=DetectRun(config=config_from_record(CensusConfig, manifest["config"]["census"]), scores=table), manifest=manifest)

    def findings(self) -> Findings:
        """What ``headlens detect`` prints: how many scores, and the census's notes on intervals."""
        scores = self.run.scores
        n_heads = int(scores[["layer", "head"]].drop_duplicates().shape[0]) if len(scores) else 0
        line = f"{len(scores)} scores ({scores['detector'].nunique()} detectors x {n_heads} heads)"
        return Findings((line,), tuple(census_warnings(scores, None)))

    @classmethod
    def recognises(cls, folder: Path, manifest: dict[str, Any]) -> bool:
        """A scores table written before results had a kind: its manifest holds the census config."""
        return isinstance(manifest.get("config"), dict) and "census" in manifest["config"] and not folder.is_dir()


def used_thresholds(detectors: Iterable[str], thresholds: Mapping[str, float] | None = None) -> dict[str, float]:
    """The thresholds a census records in its manifest (``thresholds``): the default of each detector
    it ran, overridden by ``thresholds``."""
    ran = set(detectors)
    return {k: v for k, v in {**default_thresholds(), **(thresholds or {})}.items() if k in ran}


def check_classify_settings(thresholds: Sequence[str], baseline_factor: float, mask: str | None = None) -> dict[str, float]:
    """``headlens classify``'s checks before the model loads: its ``DETECTOR=VALUE`` threshold items
    parsed (:func:`~headlens.analyses.heads.classify.parse_thresholds`), ``baseline_factor`` and the mask file checked."""
    parsed = parse_thresholds(list(thresholds))
    check_baseline_factor(baseline_factor)
    if mask:
        read_mask(mask)
    return parsed


def _masked(config: CensusConfig, pruned: HeadMask, evidence: EvidenceConfig | None) -> CensusConfig:
    """``config`` with the mask's heads zeroed (``ablate``); refused with other ``ablate`` heads or with evidence."""
    if config.ablate and set(config.ablate) != set(pruned.heads):
        raise InputError(
            "ablate= with mask=: the mask's heads are the ones zeroed; give the heads either as ablate= or in the mask, not both",
            parameter="ablate",
        )
    if evidence is not None:
        raise InputError("evidence with mask: the interventions run on the unpruned model, so they would not test the pruned model's roles")
    return dataclasses.replace(config, ablate=tuple(pruned.heads))


def check_census_config(config: CensusConfig) -> None:
    """Cheap input checks before the model loads (the census repeats them)."""
    get_detectors(list(config.detectors) if config.detectors is not None else None)
    check_census_settings(config)
    if config.referent_file:
        load_referent_file(config.referent_file)


def _census_result(
    loaded: LoadedModel,
    result: CensusRun,
    thresholds: Mapping[str, float] | None,
    baseline_factor: float,
    *,
    mask: str | None,
    command: list[str] | None,
) -> CensusResult:
    """The census run classified (its roles by ``thresholds`` and ``baseline_factor``), with its manifest and summary."""
    config = result.config
    classified = classify_heads(result.scores, thresholds, baseline_factor=baseline_factor)
    used = used_thresholds(result.scores["detector"], thresholds)
    run = ClassifyRun(
        census=result,
        roles=classified.roles,
        heads=head_roles_table(classified),
        thresholds=used,
        baseline_factor=baseline_factor,
        mask=mask,
    )
    extra = {"stimuli": result.stimuli, "thresholds": used, "baseline_factor": baseline_factor, "mask": mask}
    manifest = build_manifest(
        model=loaded, command=command, seed=config.seed, prepend_bos=config.prepend_bos, configs={"census": config}, extra=extra
    )
    out = CensusResult(run=run, manifest=manifest)
    out.summary = census_summary_of(run, model=str(out.model_name))
    return out


@study("census", CensusConfig)
def census(
    model: LoadedModel | str,
    config: CensusConfig | None = None,
    /,
    *,
    detectors: tuple[str, ...] | None = CensusConfig.detectors,
    n_prompts: int = CensusConfig.n_prompts,
    seq_len: int = CensusConfig.seq_len,
    window: int = CensusConfig.window,
    prepend_bos: bool = CensusConfig.prepend_bos,
    seed: int = CensusConfig.seed,
    batch_size: int = CensusConfig.batch_size,
    n_bootstrap: int = CensusConfig.n_bootstrap,
    referent_file: str | None = CensusConfig.referent_file,
    ablate: tuple[tuple[int, int], ...] = CensusConfig.ablate,
    attention: str = CensusConfig.attention,
    query_block: int = CensusConfig.query_block,
    thresholds: Mapping[str, float] | None = ClassifyConfig.thresholds,
    baseline_factor: float = ClassifyConfig.baseline_factor,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    evidence: EvidenceConfig | None = None,
    mask: str | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> CensusResult:
    """Score every head with every detector (or ``detectors=``) and classify it: a :class:`CensusResult`.

    ``model``: a loaded model, or a named model, folder or Hub id (loaded with
    :func:`headlens.load_model`; ``device=``, ``dtype=`` ... go to it).  The settings are
    :class:`~headlens.analyses.heads.census_config.CensusConfig`'s fields (or ``config``, keywords
    overriding it): ``n_prompts`` per stimulus set, ``seq_len`` random tokens repeated twice,
    ``window`` tokens of natural text, ``detectors``, ``prepend_bos``, ...  ``thresholds`` overrides
    detector thresholds (``{"induction": 0.4}``); a role needs ``ci_low >= baseline_factor x`` the
    uniform baseline (:class:`~headlens.analyses.heads.census_config.ClassifyConfig`).
    ``mask``: a pruned-head set (JSON from ``headlens prune``) censused with those heads zeroed.
    ``evidence``: then test each role with its intervention (``evidence.csv``).
    ``progress(stage, done, total)`` is called after each batch.
    """
    config = config_of(CensusConfig, locals())
    load = loading_of(locals())
    thresholds = check_thresholds(thresholds)
    baseline_factor = check_baseline_factor(baseline_factor)
    pruned = read_mask(mask) if mask else None
    if pruned is not None:
        config = _masked(config, pruned, evidence)
    check_census_config(config)
    loaded = as_loaded(model, load)
    if pruned is not None:
        pruned.check(loaded.n_layers, loaded.n_heads)
    if evidence is not None:
        evidence.check_fits(loaded)  # before the census, not after it
    out = _census_result(loaded, run_census(loaded, config, progress=progress), thresholds, baseline_factor, mask=mask, command=command)
    # pyright sees this module under two names here (reports.api.census and, through evidence.py's
    # TYPE_CHECKING import, headlens.reports.api.census): the same class, so the types agree at run time
    return run_evidence(loaded, out, evidence) if evidence is not None else out  # pyright: ignore[reportReturnType, reportArgumentType]
