"""The shape of a tiny GPT-2-shaped checkpoint (:func:`headlens.analyses.synthetic.tiny.build_tiny_checkpoint`),
in a module of its own that imports nothing heavy: the ``headlens tiny-model`` command reads its
defaults for its options, and ``headlens --help`` imports every command's module without torch
(tests/reports/cli/test_startup.py)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TinySpec"]


@dataclass(frozen=True, kw_only=True)
class TinySpec:
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    n_ctx: int = 128
    seed: int = 0
