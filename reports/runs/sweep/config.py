"""The sweep's settings (:class:`SweepConfig`): light (no torch), so ``headlens sweep --help`` reads
its options from these fields (:mod:`headlens.probes.settings`).  :mod:`headlens.reports.runs.sweep.plan`
re-exports it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from headlens.analyses.heads.census_config import DEFAULT_BASELINE_FACTOR, CensusConfig
from headlens.probes.settings import setting

__all__ = ["SweepConfig"]


@dataclass(frozen=True, kw_only=True)
class SweepConfig:
    """Everything a task does besides which model it loads; written to ``OUT/sweep.json``."""

    census: CensusConfig = field(default_factory=CensusConfig)
    device: str = setting("auto", help="auto, cpu, cuda, mps; in a task with a GPU, auto is that GPU.")
    dtype: str = setting("float32", help="Weights and activations dtype of every task.", choices=("float32", "bfloat16", "float16"))
    allow_new_weights: bool = setting(False, help="Load checkpoints with missing body weights (see headlens detect -h).")
    thresholds: tuple[tuple[str, float], ...] = setting(
        (), help="DETECTOR=VALUE for the role column, repeatable (overriding the default thresholds).", flag="--threshold"
    )
    baseline_factor: float = setting(DEFAULT_BASELINE_FACTOR, help="A role needs ci_low >= this x the uniform baseline.", minimum=1.0)
    text_file: str | None = setting(
        None,
        help="Held-out text for each checkpoint's loss (default: the built-in evaluation text; the demo's: 'headlens demo heldout').",
        path="file",
    )
    loss_windows: int = setting(32, help="Windows of held-out text scored per checkpoint (0: no loss).", minimum=0)
    loss_window: int = setting(128, help="Tokens per loss window (capped at the model's context).", minimum=3)
    ablation: bool = setting(
        False,
        help="Also ablate each head alone (zero) on the held-out windows: OUT/ablation.parquet, the loss increase per head and checkpoint.",
        flag="--ablate",
    )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["census"] = asdict(self.census)
        d["thresholds"] = dict(self.thresholds)
        return json.loads(json.dumps(d))  # tuples -> lists: the form sweep.json reads back as
