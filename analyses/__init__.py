"""analyses: detectors, the head census, classification, ablation, pruning, sinks.

Functions here return DataFrames; nothing prints or plots.  Public names are imported
lazily on first use.
"""

from __future__ import annotations

from headlens.probes._lazy import lazy_exports

_EXPORTS = {
    "CensusConfig": "headlens.analyses.census",
    "CensusResult": "headlens.analyses.census",
    "run_census": "headlens.analyses.census",
    "classify_heads": "headlens.analyses.classify",
    "parse_thresholds": "headlens.analyses.classify",
    "default_thresholds": "headlens.analyses.classify",
    "registry": "headlens.analyses.detectors",
    "get_detectors": "headlens.analyses.detectors",
    "verify_attention": "headlens.analyses.verify",
    "run_selftest": "headlens.analyses.selftest",
    "build_planted_checkpoint": "headlens.analyses.planted",
    "PLANTED_ROLES": "headlens.analyses.planted",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
