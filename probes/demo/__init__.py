"""The demo model: a small GPT-2 that headlens trains itself, shipped with the package.

``--model demo`` (``load_model(model="demo")``) loads the checkpoint in
``probes/demo/model`` through the same code path as any local checkpoint folder, so
the main commands run offline on real *learned* heads. The folder also holds the
training log and ``MODEL_CARD.md`` (data, licence, losses, head census).

The recipe lives in :mod:`headlens.analyses.demo` and runs as ``headlens demo train --out DIR``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEMO_SPEC", "MODEL_DIR"]

#: The ``--model`` value that names the shipped demo model.
DEMO_SPEC = "demo"

#: The shipped checkpoint folder.
MODEL_DIR = Path(__file__).resolve().parent / "model"
