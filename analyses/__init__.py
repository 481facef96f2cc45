"""analyses: detectors, the head census, classification, ablation, pruning, sinks.

Functions here return DataFrames; nothing prints or plots.  Public names are imported
lazily on first use.
"""

from __future__ import annotations

from headlens.probes._lazy import lazy_exports

_EXPORTS = {
    "CensusConfig": "headlens.analyses.heads.census",
    "CensusResult": "headlens.analyses.heads.census",
    "run_census": "headlens.analyses.heads.census",
    "classify_heads": "headlens.analyses.heads.classify",
    "parse_thresholds": "headlens.analyses.heads.classify",
    "default_thresholds": "headlens.analyses.heads.classify",
    "registry": "headlens.analyses.heads.detectors",
    "get_detectors": "headlens.analyses.heads.detectors",
    "verify_attention": "headlens.analyses.heads.verify",
    "run_selftest": "headlens.analyses.synthetic.selftest",
    "build_planted_checkpoint": "headlens.analyses.synthetic.planted",
    "PLANTED_ROLES": "headlens.analyses.synthetic.planted",
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll] - the lazy-export table is the one list of names
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
