"""``headlens.gqa``, ``headlens.projections`` and ``headlens.kv``: the design questions, measured.

* :func:`gqa`: K and V mean-pooled per group of KV heads (Ainslie et al. 2023, no retraining):
  loss, KV cache saved, how far each head's pattern moves (``headlens gqa``);
* :func:`projections`: one projection tied to another in each layer (``q=k``, ``v=k``,
  ``q=k=v``): loss change and each head's roles on the census (``headlens projections``);
* :func:`kv`: KV-cache bytes of the model, of GQA with each group size, of MQA and of a pruned
  model (``headlens kv``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.design.config import KnockoutRoles
from headlens.analyses.design.edits import check_pooling
from headlens.analyses.design.gqa import GQAConfig, check_gqa, run_gqa
from headlens.analyses.design.kv import KVConfig, KVRun, check_kv, kv_cache_table, run_kv
from headlens.analyses.design.projections import ProjectionConfig, ProjectionsRun, knockout_targets, run_projections
from headlens.analyses.heads.census import CensusConfig
from headlens.analyses.measure.masks import HeadMask, read_mask
from headlens.analyses.measure.setup import EvalSpec
from headlens.analyses.measure.spec import TaskItem
from headlens.probes.config import ModelConfig
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.ablate import data_setup, eval_spec, model_key
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.folder import FolderResult, TableFileResult
from headlens.reports.api.gqa_result import (
    DESIGN_TEXT_COLUMNS,
    GQA_FIGURE,
    KV_TEXT_COLUMNS,
    SUMMARY_FILE,
    GQAResult,
    basis_of,
    figure_files,
    read_text,
)
from headlens.reports.api.journals import JournalOpener
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import read_csv_table, read_manifest
from headlens.reports.render.design_tables import gqa_markdown, projections_markdown
from headlens.reports.render.figures.design import knockout_heatmap_figure
from headlens.reports.render.finding_lines import Findings, kv_findings, projections_findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["gqa", "projections", "kv", "GQAResult", "ProjectionsResult", "KVResult", "TEXT_FIELDS"]

#: Keyword arguments of gqa / projections that say which text the loss is measured on.
TEXT_FIELDS = ("text", "text_file", "n_windows", "window", "prepend_bos")
_KNOCKOUT_FIGURE = "knockout"
_PROJECTIONS_TABLES = ("losses", "role_changes", "census_scores")


def _text_spec(values: Mapping[str, Any]) -> EvalSpec:
    """The loss's :class:`EvalSpec` from a study's text keywords (:data:`TEXT_FIELDS`)."""
    return eval_spec({"metric": "loss", **{k: values[k] for k in TEXT_FIELDS if k in values}})


# ----------------------------------------------------------------------------- gqa


@study("gqa", GQAConfig)
def gqa(
    model: LoadedModel | str,
    config: GQAConfig | None = None,
    /,
    *,
    group_sizes: tuple[int, ...] | None = GQAConfig.group_sizes,
    groupings: tuple[str, ...] = GQAConfig.groupings,
    batch_size: int = GQAConfig.batch_size,
    cache_dtype: str | None = GQAConfig.cache_dtype,
    text: str | None = EvalSpec.text,
    text_file: str | None = EvalSpec.text_file,
    n_windows: int = EvalSpec.n_windows,
    window: int = EvalSpec.window,
    prepend_bos: bool = EvalSpec.prepend_bos,
    task: Sequence[TaskItem] | None = EvalSpec.task,
    task_file: str | None = EvalSpec.task_file,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    journal: JournalOpener | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> GQAResult:
    """Turn the model into a grouped-query one without retraining and measure what it costs.

    ``config`` and keywords: :class:`GQAConfig`'s fields (``group_sizes``, ``groupings``,
    ``batch_size``, ``cache_dtype``), the text the loss is measured on (:class:`EvalSpec`'s
    ``text`` or ``text_file``, ``n_windows``, ``window``, ``prepend_bos``) and ``task`` or
    ``task_file`` (prompts with ``correct`` and ``incorrect``: their logit difference is measured too).
    """
    values = locals()
    cfg = config_of(GQAConfig, values)
    spec = _text_spec(values)
    task_spec = None
    if task is not None or task_file is not None:
        task_spec = eval_spec({"metric": "logit-diff", "prepend_bos": spec.prepend_bos, "task": task, "task_file": task_file})
    load = loading_of(values)
    loaded = as_loaded(model, load)
    setup = data_setup(loaded, spec)
    data = setup.data
    task_set = data_setup(loaded, task_spec).data if task_spec is not None else None
    check_gqa(loaded, cfg)  # bad input is refused before the journal exists
    check_pooling(loaded)
    opened = (
        journal({"model": model_key(loaded), "data": data.describe(), "data_fingerprint": data.fingerprint(), "gqa": asdict(cfg)})
        if journal
        else None
    )
    with opened or contextlib.nullcontext():
        res = run_gqa(loaded, data, cfg, task=task_set, progress=progress, journal=opened)
    summary_md = gqa_markdown(res, loaded.name, basis=data.basis(), figure=f"{GQA_FIGURE}.png", n_items=len(data))
    described = data.describe()
    extra = {
        "gqa": {
            "data": described,
            **setup.manifest_fields(),
            "task": task_set.describe() if task_set is not None else None,
            "resumed": bool(getattr(opened, "resumed", False)),
        }
    }
    manifest = build_manifest(model=loaded, command=command, prepend_bos=spec.prepend_bos, configs={"gqa": cfg}, extra=extra)
    kv_table = kv_cache_table(loaded, KVConfig())
    return GQAResult(run=res, kv_cache=kv_table, data=described, manifest={"result": GQAResult.kind, **manifest}, summary_md=summary_md)


# ----------------------------------------------------------------------------- projections


@dataclass(kw_only=True, repr=False)
class ProjectionsResult(FolderResult):
    """``losses`` (loss change of each knockout), ``role_changes`` and ``census_scores`` (the
    census under each knockout; absent with ``roles=False``)."""

    kind = "projections"
    section = "projections"
    marker_files = ("losses.csv",)

    #: The analysis' run (losses, role changes, census scores, the config and the census's); read back from a
    #: folder it is rebuilt from the tables and the manifest's ``config.projections`` and ``config.census``
    #: (:meth:`from_folder`).
    run: ProjectionsRun
    #: ``summary.md`` as written
    summary_md: str = ""

    def __post_init__(self) -> None:
        run = self.run
        found = {"losses": run.losses, "role_changes": run.role_changes, "census_scores": run.census_scores}
        self.tables = {name: table for name in _PROJECTIONS_TABLES if (table := found[name]) is not None}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        t = self.tables
        self.run = replace(self.run, losses=t["losses"], role_changes=t.get("role_changes"), census_scores=t.get("census_scores"))

    @property
    def basis(self) -> str:
        """What the loss is measured on."""
        return basis_of(self.summary_md)

    @property
    def losses(self) -> pd.DataFrame:
        return self.run.losses

    @property
    def role_changes(self) -> pd.DataFrame | None:
        return self.run.role_changes

    @property
    def census_scores(self) -> pd.DataFrame | None:
        return self.run.census_scores

    def findings(self) -> Findings:
        return projections_findings(self.run.losses, self.run.role_changes, basis=self.basis)

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {_KNOCKOUT_FIGURE: lambda: knockout_heatmap_figure(self.losses, title=f"projection knockout: {self.model_name}")}

    def texts(self) -> dict[str, str]:
        return {SUMMARY_FILE: self.summary_md}

    def files(self, folder: Path) -> dict[str, Any]:
        return {
            **{name: str(folder / f"{name}.csv") for name in self.tables},
            "figures": figure_files(folder, _KNOCKOUT_FIGURE, self.figure_formats),
        }

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        return {n: read_csv_table(folder / f"{n}.csv", DESIGN_TEXT_COLUMNS) for n in _PROJECTIONS_TABLES if (folder / f"{n}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> ProjectionsResult:
        """The saved result, its run rebuilt: the tables from their files, the configs from the manifest (the
        census's where its role changes were saved: the census ran under the knockouts)."""
        p = Path(folder)
        manifest, t = read_manifest(p), cls.read_tables(p)
        configs = manifest["config"]
        census = config_from_record(CensusConfig, configs["census"]) if "role_changes" in t else None
        run = ProjectionsRun(
            losses=t["losses"],
            role_changes=t.get("role_changes"),
            census_scores=t.get("census_scores"),
            config=config_from_record(ProjectionConfig, configs["projections"]),
            census=census,
        )
        return cls(run=run, manifest=manifest, summary_md=read_text(p, SUMMARY_FILE))


@study("projections", ProjectionConfig)
def projections(
    model: LoadedModel | str,
    config: ProjectionConfig | None = None,
    /,
    *,
    kinds: tuple[str, ...] = ProjectionConfig.kinds,
    layers: tuple[int, ...] | None = ProjectionConfig.layers,
    per_head: bool = ProjectionConfig.per_head,
    batch_size: int = ProjectionConfig.batch_size,
    prefix_reuse: bool = ProjectionConfig.prefix_reuse,
    roles: bool = KnockoutRoles.roles,
    n_prompts: int = KnockoutRoles.n_prompts,
    text: str | None = EvalSpec.text,
    text_file: str | None = EvalSpec.text_file,
    n_windows: int = EvalSpec.n_windows,
    window: int = EvalSpec.window,
    prepend_bos: bool = EvalSpec.prepend_bos,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    journal: JournalOpener | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> ProjectionsResult:
    """Tie one attention projection to another in each layer (and head) and measure what breaks.

    ``config`` and keywords: :class:`ProjectionConfig`'s fields (``kinds``, ``layers``,
    ``per_head``, ``batch_size``) and the text (:class:`EvalSpec`'s ``text`` or ``text_file``,
    ``n_windows``, ``window``, ``prepend_bos``).  :class:`KnockoutRoles`' ``roles``: also the
    census under each knockout (``n_prompts`` per stimulus set, 200 bootstrap resamples).
    """
    values = locals()
    cfg = config_of(ProjectionConfig, values)
    spec = _text_spec(values)
    under = config_of(KnockoutRoles, values)  # checked before the model loads
    load = loading_of(values)
    census = CensusConfig(n_prompts=under.n_prompts, n_bootstrap=200, prepend_bos=spec.prepend_bos)
    loaded = as_loaded(model, load)
    setup = data_setup(loaded, spec)
    data = setup.data
    knockout_targets(loaded, cfg)  # bad input is refused before the journal exists
    opened = (
        journal(
            {
                "model": model_key(loaded),
                "data": data.describe(),
                "data_fingerprint": data.fingerprint(),
                "projections": asdict(cfg),
                "census": asdict(census),
            }
        )
        if journal
        else None
    )
    with opened or contextlib.nullcontext():
        run = run_projections(loaded, data, cfg, census=census if under.roles else None, progress=progress, journal=opened)
    summary_md = projections_markdown(run.losses, run.role_changes, loaded.name, basis=data.basis(), figure=f"{_KNOCKOUT_FIGURE}.png")
    extra = {"projections": {"data": data.describe(), **setup.manifest_fields(), "resumed": bool(getattr(opened, "resumed", False))}}
    manifest = build_manifest(
        model=loaded, command=command, prepend_bos=spec.prepend_bos, configs={"projections": cfg, "census": census}, extra=extra
    )
    return ProjectionsResult(run=run, manifest={"result": ProjectionsResult.kind, **manifest}, summary_md=summary_md)


# ----------------------------------------------------------------------------- kv


@dataclass(kw_only=True, repr=False)
class KVResult(TableFileResult):
    """``table``: KV-cache bytes per token and for ``batch`` x ``context`` tokens of each variant
    (the model's own attention, GQA with each group size, MQA, a pruned model), with the formula.
    Saved as ``headlens kv --out FILE`` writes: the table and ``<stem>.manifest.json``."""

    kind = "kv"
    table_name = "kv"
    text_columns = KV_TEXT_COLUMNS

    #: The analysis' run (the table and the config); read back from a file it is rebuilt from the table and
    #: the manifest's ``config.kv`` (:meth:`from_table`).
    run: KVRun

    @classmethod
    def from_table(cls, table: pd.DataFrame, manifest: dict[str, Any]) -> KVResult:
        """The result read back, its run rebuilt: the table, the config from the manifest's ``config.kv``."""
        return cls(run=KVRun(table=table, config=config_from_record(KVConfig, manifest["config"]["kv"])), manifest=manifest)

    def findings(self) -> Findings:
        return kv_findings(self.run.table, self.model_name)


@study("kv", KVConfig)
def kv(
    model: LoadedModel | str,
    config: KVConfig | None = None,
    /,
    *,
    batch: int = KVConfig.batch,
    context: int | None = KVConfig.context,
    cache_dtype: str | None = KVConfig.cache_dtype,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    mask: HeadMask | str | Path | None = None,
    command: list[str] | None = None,
) -> KVResult:
    """KV-cache bytes per token and for ``batch`` x ``context`` tokens: the model's own attention,
    GQA with each group size, MQA, and the model pruned by ``mask`` (a :class:`HeadMask` or mask
    file; a KV head goes when no query head reads it).  ``config`` and keywords: :class:`KVConfig`'s
    fields (``batch``, ``context``, ``cache_dtype``)."""
    values = locals()
    cfg = config_of(KVConfig, values)
    load = loading_of(values)
    mask_file = None if mask is None or isinstance(mask, HeadMask) else str(mask)
    if mask_file is not None:
        read_mask(mask_file)  # syntax first, before the model loads
    loaded = as_loaded(model, load)
    if mask_file is not None:
        mask = read_mask(mask_file, n_layers=loaded.n_layers, n_heads=loaded.n_heads)
    check_kv(loaded, cfg)
    run = run_kv(loaded, cfg, removed=mask.heads if isinstance(mask, HeadMask) else None)
    manifest = build_manifest(model=loaded, command=command, configs={"kv": cfg}, extra={"kv": {"mask": mask_file}})
    return KVResult(run=run, manifest={"result": KVResult.kind, **manifest})
