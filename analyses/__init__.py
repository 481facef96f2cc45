"""analyses: detectors, the head census, classification, ablation, pruning, sinks.

Functions here return DataFrames; nothing prints or plots.  The public names below are imported
explicitly, so an IDE and a type checker see their real types.
"""

from __future__ import annotations

from headlens.analyses.heads.census import CensusConfig, CensusRun, run_census
from headlens.analyses.heads.classify import classify_heads, default_thresholds, parse_thresholds
from headlens.analyses.heads.detectors import get_detectors, registry
from headlens.analyses.heads.verify import verify_attention
from headlens.analyses.synthetic.planted import PLANTED_ROLES, build_planted_checkpoint
from headlens.analyses.synthetic.selftest import run_selftest

__all__ = [
    "CensusConfig",
    "CensusRun",
    "run_census",
    "classify_heads",
    "parse_thresholds",
    "default_thresholds",
    "registry",
    "get_detectors",
    "verify_attention",
    "run_selftest",
    "build_planted_checkpoint",
    "PLANTED_ROLES",
]
