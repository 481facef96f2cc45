"""``headlens.composition``: weight-based Q-, K- and V-composition between heads beside a random baseline, and OV copying.

No data: the scores come from the weights alone (:mod:`headlens.analyses.circuits.composition`
states the conventions: TransformerLens' ``all_composition_scores``, LayerNorm folded as its
``process_weights`` folds it, GQA through each query head's key-value group).
``headlens composition --out DIR`` is this call and :meth:`CompositionResult.save`:
``composition.csv`` (one row per earlier -> later head pair and mode: score, baseline mean and
sd, z, ratio, above_baseline), ``baseline.csv``, ``copying.csv``, one heatmap per mode and
``manifest.json``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.circuits.composition import (
    BASELINE_Z,
    CompositionConfig,
    CompositionRun,
    check_composition_config,
    run_composition,
)
from headlens.probes.config import ModelConfig
from headlens.probes.loading import LoadedModel
from headlens.probes.manifest import build_manifest
from headlens.probes.progress import Progress
from headlens.reports.api.common import config_of, loading_of, study
from headlens.reports.api.models import as_loaded
from headlens.reports.api.result import Result, read_csv_table, read_manifest
from headlens.reports.render.figures.circuit import composition_figure
from headlens.reports.render.finding_lines import Findings

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

__all__ = ["composition", "CompositionResult", "composition_lines", "TOP_PAIRS", "COPYING_AT"]

#: Pairs listed per mode in the findings (the strongest above the baseline).
TOP_PAIRS = 5
#: A head whose OV eigenvalue copying score is at least this is listed as a copying head.
COPYING_AT = 0.9
_TEXT = ("sender", "receiver", "input", "name")
_TABLES = ("composition", "baseline", "copying")


@dataclass(kw_only=True, repr=False)
class CompositionResult(Result):
    """``composition`` (head pairs x modes with the baseline), ``baseline`` (per mode) and ``copying`` (per head)."""

    kind = "composition"
    marker_files = ("composition.csv", "baseline.csv")

    #: The analysis' run (:class:`~headlens.analyses.circuits.composition.CompositionRun`): :attr:`tables` are its
    #: ``scores`` (as ``composition``), ``baseline`` and ``copying``; read back from a folder (:meth:`from_folder`)
    #: it is rebuilt from them and the manifest's ``composition`` entry (summary and notes).
    run: CompositionRun

    def __post_init__(self) -> None:
        self.tables = {"composition": self.run.scores, "baseline": self.run.baseline}
        if self.run.copying is not None:
            self.tables["copying"] = self.run.copying

    def restore_dtypes(self, files: dict[str, Path]) -> None:
        """The tables' dtypes restored (:meth:`Result.restore_dtypes`), in the run too."""
        super().restore_dtypes(files)
        t = self.tables
        self.run = replace(self.run, scores=t["composition"], baseline=t["baseline"], copying=t.get("copying"))

    @property
    def scores(self) -> pd.DataFrame:
        """One row per (earlier head, later head, mode): score, baseline_mean, baseline_sd, z, ratio, above_baseline."""
        return self.tables["composition"]

    @property
    def baseline(self) -> pd.DataFrame:
        """Per mode: the random matrices' score mean, sd, 99th percentile, samples and shapes."""
        return self.tables["baseline"]

    @property
    def copying(self) -> pd.DataFrame | None:
        """Per head: copying (sum of eigenvalues over their absolute sum), positive_share, diagonal."""
        return self.tables.get("copying")

    def _figure_makers(self) -> dict[str, Callable[[], Figure]]:
        scores = self.tables["composition"]
        modes = [m for m in ("q", "k", "v") if (scores["input"] == m).any()]
        return {f"composition_{m}": (lambda m=m: composition_figure(scores, m)) for m in modes}

    def findings(self) -> Findings:
        """What ``headlens composition`` prints (:func:`composition_lines`) and the run's notes."""
        if "composition" not in self.tables:
            return Findings()
        return Findings(tuple(composition_lines(self)), tuple(str(n) for n in self.run.notes))

    @classmethod
    def read_tables(cls, folder: Path) -> dict[str, pd.DataFrame]:
        return {name: read_csv_table(folder / f"{name}.csv", _TEXT) for name in _TABLES if (folder / f"{name}.csv").is_file()}

    @classmethod
    def from_folder(cls, folder: str | Path) -> CompositionResult:
        """The saved result, its run rebuilt: the tables from their files, the summary and notes from the manifest."""
        p = Path(folder)
        manifest, tables = read_manifest(p), cls.read_tables(p)
        summary = {k: v for k, v in manifest["composition"].items() if k != "notes"}
        run = CompositionRun(
            scores=tables["composition"],
            baseline=tables["baseline"],
            copying=tables.get("copying"),
            summary=summary,
            notes=manifest["composition"]["notes"],
        )
        return cls(run=run, manifest=manifest)


