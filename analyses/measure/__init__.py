"""The measuring floor: what every study measures with, under every study (issue 47).

Nothing here imports a study (ablation, patching, heads, sinks, design, circuits) or a builder
(demo, synthetic, tracr): tests/meta/test_layout.py holds analyses/ to its floors.  This module
imports nothing, so a light caller (``headlens demo heldout``) reads one submodule without the rest.
"""
