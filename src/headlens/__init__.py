"""headlens: what each attention head does, which heads matter, and where attention piles up.

One import name, three layers that data flows through in one direction:

* :mod:`headlens.probes` — load a model, attach hooks, capture per-head Q, K, V and patterns
  (the repository's ``probes/`` folder);
* :mod:`headlens.analyses` — detectors, the head census, ablation, pruning, attention sinks;
  functions that return DataFrames and never print or plot (``analyses/``);
* :mod:`headlens.reports` — tables, figures, the report page and the ``headlens`` CLI
  (``reports/``).

Importing ``headlens`` imports none of them (and neither torch nor transformers); they load
on first use: ``from headlens.probes import load_model``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["probes", "analyses", "reports", "__version__"]

_SUBPACKAGES = ("probes", "analyses", "reports")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("headlens")
        except metadata.PackageNotFoundError:
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