def composition_lines(result: CompositionResult) -> list[str]:
    """Per mode: how many pairs clear the baseline, the strongest of them; the copying heads."""
    scores, base = result.scores, result.baseline.set_index("input")
    lines = []
    for mode in base.index:
        rows = scores[scores["input"] == mode]
        b = base.loc[mode]
        above = rows[rows["above_baseline"].astype(bool)].sort_values("score", ascending=False)
        lines.append(
            f"{str(mode).upper()}-composition: {len(above)} of {len(rows)} head pairs above the random baseline"
            f" {float(b['mean']):.3f} (sd {float(b['sd']):.3f} over {int(b['n_samples'])} random samples; d_model {int(b['d_model'])},"
            f" d_head {int(b['d_head'])}; above = mean + {BASELINE_Z:g} sd)"
        )
        for row in above.head(TOP_PAIRS).to_dict("records"):
            score, ratio, z = float(row["score"]), float(row["ratio"]), float(row["z"])
            lines.append(f"  {row['sender']} -> {row['receiver']}  {score:.3f}  ({ratio:.1f}x, z {z:.1f})")
    cop = result.copying
    if cop is not None and len(cop):
        top = cop[cop["copying"] >= COPYING_AT].sort_values("copying", ascending=False)
        listed = ", ".join(f"{r['name']} {float(r['copying']):.2f}" for r in top.head(12).to_dict("records"))
        lines.append(
            f"copying heads (OV eigenvalues, copying >= {COPYING_AT:g}): {listed or 'none'}"
            + (f" (+{len(top) - 12} more)" if len(top) > 12 else "")
        )
    return lines


@study("composition", CompositionConfig)
def composition(
    model: LoadedModel | str,
    config: CompositionConfig | None = None,
    /,
    *,
    modes: tuple[str, ...] = CompositionConfig.modes,
    fold_ln: bool = CompositionConfig.fold_ln,
    n_baseline: int = CompositionConfig.n_baseline,
    n_tokens: int = CompositionConfig.n_tokens,
    copying: bool = CompositionConfig.copying,
    seed: int = CompositionConfig.seed,
    device: str = ModelConfig.device,
    dtype: str = ModelConfig.dtype,
    revision: str | None = ModelConfig.revision,
    allow_new_weights: bool = ModelConfig.allow_new_weights,
    device_map: Any = ModelConfig.device_map,
    max_memory: Any = ModelConfig.max_memory,
    offload_folder: str | None = ModelConfig.offload_folder,
    progress: Progress | None = None,
    command: list[str] | None = None,
) -> CompositionResult:
    """Which heads compose, from the weights alone: Q-, K- and V-composition for every pair of
    heads in different layers, each beside the score of random matrices of the same shapes, and
    each head's OV copying score.

    ``config`` and keywords: :class:`~headlens.analyses.circuits.composition.CompositionConfig`'s
    fields (``modes``, ``fold_ln``, ``n_baseline``, ``n_tokens``, ``copying``, ``seed``).
    """
    values = locals()
    cfg = config_of(CompositionConfig, values)
    load = loading_of(values)
    check_composition_config(cfg)  # before the model loads
    loaded = as_loaded(model, load)
    run = run_composition(loaded, cfg, progress=progress)
    manifest = build_manifest(
        model=loaded,
        command=command,
        seed=cfg.seed,
        configs={"composition": cfg},
        extra={"composition": {**run.summary, "notes": run.notes}},
    )
    return CompositionResult(run=run, manifest={"result": CompositionResult.kind, **manifest})
