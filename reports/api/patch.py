"""``headlens.patch``: activation patching per head, path patching, attribution patching and direct logit attribution.

``headlens patch --out DIR`` is this call and :meth:`PatchingResult.save`: ``patching.csv``
(denoising and noising per head, 0 = corrupted .. 1 = clean, with 95% intervals),
``path_patching.csv`` (with ``receivers``), ``attribution.csv`` (attribution per position),
``dla.csv`` (with ``dla``), the heatmaps and ``manifest.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headlens.analyses.measure.stats import BOOTSTRAP_BYTES, small_sample_note
from headlens.analyses.patching.activation import PatchConfig, PatchRun, run_patching
from headlens.analyses.patching.attribution import ATTRIBUTION_COLUMNS, AttributionRun, agreement, run_attribution_patching
from headlens.analyses.patching.builtin import builtin_task
from headlens.analyses.patching.config import BUILTINS, PairSource, PatchExtras
from headlens.analyses.patching.dla import DLARun, run_dla
from headlens.analyses.patching.effects import Gap
from headlens.analyses.patching.pairs import TaskSource, check_pairs, pair_items, tokenize_pairs
from headlens.analyses.patching.path import PathConfig, PathRun, check_receivers, run_path_patching
from headlens.probes.config import ModelConfig
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.outputs import write_json
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import MANIFEST_FILE, Result, read_csv_table, read_manifest
from headlens.reports.render.figures.common import save_figure
from headlens.reports.render.figures.patching import patching_heatmap_figures, path_heatmap_figure
from headlens.reports.render.finding_lines import Findings, patching_findings
from headlens.reports.render.patching_tables import write_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["patch", "PatchingResult", "PatchingRun", "BUILTINS", "EFFECT_COLUMNS"]

#: Effect columns drawn as layer x head heatmaps, in this order.
EFFECT_COLUMNS = ("denoising", "noising", "attribution")
_TABLES = ("patching", "attribution", "path_patching", "dla")
_TEXT = ("name", "sender", "receiver", "receiver_input", "component", "kind", "undefined")


@dataclass(kw_only=True)
class PatchingRun:
    """What one :func:`patch` call ran: activation patching (``patching``; its table holds attribution's
    columns when attribution ran per head), and when asked attribution patching, path patching and DLA.

    Read back from a folder (:meth:`PatchingResult.from_folder`) each run is rebuilt from its table and the
    manifest's entry; the per-pair arrays (``per_item``, ``logit_diff``) are not saved and come back empty."""

    config: PatchConfig
    patching: PatchRun
    attribution: AttributionRun | None = None
    path: PathRun | None = None
    dla: DLARun | None = None

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """The result's tables, in the order they are saved: ``patching``, ``attribution`` (per position),
        ``path_patching``, ``dla``."""
        tables = {"patching": self.patching.table}
        if self.attribution is not None and self.config.per_position:
            tables["attribution"] = self.attribution.table
        if self.path is not None:
            tables["path_patching"] = self.path.table
        if self.dla is not None:
            tables["dla"] = self.dla.table
        return tables

    def with_tables(self, tables: dict[str, pd.DataFrame]) -> PatchingRun:
        """This run with its tables replaced by ``tables`` (by :attr:`tables`' names)."""
        attribution, path, dla = self.attribution, self.path, self.dla
        if attribution is not None and "attribution" in tables:
            attribution = replace(attribution, table=tables["attribution"])
        path = replace(path, table=tables["path_patching"]) if path is not None else None
        dla = replace(dla, table=tables["dla"]) if dla is not None else None
        return replace(self, patching=replace(self.patching, table=tables["patching"]), attribution=attribution, path=path, dla=dla)


def _gap(record: dict[str, Any]) -> Gap:
    """A :class:`Gap` from its manifest record (``Gap.describe()``)."""
    return Gap(
        metric=str(record["metric"]),
        clean=record["clean"],
        corrupt=record["corrupt"],
        gap=record["gap"],
        low=record["gap_low"],
        high=record["gap_high"],
        n_pairs=record["n_pairs"],
        reason=record["undefined_reason"],
    )


