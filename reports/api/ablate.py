"""``headlens.ablate``: each head ablated alone (zero, mean or resample), the change in the metric.

The evaluation set and metric come from :mod:`headlens.analyses.measure.setup`; the sweep from
:func:`headlens.analyses.ablation.study.run_ablation`.  ``headlens ablate --out FILE`` is this
call and :meth:`AblationResult.save`: the table (``.csv``, ``.parquet`` or ``.json``) with
``<stem>.manifest.json`` and ``<stem>.heatmap.png/.svg`` beside it.
"""

from __future__ import annotations

import contextlib
import logging
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from headlens.analyses.ablation.study import TABLE_COLUMNS, AblationConfig, AblationRun, run_ablation
from headlens.analyses.measure.evalset import METRIC_LABELS, EvalSet, TaskItem, read_task
from headlens.analyses.measure.masks import HeadMask, read_mask
from headlens.analyses.measure.setup import EvalSetup, EvalSpec, eval_setup
from headlens.probes.config import ModelConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, check_layers_heads, weights_fingerprint
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.probes.settings import settings_of
from headlens.reports.api.common import coerce_setting, config_from_record, config_of, loading_of, study
from headlens.reports.api.folder import TableFileResult
from headlens.reports.api.journals import JournalOpener
from headlens.reports.api.models import as_loaded
from headlens.reports.api.text_files import read_text_file
from headlens.reports.render.figures.ablation import ablation_heatmap_figure
from headlens.reports.render.finding_lines import Findings, ablation_findings, ablation_small_sample_note

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["ablate", "AblationResult", "ABLATION_COLUMNS", "DATA_FIELDS", "eval_spec", "data_setup", "model_key", "metric_label"]

#: Keyword arguments of ablate / prune (and, for text, gqa / projections) that say what is measured on: :class:`EvalSpec`'s fields.
DATA_FIELDS = tuple(info.name for info in settings_of(EvalSpec))


def metric_label(metric: str) -> str:
    """How a metric is named in printed lines (``embedding change (1 - cosine)``)."""
    return METRIC_LABELS.get(metric, metric)


def eval_spec(settings: dict[str, Any]) -> EvalSpec:
    """The :class:`EvalSpec` of a study's data keywords (:data:`DATA_FIELDS`); ``text_file`` and
    ``task_file`` are read here (a bad file: one-line :class:`InputError`)."""
    hints = typing.get_type_hints(EvalSpec)
    s = {k: coerce_setting("", k, hints[k], v) if k in hints else v for k, v in settings.items()}
    for given, other in (("text", "text_file"), ("task", "task_file")):
        if s.get(given) is not None and s.get(other) is not None:
            raise InputError(f"give either {given}= or {other}=, not both", **{other: s[other]})
    if s.get("text_file") is not None:
        s["text_file"] = str(s["text_file"])
        s["text"] = read_text_file(s["text_file"])
    if s.get("task_file") is not None:
        s["task_file"] = str(s["task_file"])
        s["task"] = read_task(s["task_file"])
    elif s.get("task") is not None:
        s["task"] = [t if isinstance(t, TaskItem) else TaskItem(**t) for t in s["task"]]
    return EvalSpec(**s)


def data_setup(loaded: LoadedModel, spec: EvalSpec) -> EvalSetup:
    """:func:`eval_setup`, saying in a log line when the metric chosen for this model is not loss."""
    setup = eval_setup(loaded, spec)
    if setup.why is not None:
        log.warning(
            "metric: embedding change (1 - cosine of the mean-pooled sentence embedding to the unablated one), not loss: %s", setup.why
        )
    return setup


def model_key(loaded: LoadedModel) -> dict[str, Any]:
    """The model part of a journal's key: a journal written with other weights is not resumed."""
    d = loaded.describe()
    key = {k: d.get(k) for k in ("model", "path", "revision", "commit", "architecture", "n_layers", "n_heads", "d_head", "dtype", "device")}
    return {**key, "weights": weights_fingerprint(loaded)}


