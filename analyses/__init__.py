"""analyses: detectors, the head census, classification, ablation, pruning, sinks.

Functions here return DataFrames; nothing prints or plots.  Public names are imported
lazily on first use.
"""

from __future__ import annotations

from probes._lazy import lazy_exports

_EXPORTS = {
    "CensusConfig": "analyses.census",
    "CensusResult": "analyses.census",
    "run_census": "analyses.census",
    "classify_heads": "analyses.classify",
    "parse_thresholds": "analyses.classify",
    "default_thresholds": "analyses.classify",
    "registry": "analyses.detectors",
    "get_detectors": "analyses.detectors",
    "verify_attention": "analyses.verify",
    "run_selftest": "analyses.selftest",
    "build_planted_checkpoint": "analyses.planted",
    "PLANTED_ROLES": "analyses.planted",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