def _run_of(tables: dict[str, pd.DataFrame], manifest: dict[str, Any]) -> PatchingRun:
    """The :class:`PatchingRun` of a saved folder: each part from its table and its manifest entry."""
    config = config_from_record(PatchConfig, manifest["config"]["patch"])
    info = manifest["patching"]
    patching = PatchRun(table=tables["patching"], gap=_gap(info["gap"]), info=info)
    attribution = None
    if "attribution" in manifest:
        a_info = manifest["attribution"]
        a_table = tables["attribution"] if config.per_position else tables["patching"][ATTRIBUTION_COLUMNS]
        attribution = AttributionRun(table=a_table, gap=_gap(a_info["gap"]), per_item=np.empty((0, 0)), info=a_info)
    path = None
    if "path_patching" in tables:
        p_info = manifest["path_patching"]
        path = PathRun(table=tables["path_patching"], gap=_gap(p_info["gap"]), info=p_info)
    dla = None
    if "dla" in tables:
        dla = DLARun(table=tables["dla"], per_item=np.empty((0, 0)), logit_diff=np.empty(0), info=manifest["dla"])
    return PatchingRun(config=config, patching=patching, attribution=attribution, path=path, dla=dla)


@dataclass(kw_only=True, repr=False)
class PatchingResult(Result):
    """``patching`` (one row per head, or per head and position: denoising and noising with
    intervals, attribution when asked), ``path_patching`` (sender -> receiver effects),
    ``attribution`` (per position) and ``dla`` (direct logit attribution per component)."""

    kind = "patching"
    marker_files = ("patching.csv",)

    #: The runs behind the tables (:attr:`tables` derive from it); a result read back from a folder has
    #: them rebuilt from the tables and the manifest (:meth:`from_folder`).
    run: PatchingRun

    def __post_init__(self) -> None:
        self.tables = self.run.tables

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        self.run = self.run.with_tables(self.tables)

    @property
    def table(self) -> pd.DataFrame:
        return self.run.patching.table

    @property
    def path_patching(self) -> pd.DataFrame | None:
        return self.run.path.table if self.run.path is not None else None

    @property
    def dla(self) -> pd.DataFrame | None:
        return self.run.dla.table if self.run.dla is not None else None

    @property
    def gap(self) -> dict[str, Any]:
        """Clean, corrupted and their gap (``undefined_reason``: why effects are not normalised, or None)."""
        return self.run.patching.gap.describe()

    @property
    def gap_defined(self) -> bool:
        return self.run.patching.gap.defined

    @property
    def attribution_agreement(self) -> dict[str, Any] | None:
        """How attribution patching's estimate agrees with exact denoising (Spearman, top-k overlap and
        its chance level, the largest disagreement, the heads it misses); None without ``attribution``
        or per position.  The view and ``headlens patch`` print it."""
        return self.run.attribution.info.get("agreement_with_exact") if self.run.attribution is not None else None

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(self.run.config.directions)

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.patching_findings`)."""
        return patching_findings(
            self.run.patching, self.directions, agreement=self.attribution_agreement, path=self.path_patching, dla=self.dla
        )

    def _heatmaps(self) -> dict[str, Figure]:
        m = self.manifest.get("model") or {}
        cols = [c for c in EFFECT_COLUMNS if c in self.table]
        return patching_heatmap_figures(self.table, n_layers=int(m["n_layers"]), n_heads=int(m["n_heads"]), columns=cols) if cols else {}

    def _figure_stems(self) -> list[str]:
        if not self.gap_defined:
            return []
        stems = [f"heatmap_{c}" for c in EFFECT_COLUMNS if c in self.table and not self.table[c].isna().all()]
        return stems + (["heatmap_path"] if self.path_patching is not None else [])

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        makers: dict[str, Callable[[], Figure]] = {}
        for stem in self._figure_stems():
            if stem == "heatmap_path":
                makers[stem] = lambda: path_heatmap_figure(self.tables["path_patching"])
            else:
                col = stem.removeprefix("heatmap_")
                makers[stem] = lambda col=col: self._heatmaps()[col]
        return makers

    def figures(self) -> dict[str, Figure]:
        if not self.gap_defined:
            return {}
        out = {f"heatmap_{c}": fig for c, fig in self._heatmaps().items()}
        if self.path_patching is not None:
            out["heatmap_path"] = path_heatmap_figure(self.path_patching)
        return out

    def file_names(self) -> list[str]:
        """The tables' and figures' file names, sorted (the manifest's ``files``)."""
        files = [f"{name}.csv" for name in self.tables] + [f"{stem}.{fmt}" for stem in self._figure_stems() for fmt in self.figure_formats]
        return sorted(files)

    def _manifest_out(self) -> dict[str, Any]:
        return {**super()._manifest_out(), "files": self.file_names()}

    def write(self, folder: str | Path) -> Path:
        """The tables (each float in its shortest exact form), the heatmaps, then the manifest."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        write_tables(self.tables, out)
        for stem, fig in self.figures().items():
            save_figure(fig, out / stem, self.figure_formats)
        write_json(out / MANIFEST_FILE, self._manifest_out())
        return out

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        return {name: read_csv_table(folder / f"{name}.csv", _TEXT) for name in _TABLES if (folder / f"{name}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> PatchingResult:
        """The saved result, its runs rebuilt: the tables from their files, the config and each run's info from the manifest."""
        p = Path(folder)
        manifest = read_manifest(p)
        return cls(run=_run_of(cls.read_tables(p), manifest), manifest=manifest)


def _check_settings(
    cfg: PatchConfig, *, task: Any, builtin: str | None, attribution: bool, receivers: Any, path: bool
) -> tuple[tuple[int, int], ...] | None:
    """The checks before the model loads: the pairs' source, attribution's direction, the receivers (parsed) and path."""
    if task is not None and builtin is not None:
        raise InputError("give either task= (pairs) or builtin=, not both", parameter="task", builtin=builtin)
    if builtin is not None and builtin not in BUILTINS:
        raise InputError(f"builtin={builtin!r} is not a built-in task: choose from {', '.join(BUILTINS)}", builtin=builtin)
    if attribution and "denoising" not in cfg.directions:
        raise InputError("attribution= estimates denoising: use directions= with 'denoising'", attribution=attribution)
    parsed = as_heads(receivers, name="receivers") if receivers is not None else None
    if path and not parsed:
        raise InputError("path=True needs receivers= (the receiver heads of path patching)", parameter="path")
    return parsed


def _pairs(loaded: LoadedModel, cfg: PatchConfig, given: Any, *, builtin: str | None, n_pairs: int, prepend_bos: bool) -> Any:
    """The pairs, tokenized: ``given`` (a task's pairs and source) or ``n_pairs`` of a built-in task; then the
    intervals' resampled means of every head (and position) at once checked against this machine's memory."""
    if given is not None:
        pairs = tokenize_pairs(loaded, given[0], prepend_bos=prepend_bos, source=given[1])
    else:
        pairs = builtin_task(loaded, builtin or "induction", n=n_pairs, seed=cfg.seed, prepend_bos=prepend_bos)
    n_stats = loaded.n_layers * loaded.n_heads * (int(pairs.clean.shape[1]) if cfg.per_position else 1)
    check_count("n_resamples", cfg.n_resamples, minimum=0, bytes_each=BOOTSTRAP_BYTES * n_stats)
    return pairs


def _shared(cfg: PatchConfig) -> dict[str, Any]:
    """The settings path patching takes from the call's :class:`PatchConfig`."""
    return {"batch_size": cfg.batch_size, "n_resamples": cfg.n_resamples, "seed": cfg.seed}


def _with_attribution(loaded: LoadedModel, pairs: Any, run: PatchingRun, progress: Progress | None) -> PatchingRun:
    """``run`` with attribution patching beside its exact ``patching`` table: per head its columns merged into
    that table (its agreement with the exact effects in the attribution's info), per position a table of its own."""
    cfg = run.config
    est = run_attribution_patching(loaded, pairs, batch_size=cfg.batch_size, n_resamples=cfg.n_resamples, seed=cfg.seed, progress=progress)
    if cfg.per_position:
        return replace(run, attribution=est)
    exact = run.patching.table
    est = replace(est, info={**est.info, "agreement_with_exact": agreement(est.table, exact)})
    merged = exact.merge(est.table.drop(columns=["name"]), on=["layer", "head"], how="left")
    return replace(run, patching=replace(run.patching, table=merged), attribution=est)


def _manifest_extra(run: PatchingRun, task_file: str | None) -> dict[str, Any]:
    """The manifest's entries of each run (``dla``, ``patching``, ``attribution``, ``path_patching``) and ``task_file``."""
    extra: dict[str, Any] = {"dla": run.dla.info} if run.dla is not None else {}
    extra["patching"] = run.patching.info
    if run.attribution is not None:
        extra["attribution"] = run.attribution.info
    if run.path is not None:
        extra["path_patching"] = run.path.info
    extra["task_file"] = task_file
    return extra


@study("patch", PatchConfig)
def patch(
    model: LoadedModel | str,
    config: PatchConfig | None = None,
    /,
    *,
    directions: tuple[str, ...] = PatchConfig.directions,
    per_position: bool = PatchConfig.per_position,
    heads: tuple[tuple[int, int], ...] | None = PatchConfig.heads,
    batch_size: int = PatchConfig.batch_size,
    max_rows: int = PatchConfig.max_rows,
    n_resamples: int = PatchConfig.n_resamples,
    seed: int = PatchConfig.seed,
    start_late: bool = PatchConfig.start_late,
    task: TaskSource | None = PairSource.task,
    builtin: str | None = PairSource.builtin,
    n_pairs: int = PairSource.n_pairs,
    prepend_bos: bool = PairSource.prepend_bos,
    receivers: tuple[tuple[int, int], ...] | None = None,
    receiver_input: str = PathConfig.receiver_input,
    joint: bool = PathConfig.joint,
    path: bool = PatchExtras.path,
    attribution: bool = PatchExtras.attribution,
    dla: bool = PatchExtras.dla,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> PatchingResult:
    """Which heads carry a task: patch each head's output between clean and corrupted inputs.

    ``config`` and keywords: :class:`PatchConfig`'s fields (``directions``, ``per_position``,
    ``heads``, ``batch_size``, ``n_resamples``, ``seed`` ...).  The pairs, :class:`PairSource`'s
    fields: ``task``, a JSONL file of pairs (``clean``, ``corrupt``, ``correct``, ``incorrect``) or
    those pairs in memory (a list of dicts, or a DataFrame with those columns), or ``builtin``:
    ``"induction"`` (the default), ``"names"``, ``"ioi"`` or ``"referent"`` with ``n_pairs`` pairs
    (2 to 1,000,000; a task's pairs meet the same rule; built-in rows are right-padded with the
    tokenizer's pad id, 0 when it has none, after each row's last real token, where effects are
    read).  Path patching, :class:`PathConfig`'s fields: ``receivers`` (also path patching: every
    earlier head -> each receiver's ``receiver_input``, ``q``/``k``/``v``; ``joint``: into every
    receiver at once), with this call's ``batch_size``, ``n_resamples`` and ``seed``;
    :class:`PatchExtras`' fields: ``path`` (says so; needs ``receivers``, which alone imply it),
    ``attribution`` (also attribution patching, a first-order estimate of denoising) and ``dla``
    (also direct logit attribution per head on the clean inputs).
    """
    values = locals()
    cfg = config_of(PatchConfig, values)
    load = loading_of(values)
    receivers = _check_settings(cfg, task=task, builtin=builtin, attribution=attribution, receivers=receivers, path=path)
    given = pair_items(task) if task is not None else None  # a task's errors before the model loads
    if task is None:
        check_pairs(n_pairs)  # the rule a task's pairs meet too (pair_items)
    loaded = as_loaded(model, load)
    if receivers:
        check_receivers(loaded, receivers)  # before any forward
    pairs = _pairs(loaded, cfg, given, builtin=builtin, n_pairs=n_pairs, prepend_bos=prepend_bos)
    # first: a model it refuses (e.g. a logit softcap) is refused before any patching runs
    d = run_dla(loaded, pairs, batch_size=cfg.batch_size) if dla else None
    result = run_patching(loaded, pairs, cfg, progress=progress)
    small = small_sample_note(len(pairs), items="pairs") if cfg.n_resamples > 0 else None  # intervals over few pairs under-cover
    run = PatchingRun(config=cfg, patching=replace(result, info={**result.info, "small_sample_note": small}) if small else result, dla=d)
    if attribution:
        run = _with_attribution(loaded, pairs, run, progress)
    if receivers:  # path patching, with this call's batch size, resamples and seed
        path_config = config_of(PathConfig, values, receivers=receivers, **_shared(cfg))
        run = replace(run, path=run_path_patching(loaded, pairs, path_config, progress=progress))
    task_file = given[1]["task"] if given is not None and given[1]["kind"] == "file" else None  # pairs in memory: none
    extra = _manifest_extra(run, task_file)
    manifest = build_manifest(model=loaded, command=command, seed=cfg.seed, prepend_bos=prepend_bos, configs={"patch": cfg}, extra=extra)
    return PatchingResult(run=run, manifest={"result": PatchingResult.kind, **manifest})
