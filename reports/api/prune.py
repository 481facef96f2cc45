"""``headlens.prune``: heads pruned iteratively by importance against random orders (Michel et al. 2019).

``headlens prune --out DIR`` is this call and :meth:`PruneResult.save`: ``curve.csv``,
``random_orders.csv``, ``importance.csv``, ``pruned_heads.json`` (a head mask for
``ablate(mask=...)``), ``pruning_curve.png/.svg`` and ``manifest.json``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from headlens.analyses.ablation.pruning import PruneConfig, PruneRun, run_pruning
from headlens.analyses.measure.evalset import EvalSet
from headlens.analyses.measure.masks import HeadMask, read_mask
from headlens.analyses.measure.setup import EvalSetup
from headlens.analyses.measure.spec import EvalSpec, TaskItem
from headlens.probes.config import ModelConfig
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.outputs import write_json
from headlens.probes.progress import Progress
from headlens.reports.api.ablate import DATA_FIELDS, data_setup, eval_spec, model_key
from headlens.reports.api.common import config_from_record, config_of, loading_of, study
from headlens.reports.api.folder import FolderResult
from headlens.reports.api.journals import JournalOpener
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import TEXT_COLUMNS, read_csv_table, read_manifest
from headlens.reports.render.figures.ablation import pruning_curve_figure
from headlens.reports.render.finding_lines import Findings, pruning_findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["prune", "PruneResult", "PRUNE_FILES"]

#: Every file ``headlens prune`` writes into its folder.
PRUNE_FILES = (
    "curve.csv",
    "random_orders.csv",
    "importance.csv",
    "pruned_heads.json",
    "manifest.json",
    "pruning_curve.png",
    "pruning_curve.svg",
)
_MASK_FILE = "pruned_heads.json"


@dataclass(kw_only=True, repr=False)
class PruneResult(FolderResult):
    """``curve`` (metric, KV-cache bytes saved and the random orders' mean and spread per step),
    ``random`` (each random order's steps), ``importance`` (per head, at step 0) and ``pruned``
    (the largest set of heads within ``max_increase``)."""

    kind = "pruning"
    section = "pruning"
    marker_files = ("curve.csv", "importance.csv", _MASK_FILE)

    #: The analysis' run: the curve, random orders, importance, the pruned set, the config and metric; read back
    #: from a folder it is rebuilt from the tables, the mask file and the manifest (:meth:`from_folder`).
    run: PruneRun
    #: the evaluation set and why its metric was chosen (in memory only; ``None`` when read back from files)
    setup: EvalSetup | None = field(default=None)

    def __post_init__(self) -> None:
        self.tables = {"curve": self.run.curve, "random_orders": self.run.random, "importance": self.run.importance}

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        t = self.tables
        self.run = replace(self.run, curve=t["curve"], random=t["random_orders"], importance=t["importance"])

    @property
    def data(self) -> EvalSet | None:
        """The evaluation set (``None`` when read back from files)."""
        return self.setup.data if self.setup is not None else None

    @property
    def basis(self) -> str:
        """What the metric was measured on (``16 windows x 128 tokens ...``; read back from files, as the manifest's
        ``pruning.data`` records it, ``""`` where it does not)."""
        return self.setup.data.basis() if self.setup is not None else str((self.info.get("data") or {}).get("basis", ""))

    @property
    def curve(self) -> pd.DataFrame:
        return self.run.curve

    @property
    def random(self) -> pd.DataFrame:
        return self.run.random

    @property
    def importance(self) -> pd.DataFrame:
        return self.run.importance

    @property
    def pruned(self) -> HeadMask:
        """The largest set of heads within ``max_increase``."""
        return self.run.pruned

    @property
    def info(self) -> dict[str, Any]:
        """The manifest's ``pruning`` entry: the record of the run (its data, the removable set's value and KV bytes, files)."""
        return self.manifest.get("pruning", {})

    @property
    def metric(self) -> str:
        return self.run.metric

    @property
    def unablated_value(self) -> float:
        """The metric of the model as loaded (step 0 of the curve: nothing removed)."""
        return self.run.unablated_value

    @property
    def removable_fraction(self) -> float:
        return self.run.removable_fraction

    @property
    def max_increase(self) -> float:
        return self.run.config.max_increase

    def findings(self) -> Findings:
        """What ``headlens`` prints for this study (:func:`~headlens.reports.render.finding_lines.pruning_findings`)."""
        return pruning_findings(
            self.run, basis=self.basis, model_name=self.model_name, dtype=self.manifest.get("dtype", ""), record=self.info
        )

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        return {
            "pruning_curve": lambda: pruning_curve_figure(
                self.curve,
                metric=self.metric,
                baseline=self.unablated_value,
                max_increase=self.max_increase,
                removable=self.removable_fraction,
            )
        }

    def _write_extra(self, folder: Path) -> None:
        write_json(folder / _MASK_FILE, self.pruned.to_json())

    def files(self, folder: Path) -> dict[str, Any]:
        return {name: str(folder / name) for name in PRUNE_FILES}

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        text = (*TEXT_COLUMNS, "removed_this_step")
        return {name: read_csv_table(folder / f"{name}.csv", text) for name in ("curve", "random_orders", "importance")}

    @classmethod
    def from_folder(cls, folder: str | Path) -> PruneResult:
        """The saved result, its run rebuilt: the tables and the mask from their files, the config from the
        manifest's ``config.prune``, the values and the run's info from its ``pruning`` entry."""
        p = Path(folder)
        manifest, tables = read_manifest(p), cls.read_tables(p)
        info = manifest["pruning"]
        run = PruneRun(
            curve=tables["curve"],
            random=tables["random_orders"],
            importance=tables["importance"],
            pruned=read_mask(p / _MASK_FILE),
            unablated_value=float(info["unablated_value"]),
            removable_fraction=float(info["removable_fraction"]),
            config=config_from_record(PruneConfig, manifest["config"]["prune"]),
            metric=str(info["metric"]),
            info=info["run"],
        )
        return cls(run=run, manifest=manifest)


def _pruning_record(run: PruneRun, setup: EvalSetup, *, resumed: bool) -> dict[str, Any]:
    """The manifest's ``pruning`` entry: the metric and data, the removable fraction and what it saves, the run's info."""
    best = run.curve.loc[run.curve["fraction_removed"] == run.removable_fraction].iloc[-1]
    metric = setup.metric
    return {
        "metric": metric,
        **setup.manifest_fields(),
        "max_increase_is": "absolute (the unablated embedding change is 0)" if metric == "embedding" else "relative to the unablated value",
        "unablated_value": run.unablated_value,
        "removable_fraction": run.removable_fraction,
        "removable_heads": len(run.pruned),
        "value_at_removable": float(best["value"]),
        "kv_bytes_saved_per_1k_tokens_at_removable": int(best["kv_bytes_saved_per_1k_tokens"]),
        "kv_formula": "2 x kv_heads_removed x d_head x 1000 x bytes_per_value",
        "importance": run.info["importance"],
        "data": setup.data.describe(),
        "run": run.info,
        "resumed": resumed,
    }


@study("prune", PruneConfig)
def prune(
    model: LoadedModel | str,
    config: PruneConfig | None = None,
    /,
    *,
    step: float = PruneConfig.step,
    max_increase: float = PruneConfig.max_increase,
    random_seeds: int = PruneConfig.random_seeds,
    seed: int = PruneConfig.seed,
    max_fraction: float = PruneConfig.max_fraction,
    batch_size: int = PruneConfig.batch_size,
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
    journal: JournalOpener | None = None,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> PruneResult:
    """Prune heads step by step by importance (gradient importance, Michel et al. 2019; the exact
    single-head change for the embedding metric, whose gradient is zero) against random orders.

    ``config`` and keywords: :class:`PruneConfig`'s fields (``step``, ``max_increase``,
    ``random_seeds``, ``seed``, ``max_fraction``, ``batch_size``) and what to measure on,
    :class:`EvalSpec`'s fields as :func:`headlens.reports.api.ablate.ablate` takes them (``metric``,
    ``text``/``text_file``, ``task``/``task_file``, ``n_windows``, ``window``, ``n_sentences``,
    ``prepend_bos``).
    """
    values = locals()
    cfg = config_of(PruneConfig, values)
    spec = eval_spec({k: values[k] for k in DATA_FIELDS})
    load = loading_of(values)
    if not isinstance(model, LoadedModel):
        torch.manual_seed(cfg.seed)  # a newly initialised output head is drawn reproducibly
    loaded = as_loaded(model, load)
    setup = data_setup(loaded, spec)
    data = setup.data
    opened = (
        journal({"model": model_key(loaded), "data": data.describe(), "data_fingerprint": data.fingerprint(), "config": vars(cfg)})
        if journal
        else None
    )
    with opened or contextlib.nullcontext():
        run = run_pruning(loaded, data, cfg, journal=opened, progress=progress)
    extra = {"pruning": _pruning_record(run, setup, resumed=bool(getattr(opened, "resumed", False)))}
    manifest = build_manifest(
        model=loaded, command=command, seed=cfg.seed, prepend_bos=spec.prepend_bos, configs={"prune": cfg}, extra=extra
    )
    return PruneResult(run=run, manifest={"result": PruneResult.kind, **manifest}, setup=setup)