@dataclass(kw_only=True, repr=False)
class AblationResult(TableFileResult):
    """Each head ablated alone: ``table`` (one row per head: layer, head, method, metric, value,
    delta, ci_low, ci_high, n, attribution), the unablated value, the attribution's agreement.

    Saved as ``headlens ablate --out FILE`` writes: the table, ``<stem>.manifest.json`` and
    ``<stem>.heatmap.png/.svg``."""

    kind = "ablation"
    table_name = "ablation"
    section = "ablation"
    figure_stems = ("heatmap",)

    #: The analysis' run: the table (:attr:`table`, with ``name``), the config, the metric, the unablated and
    #: masked values and the attribution's agreement; read back from a file it is rebuilt from the table and the
    #: manifest (:meth:`from_table`: the config from ``config.ablation``, the rest from the ``ablation`` entry).
    run: AblationRun
    #: the evaluation set and why its metric was chosen (in memory only; ``None`` when read back from files)
    setup: EvalSetup | None = field(default=None)

    @classmethod
    def from_table(cls, table: pd.DataFrame, manifest: dict[str, Any]) -> AblationResult:
        """The result read back, its run rebuilt: the config from the manifest's ``config.ablation``, the
        values from its ``ablation`` entry (``baseline_value``, the older key, where ``masked_value`` is missing)."""
        info = manifest["ablation"]
        run = AblationRun(
            table=table,
            masked_value=float(info.get("masked_value", info["baseline_value"])),
            unablated_value=float(info["unablated_value"]),
            spearman=info.get("spearman_attribution_vs_exact"),
            config=config_from_record(AblationConfig, manifest["config"]["ablation"]),
            metric=str(info["metric"]),
            spearman_p=info.get("spearman_p_attribution_vs_exact"),
            info=info.get("run") or {},
        )
        return cls(run=run, manifest=manifest)

    @property
    def data(self) -> EvalSet | None:
        """The evaluation set (``None`` when read back from files)."""
        return self.setup.data if self.setup is not None else None

    @property
    def basis(self) -> str:
        """What the metric was measured on (``16 windows x 128 tokens ...``; read back from files, as the manifest's
        ``ablation.data`` records it, ``""`` where it does not)."""
        return self.setup.data.basis() if self.setup is not None else str((self.info.get("data") or {}).get("basis", ""))

    @property
    def info(self) -> dict[str, Any]:
        """The manifest's ``ablation`` entry: the record of the run (its data, mask, intervals, files)."""
        return self.manifest.get("ablation", {})

    @property
    def method(self) -> str:
        return self.run.config.method

    @property
    def metric(self) -> str:
        return self.run.metric

    @property
    def unablated_value(self) -> float:
        return self.run.unablated_value

    @property
    def masked_value(self) -> float:
        """The metric with the mask's heads removed (:attr:`unablated_value` without a mask): each head's
        ``delta`` is measured from it.  Recorded in the manifest as ``ablation.masked_value`` (and, as
        before, ``ablation.baseline_value``: a manifest written before ``masked_value`` has only that key)."""
        return self.run.masked_value

    @property
    def spearman(self) -> float | None:
        """Rank correlation of the first-order attribution with the exact delta (None without attribution)."""
        return self.run.spearman

    @property
    def spearman_p(self) -> float | None:
        """Two-sided permutation p-value of :attr:`spearman` against no association
        (:func:`headlens.analyses.measure.stats.spearman_p`; None without attribution, or in a folder saved before it was recorded)."""
        return self.run.spearman_p

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.ablation_findings`)."""
        return ablation_findings(self.run, basis=self.basis, record=self.info)

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        m = self.manifest.get("model") or {}
        return {
            "heatmap": lambda: ablation_heatmap_figure(
                self.table, n_layers=int(m["n_layers"]), n_heads=int(m["n_heads"]), baseline=self.masked_value
            )
        }


@study("ablate", AblationConfig)
def ablate(
    model: LoadedModel | str,
    config: AblationConfig | None = None,
    /,
    *,
    method: str = AblationConfig.method,
    heads: tuple[tuple[int, int], ...] | None = AblationConfig.heads,
    layers: tuple[int, ...] | None = AblationConfig.layers,
    batch_size: int = AblationConfig.batch_size,
    heads_per_forward: int | None = AblationConfig.heads_per_forward,
    prefix_reuse: bool = AblationConfig.prefix_reuse,
    n_bootstrap: int = AblationConfig.n_bootstrap,
    ci: float = AblationConfig.ci,
    seed: int = AblationConfig.seed,
    attribution: bool = AblationConfig.attribution,
    metric: str | None = EvalSpec.metric,
    text: str | None = EvalSpec.text,
    text_file: str | None = EvalSpec.text_file,
    task: Sequence[TaskItem] | None = EvalSpec.task,
    task_file: str | None = EvalSpec.task_file,
    n_windows: int = EvalSpec.n_windows,
    window: int = EvalSpec.window,
    n_sentences: int = EvalSpec.n_sentences,
    prepend_bos: bool = EvalSpec.prepend_bos,
    complete_sentences: bool | None = EvalSpec.complete_sentences,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    mask: HeadMask | str | Path | None = None,
    journal: JournalOpener | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> AblationResult:
    """Ablate each head alone and measure the change in the metric.

    ``model``: a loaded model or a name (``"demo"``), folder or Hugging Face id (then ``device``,
    ``dtype``, ... load it).  ``config`` and keywords: :class:`AblationConfig`'s fields (``method``
    ``"zero"``/``"mean"``/``"resample"``, ``heads``, ``layers``, ``batch_size``, ``n_bootstrap``,
    ``seed``, ``attribution`` ...) and what to measure on, :class:`EvalSpec`'s fields (``metric``
    ``"loss"``/``"logit-diff"``/``"embedding"`` (default: the model's), ``text`` or
    ``text_file``, ``task`` (prompts with ``correct`` and ``incorrect``) or ``task_file``,
    ``n_windows``, ``window``, ``n_sentences``, ``prepend_bos``).  ``mask``: heads removed
    throughout (a :class:`HeadMask` or a mask file from :func:`prune`).
    """
    values = locals()
    cfg = config_of(AblationConfig, values)
    spec = eval_spec({k: values[k] for k in DATA_FIELDS})
    load = loading_of(values)
    mask_file = None if mask is None or isinstance(mask, HeadMask) else str(mask)
    if mask_file is not None:
        read_mask(mask_file)  # syntax first, before the model loads
    if not isinstance(model, LoadedModel):
        torch.manual_seed(cfg.seed)  # a newly initialised output head is drawn reproducibly
    loaded = as_loaded(model, load)
    setup = data_setup(loaded, spec)
    data = setup.data
    if mask_file is not None:
        mask = read_mask(mask_file, n_layers=loaded.n_layers, n_heads=loaded.n_heads)
    head_mask = mask if isinstance(mask, HeadMask) else None
    check_layers_heads(loaded, cfg.layers, cfg.heads)
    removed = head_mask.to_json()["removed"] if head_mask else None
    opened = _opened(journal, loaded, data, cfg, removed)
    with opened or contextlib.nullcontext():
        run = run_ablation(loaded, data, cfg, mask=head_mask, journal=opened, progress=progress)
    record = _ablation_record(cfg, setup, run, mask_file=mask_file, removed=removed, resumed=bool(getattr(opened, "resumed", False)))
    manifest = build_manifest(
        model=loaded, command=command, seed=cfg.seed, prepend_bos=spec.prepend_bos, configs={"ablation": cfg}, extra={"ablation": record}
    )
    return AblationResult(run=replace(run, table=_named(run.table)), manifest={"result": AblationResult.kind, **manifest}, setup=setup)


def _opened(journal: JournalOpener | None, loaded: LoadedModel, data: EvalSet, cfg: AblationConfig, removed: Any) -> Any:
    """The sweep's journal opened with what it must match to resume (model, data, config, mask); None without one."""
    if not journal:
        return None
    return journal(
        {"model": model_key(loaded), "data": data.describe(), "data_fingerprint": data.fingerprint(), "config": vars(cfg), "mask": removed}
    )


def _ablation_record(
    cfg: AblationConfig, setup: EvalSetup, run: AblationRun, *, mask_file: str | None, removed: Any, resumed: bool
) -> dict[str, Any]:
    """The manifest's ``ablation`` entry: method, metric and data, the unablated and masked values, the mask,
    attribution against exact, the intervals, the run's info; with a note when intervals rest on few items."""
    record = {
        "method": cfg.method,
        "metric": setup.metric,
        **setup.manifest_fields(),
        "attribution": run.info.get("attribution", "on" if cfg.attribution else "off (--no-attribution)"),
        "unablated_value": run.unablated_value,
        "masked_value": run.masked_value,
        "baseline_value": run.masked_value,  # the older key of masked_value, kept so older readers still work
        "mask": {"file": mask_file, "removed": removed} if removed is not None else None,
        "data": setup.data.describe(),
        "spearman_attribution_vs_exact": run.spearman,
        "spearman_p_attribution_vs_exact": run.spearman_p,
        "ci": {"level": cfg.ci, "bootstrap": cfg.n_bootstrap, "over": "items (windows, prompts or sentences)"},
        "run": run.info,
        "resumed": resumed,
    }
    small = ablation_small_sample_note(record)
    if small:
        record["small_sample_note"] = small  # intervals over fewer than MIN_ITEMS items under-cover
    return record


#: The ablation table's columns: the analysis's (:data:`~headlens.analyses.ablation.study.TABLE_COLUMNS`) with ``name`` after ``head``.
ABLATION_COLUMNS = [*TABLE_COLUMNS[:2], "name", *TABLE_COLUMNS[2:]]


def _named(table: pd.DataFrame) -> pd.DataFrame:
    """The ablation table with a ``name`` column (``"layer.head"``) after ``head``, as the census's and patching's tables have."""
    if "name" in table.columns:
        return table
    out = table.copy()
    out.insert(out.columns.get_loc("head") + 1, "name", [f"{int(a)}.{int(b)}" for a, b in zip(out["layer"], out["head"], strict=True)])
    return out
