"""The settings of ablation and pruning, defined once.

:class:`AblationConfig` (``headlens ablate``) and :class:`PruneConfig` (``headlens prune``) carry
each setting's type, default, help text and range (:func:`headlens.probes.settings.setting`): the
study signatures of :mod:`headlens.reports.api` repeat them as keyword parameters and the click
options are generated from them.  What a study measures on (:class:`~headlens.analyses.measure.spec.EvalSpec`)
is on the measuring floor.  Light (the standard library and light parts of :mod:`headlens.probes`):
``headlens ablate --help`` reads this module; the modules that run the studies re-export these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.settings import check_range, check_seed, seed_setting, setting

__all__ = ["METHODS", "AblationConfig", "PruneConfig"]

#: How an ablated head's ``z`` is replaced.
METHODS = ("zero", "mean", "resample")


@dataclass(frozen=True, kw_only=True)
class AblationConfig:
    """How to run an ablation study.

    ``heads``/``layers`` restrict the table (default: every head not removed by the mask).
    ``batch_size`` items go through the model at once; ``heads_per_forward`` heads of one layer
    are ablated in one forward (one per copy of the batch; ``None`` = as many as keep a forward
    under ``AUTO_TOKENS_PER_FORWARD`` tokens).  ``prefix_reuse`` runs each ablation from its
    layer on (checked against a full forward once; off = one full forward per head).
    ``n_bootstrap`` resamples of the items give the ``ci`` interval of each delta (``seed``).
    ``seed`` also draws the resample sources.  ``attribution`` is skipped, with a note in
    ``AblationRun.info["attribution"]``, for the embedding metric (its gradient is zero).
    """

    method: str = setting(
        "zero",
        help="How an ablated head's z is replaced: zeros, its mean over the evaluation set, or z from another item (seeded).",
        choices=METHODS,
    )
    heads: tuple[tuple[int, int], ...] | None = setting(
        None, help="Heads to ablate, one at a time, as LAYER.HEAD, e.g. 5.1,5.5 (default: all)."
    )
    layers: tuple[int, ...] | None = setting(None, help="Only heads in these layers, e.g. 0,3.")
    batch_size: int = setting(8, help="Windows, prompts or sentences per forward.", minimum=1)
    heads_per_forward: int | None = setting(
        None,
        help="Heads of one layer ablated per forward, one per batch copy (default: as many as fit 2048 tokens).",
        minimum=1,
    )
    prefix_reuse: bool = setting(
        True, help="Run each ablation from its layer on, from the stored residual stream (off: a full forward per head).", cli=False
    )
    n_bootstrap: int = setting(1000, help="Bootstrap resamples of the items for the 95% interval of each delta.", minimum=0)
    ci: float = setting(0.95, help="Confidence level of the intervals.", minimum=0, maximum=1, min_open=True, max_open=True, cli=False)
    seed: int = seed_setting(0, help="Seed of the bootstrap, of resample sources and of the attribution's rank-correlation test.")
    attribution: bool = setting(True, help="Skip the first-order (gradient) estimate.", flag="--no-attribution")

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.heads is not None:
            object.__setattr__(self, "heads", as_heads(self.heads, name="heads"))
        if self.method not in METHODS:
            raise InputError(f"unknown ablation method {self.method!r}: choose from {', '.join(METHODS)}", method=self.method)
        for name in ("batch_size", "heads_per_forward", "ci"):  # the declared ranges, in the parameters' names
            check_range(self, name)
        check_count("n_bootstrap", self.n_bootstrap, minimum=0)


@dataclass(frozen=True, kw_only=True)
class PruneConfig:
    """``step``: fraction of the remaining heads removed per step; ``max_increase``: largest
    relative degradation accepted for the removable fraction; ``random_seeds``: random orders
    in the control (seeded from ``seed``); ``max_fraction``: stop once this fraction is removed."""

    step: float = setting(0.1, help="Fraction of the remaining heads removed per step.", minimum=0, maximum=1, min_open=True)
    max_increase: float = setting(
        0.05,
        help="Largest relative worsening of the metric for the removable fraction (0.05 = 5% of the unablated loss); for --metric "
        "embedding the largest embedding change itself (0.05 = cosine to the unablated embedding at least 0.95).",
        minimum=0,
    )
    random_seeds: int = setting(3, help="Random pruning orders in the control.", minimum=0)
    seed: int = seed_setting(0, help="Seed of the random orders.")
    max_fraction: float = setting(1.0, help="Stop once this fraction of heads is removed.", minimum=0, maximum=1, min_open=True)
    batch_size: int = setting(8, help="Windows, prompts or sentences per forward.", minimum=1)

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if not 0 < self.step <= 1:
            raise InputError(f"step must be in (0, 1], got {self.step}", step=self.step)
        if self.max_increase < 0:
            raise InputError(f"max_increase must be >= 0, got {self.max_increase}", max_increase=self.max_increase)
        check_count("random_seeds", self.random_seeds, minimum=0)
        if not 0 < self.max_fraction <= 1:
            raise InputError(f"max_fraction must be in (0, 1], got {self.max_fraction}", max_fraction=self.max_fraction)
        check_range(self, "batch_size")
