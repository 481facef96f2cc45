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

The public names load on first use (PEP 562: :func:`__getattr__` below), so ``import headlens``
and ``import headlens.probes.loading`` cost no more than what they use, not every study, renderer
and figure library; :data:`_HOMES` says where each name lives, and the same names are imported
under ``TYPE_CHECKING`` so that an IDE and a type checker see their real types.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names as _HOMES, for type checkers and editors (nothing runs here)
    from headlens.analyses.ablation.pruning import PruneConfig
    from headlens.analyses.ablation.study import AblationConfig
    from headlens.analyses.circuits.composition import CompositionConfig
    from headlens.analyses.circuits.config import CircuitConfig
    from headlens.analyses.design.gqa import GQAConfig
    from headlens.analyses.design.kv import KVConfig
    from headlens.analyses.design.projections import ProjectionConfig
    from headlens.analyses.heads.census import CensusConfig
    from headlens.analyses.measure.texts import demo_text
    from headlens.analyses.patching.activation import PatchConfig
    from headlens.analyses.patching.evidence import EvidenceConfig
    from headlens.analyses.patching.ioi_config import IOIConfig
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
    from headlens.reports.api.ioi import IOIResult, ioi
    from headlens.reports.api.models import fetch_model, load_model, models
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

#: Each public name -> its home module (``"module:attribute"`` where the name there differs).
#: The one table :func:`__getattr__` reads; tests/meta/test_public_namespace.py checks that it,
#: ``__all__`` and the ``TYPE_CHECKING`` imports above name the same objects.
_HOMES: dict[str, str] = {
    "PruneConfig": "headlens.analyses.ablation.pruning",
    "AblationConfig": "headlens.analyses.ablation.study",
    "demo_text": "headlens.analyses.measure.texts",
    "CompositionConfig": "headlens.analyses.circuits.composition",
    "CircuitConfig": "headlens.analyses.circuits.config",
    "GQAConfig": "headlens.analyses.design.gqa",
    "KVConfig": "headlens.analyses.design.kv",
    "ProjectionConfig": "headlens.analyses.design.projections",
    "CensusConfig": "headlens.analyses.heads.census",
    "PatchConfig": "headlens.analyses.patching.activation",
    "EvidenceConfig": "headlens.analyses.patching.evidence",
    "IOIConfig": "headlens.analyses.patching.ioi_config",
    "PathConfig": "headlens.analyses.patching.path",
    "SinkConfig": "headlens.analyses.sinks.config",
    "LengthsConfig": "headlens.analyses.sinks.lengths",
    "CaptureConfig": "headlens.probes.config",
    "ModelConfig": "headlens.probes.config",
    "HeadlensError": "headlens.probes.errors",
    "LoadedModel": "headlens.probes.loading",
    "AblationResult": "headlens.reports.api.ablate",
    "ablate": "headlens.reports.api.ablate",
    "AttentionView": "headlens.reports.api.attention_view",
    "attention_view": "headlens.reports.api.attention_view",
    "CaptureResult": "headlens.reports.api.capture",
    "capture": "headlens.reports.api.capture",
    "CensusResult": "headlens.reports.api.census",
    "census": "headlens.reports.api.census",
    "CircuitResult": "headlens.reports.api.circuit",
    "circuit": "headlens.reports.api.circuit",
    "CompositionResult": "headlens.reports.api.composition",
    "composition": "headlens.reports.api.composition",
    "GQAResult": "headlens.reports.api.design",
    "KVResult": "headlens.reports.api.design",
    "ProjectionsResult": "headlens.reports.api.design",
    "gqa": "headlens.reports.api.design",
    "kv": "headlens.reports.api.design",
    "projections": "headlens.reports.api.design",
    "evidence": "headlens.reports.api.evidence",
    "IOIResult": "headlens.reports.api.ioi",
    "ioi": "headlens.reports.api.ioi",
    "load_model": "headlens.reports.api.models",
    "models": "headlens.reports.api.models",
    "fetch_model": "headlens.reports.api.models",
    "PatchingResult": "headlens.reports.api.patch",
    "patch": "headlens.reports.api.patch",
    "PruneResult": "headlens.reports.api.prune",
    "prune": "headlens.reports.api.prune",
    "load": "headlens.reports.api.registry",
    "Result": "headlens.reports.api.result",
    "SinkLengthsResult": "headlens.reports.api.sinks",
    "SinksResult": "headlens.reports.api.sinks",
    "sinks": "headlens.reports.api.sinks",
    "VerifyConfig": "headlens.reports.api.verify",
    "VerifyResult": "headlens.reports.api.verify",
    "verify": "headlens.reports.api.verify",
    "plot_heads": "headlens.reports.render.attention_view_plots",
    "plot_pattern": "headlens.reports.render.attention_view_plots",
    "plot_patterns": "headlens.reports.render.attention_view_plots",
    "report": "headlens.reports.runs.report.build:build_report",
    "load_report": "headlens.reports.runs.report.build",
    "ReportSettings": "headlens.reports.runs.report.settings",
}

if "ipykernel.zmqshell" in sys.modules or "IPython.utils._process_emscripten" in sys.modules:
    # A notebook kernel, where tqdm.auto's first import warns "IProgress not found" in red when
    # ipywidgets is missing; accelerate and transformers import it (a first model load, or the
    # user's own transformers import after `import headlens`).  Imported first here with that one
    # warning silenced, as probes/placement.py does (whose import the lazy names no longer force):
    # the bars then draw as text, which is all the warning says.  Nothing of this runs outside a
    # kernel (tqdm's own test, tqdm/autonotebook.py), and no filter stays in force.
    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
        import tqdm.auto

    del tqdm, TqdmWarning  # not public names

try:
    __version__ = metadata.version("headlens")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """A public name, imported from its home module on first use and then kept in this module's
    namespace (the cache: later lookups no longer come here)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = home.partition(":")
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The names here now and every public name, loaded or not (``dir(headlens)``, tab completion)."""
    return sorted(set(globals()) | set(__all__))


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
    "IOIConfig",
    "IOIResult",
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
    "ioi",
    "kv",
    "load",
    "load_model",
    "load_report",
    "models",
    "fetch_model",
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
