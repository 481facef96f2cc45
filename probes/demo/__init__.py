"""The demo model: a small GPT-2 that headlens trains itself, shipped with the package.

``--model demo`` (``load_model(model="demo")``) loads the checkpoint in
``probes/demo/model`` through the same code path as any local checkpoint folder, so
the main commands run offline on real *learned* heads. The folder also holds the
training log and ``MODEL_CARD.md`` (data, licence, losses, head census).

The recipe lives in :mod:`probes.demo.train` (data: :mod:`probes.demo.data`) and runs
as ``python -m probes.demo train --out DIR``. Importing this package is cheap: torch
and transformers are imported by the submodules only.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEMO_SPEC", "MODEL_DIR", "model_dir"]

#: The ``--model`` value that names the shipped demo model.
DEMO_SPEC = "demo"

#: The shipped checkpoint folder.
MODEL_DIR = Path(__file__).resolve().parent / "model"


def model_dir() -> Path:
    """The shipped checkpoint folder (it may be missing from a broken install)."""
    return MODEL_DIR
