"""headlens: what each attention head does, which heads matter, and where attention piles up.

One verb per question, each ``(model, config=None, /, **settings) -> Result``::

    import headlens

    model = headlens.load_model("demo")
    census = headlens.census(model, n_prompts=20)
    census.roles  # a DataFrame; census.plot() a Figure; census.save("out/census")

A result holds its tables as DataFrames, saves exactly the files the ``headlens`` command writes,
draws its figures as matplotlib Figures and shows itself in a notebook;
:func:`load` reads any saved folder back.

Three layers underneath, data flowing one way:

* :mod:`headlens.probes`: load a model, the one reduction pass over attention patterns, hooks,
  capture of per-head Q, K, V and patterns (the repository's ``probes/`` folder);
* :mod:`headlens.analyses`: detectors, the head census, ablation, pruning, patching, sinks,
  design studies; they return DataFrames and never print or plot (``analyses/``);
* :mod:`headlens.reports`: the results above, tables, figures, the report page, the attention
  view and the ``headlens`` CLI (``reports/``).
"""

from __future__ import annotations

from importlib import metadata

from headlens.analyses.ablation.pruning import PruneConfig
from headlens.analyses.ablation.study import AblationConfig
from headlens.analyses.ablation.texts import demo_text
from headlens.analyses.circuits.composition import CompositionConfig
from headlens.analyses.circuits.config import CircuitConfig
from headlens.analyses.design.gqa import GQAConfig
from headlens.analyses.design.kv import KVConfig
from headlens.analyses.design.projections import ProjectionConfig
from headlens.analyses.heads.census import CensusConfig
from headlens.analyses.patching.activation import PatchConfig
from headlens.analyses.patching.evidence import EvidenceConfig
from headlens.analyses.patching.path import PathConfig
from headlens.analyses.sinks.config import SinkConfig
from headlens.analyses.sinks.lengths import LengthsConfig
from headlens.probes.config import CaptureConfig, ModelConfig
from headlens.probes.errors import HeadlensError
from headlens.probes.loading import LoadedModel
from headlens.reports.api.ablate import AblationResult, ablate
from headlens.reports.api.attention_view import AttentionView, attention_view
from headlens.reports.api.capture import CaptureResult, capture
from headlens.reports.api.census import CensusResult, census
from headlens.reports.api.circuit import CircuitResult, circuit
from headlens.reports.api.composition import CompositionResult, composition
from headlens.reports.api.design import GQAResult, KVResult, ProjectionsResult, gqa, kv, projections
from headlens.reports.api.evidence import evidence
from headlens.reports.api.models import load_model, models
from headlens.reports.api.patch import PatchingResult, patch
from headlens.reports.api.prune import PruneResult, prune
from headlens.reports.api.registry import load
from headlens.reports.api.result import Result
from headlens.reports.api.sinks import SinkLengthsResult, SinksResult, sinks
from headlens.reports.api.verify import VerifyConfig, VerifyResult, verify
from headlens.reports.render.attention_view_plots import plot_heads, plot_pattern, plot_patterns
from headlens.reports.runs.report.build import build_report as report
from headlens.reports.runs.report.build import load_report
from headlens.reports.runs.report.settings import ReportSettings

try:
    __version__ = metadata.version("headlens")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AblationConfig",
    "AblationResult",
    "AttentionView",
    "CaptureConfig",
    "CaptureResult",
    "CensusConfig",
    "CensusResult",
    "CircuitConfig",
    "CircuitResult",
    "CompositionConfig",
    "CompositionResult",
    "EvidenceConfig",
    "GQAConfig",
    "GQAResult",
    "HeadlensError",
    "KVConfig",
    "KVResult",
    "LengthsConfig",
    "LoadedModel",
    "ModelConfig",
    "PatchConfig",
    "PatchingResult",
    "PathConfig",
    "ProjectionConfig",
    "ProjectionsResult",
    "PruneConfig",
    "PruneResult",
    "Result",
    "SinkConfig",
    "SinkLengthsResult",
    "SinksResult",
    "VerifyConfig",
    "ReportSettings",
    "VerifyResult",
    "__version__",
    "ablate",
    "attention_view",
    "capture",
    "census",
    "circuit",
    "composition",
    "demo_text",
    "evidence",
    "gqa",
    "kv",
    "load",
    "load_model",
    "load_report",
    "models",
    "patch",
    "plot_heads",
    "plot_pattern",
    "plot_patterns",
    "projections",
    "prune",
    "report",
    "sinks",
    "verify",
]
