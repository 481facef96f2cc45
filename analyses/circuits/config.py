"""The settings of a circuit run (keyword-only, serialised to the manifest by :meth:`CircuitConfig.describe`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from headlens.analyses.circuits.scores import check_direction
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError

__all__ = ["CircuitConfig", "METHODS"]

#: Edge scorers: first-order estimate, integrated gradients, exact patching of every edge.
METHODS: tuple[str, ...] = ("eap", "eap-ig", "exact")


@dataclass(frozen=True, kw_only=True)
class CircuitConfig:
    method: str = "eap-ig"
    #: Integrated-gradient steps (``method="eap-ig"``): at least 2 (one step is ``method="eap"``).
    steps: int = 5
    direction: str = "noising"
    #: The circuit: the ``top_n`` edges by ``|score|``, or those with ``|score| >= threshold``;
    #: neither: the smallest circuit of the faithfulness curve reaching ``target_faithfulness``.
    top_n: int | None = None
    threshold: float | None = None
    #: Top edges of the circuit confirmed by exact patching.
    confirm: int = 20
    n_bootstrap: int = 1000
    seed: int = 0
    target_faithfulness: float = 0.95
    batch_size: int = 8
    #: Copies x pairs per forward of exact patching (the chunk size).
    max_rows: int = 256
    #: Sizes measured on the faithfulness curve (besides 0, the whole graph and the circuit).
    curve_points: int = 12

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError(f"unknown method {self.method!r}: choose from {', '.join(METHODS)}", method=self.method)
        check_direction(self.direction)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 2:
            raise InputError(f"steps must be a whole number >= 2 (one step is method='eap'), got {self.steps!r}", steps=self.steps)
        if self.top_n is not None and self.threshold is not None:
            raise InputError("give top_n or threshold, not both", top_n=self.top_n, threshold=self.threshold)
        if self.top_n is not None:
            check_count("top_n", self.top_n)
        if self.threshold is not None and (
            isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float) or not self.threshold > 0
        ):
            raise InputError(f"threshold must be a number > 0, got {self.threshold!r}", threshold=self.threshold)
        check_count("confirm", self.confirm, minimum=0)
        check_count("n_bootstrap", self.n_bootstrap)
        check_count("batch_size", self.batch_size)
        check_count("max_rows", self.max_rows)
        check_count("curve_points", self.curve_points, minimum=0)
        if not 0 < float(self.target_faithfulness) <= 1.5:
            raise InputError(
                f"target_faithfulness must lie in (0, 1.5], got {self.target_faithfulness!r}", target_faithfulness=self.target_faithfulness
            )

    def describe(self) -> dict[str, Any]:
        return asdict(self)
