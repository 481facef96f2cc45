"""The demo model, in one place: a small GPT-2 that headlens trains itself.

* ``model/``: the shipped checkpoint (weights, tokenizer, training log, ``MODEL_CARD.md``);
  ``headlens --model demo`` loads it through the same code path as any local folder.
* :mod:`headlens.analyses.demo.data`: the training and held-out text;
* :mod:`headlens.analyses.demo.train`: the recipe (``headlens demo train --out DIR``);
* :mod:`headlens.analyses.demo.replay`: replay of a training log;
* :mod:`headlens.analyses.demo.card`: the model card's facts, and ``model_card.md.j2``, its
  Markdown template (rendered by :mod:`headlens.reports.runs.demo_card`).

Importing this package is cheap (no torch).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEMO_SPEC", "MODEL_DIR"]

#: The ``--model`` value that names the shipped demo model.
DEMO_SPEC = "demo"

#: The shipped checkpoint folder.
MODEL_DIR = Path(__file__).resolve().parent / "model"
