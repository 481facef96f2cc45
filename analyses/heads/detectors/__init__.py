"""The detector registry.

Every module in this package that defines a module-level ``DETECTOR`` (a
:class:`~headlens.analyses.heads.detectors.base.Detector`) is registered under ``DETECTOR.name``:
a new detector is one new module.  Discovery happens on first use, not at import.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from headlens.analyses.heads.detectors.base import STIMULI, BatchContext, Detector, DetectorOutput
from headlens.probes.errors import InputError

__all__ = ["Detector", "DetectorOutput", "BatchContext", "registry", "get_detectors", "census_detectors", "detector_names", "STIMULI"]


@cache
def registry() -> dict[str, Detector]:
    """Name -> detector, for every detector module in this package (sorted by name)."""
    found: dict[str, Detector] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        det = getattr(module, "DETECTOR", None)
        if isinstance(det, Detector):
            if det.name in found:
                raise RuntimeError(f"two detectors are called {det.name!r}")
            if det.stimulus not in STIMULI:
                raise RuntimeError(f"detector {det.name!r} asks for unknown stimulus {det.stimulus!r}")
            found[det.name] = det
    return dict(sorted(found.items()))


def detector_names() -> list[str]:
    return list(registry())


def get_detectors(names: list[str] | tuple[str, ...] | None = None) -> list[Detector]:
    """The detectors called ``names`` (all when None), or an InputError naming the valid ones."""
    reg = registry()
    if names is None:
        return list(reg.values())
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise InputError(f"unknown detector {', '.join(map(repr, unknown))}: choose from {', '.join(reg)}", detectors=unknown)
    if not names:
        raise InputError(f"no detector chosen: choose from {', '.join(reg)}")
    return [reg[n] for n in dict.fromkeys(names)]


def census_detectors(names: list[str] | tuple[str, ...] | None, *, all_causal: bool) -> list[Detector]:
    """The detectors a census runs: those called ``names``; by default (None) every registered
    one, except, when every layer is causal (``all_causal``), those that measure nothing on
    causal attention (``Detector.causal_rule``: next-token).  Asked for by name, they run."""
    if names is not None:
        return get_detectors(names)
    return [d for d in registry().values() if not (all_causal and d.causal_rule)]
