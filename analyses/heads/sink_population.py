"""Sink heads as a population: what a census says about the sink role when most heads have it.

In a Llama-family model nearly every head parks attention on the first token (SmolLM2-135M: 211 of
270 heads get the sink role on 20 prompts), so a head-by-head list of sink heads says nothing a
researcher can use.  When more than :data:`POPULATION_SHARE` of the heads have the sink role, the
census's views report the sinks as one population instead (:class:`SinkPopulation`: how many heads,
and per layer the mean share of attention on the first token over all queries against what a
uniformly attending head would put there), leave the heads whose only role is sink out of their
head-by-head lists (:func:`sink_only_heads`), and lead with the specific roles (:data:`SPECIFIC_ROLES`).

The share is the sink detector's score (Gu et al.'s alpha: the mean over every query of its
attention to position 0, averaged over the natural-text prompts), its uniform counterpart the
detector's baseline on the same queries; a layer's figure is the mean over its heads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headlens.analyses.heads.classify import SINK_ROLE

log = logging.getLogger(__name__)

__all__ = ["SinkPopulation", "sink_population", "sink_only_heads", "SINK", "SPECIFIC_ROLES", "POPULATION_SHARE"]

#: The sink role's name.
SINK = SINK_ROLE
#: The roles that say what a head does beyond parking attention, in the order the views list them.
SPECIFIC_ROLES = ("induction", "previous_token", "duplicate_token", "referent")
#: Sinks are a population when more than this share of the heads have the sink role.
POPULATION_SHARE = 0.5


@dataclass(frozen=True)
class SinkPopulation:
    """The sink role across a model's heads (:func:`sink_population`).

    ``n_heads``: heads censused; ``n_sink``: heads with the sink role; ``n_sink_only``: those with no
    other role; ``n_prompts``: the natural-text prompts the sink scores rest on (the most any head
    was measured on); ``layer_share[l]``: mean over layer ``l``'s heads of the share of attention on
    the first token over all queries (the sink score, NaN where no head was measurable);
    ``layer_uniform[l]``: what a uniformly attending head puts there over the same queries.
    """

    n_heads: int
    n_sink: int
    n_sink_only: int
    n_prompts: int
    layer_share: tuple[float, ...]
    layer_uniform: tuple[float, ...]

    @property
    def is_population(self) -> bool:
        """More than :data:`POPULATION_SHARE` of the heads have the sink role: report them as a population."""
        return self.n_sink > POPULATION_SHARE * self.n_heads

    @property
    def mean_share(self) -> float:
        """The mean over layers of :attr:`layer_share` (every layer has the same number of heads)."""
        return _nanmean(self.layer_share)

    @property
    def mean_uniform(self) -> float:
        """The mean over layers of :attr:`layer_uniform`."""
        return _nanmean(self.layer_uniform)


def _nanmean(values: tuple[float, ...]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr[np.isfinite(arr)].mean()) if np.isfinite(arr).any() else float("nan")


def sink_only_heads(roles: pd.DataFrame) -> set[tuple[int, int]]:
    """``(layer, head)`` of every head whose only role in the long role table is sink."""
    by_head = roles.groupby(["layer", "head"])["role"].agg(lambda r: frozenset(map(str, r)))
    return {(int(layer), int(head)) for (layer, head), got in by_head.items() if got == {SINK}}  # type: ignore[misc]


def sink_population(scores: pd.DataFrame, roles: pd.DataFrame) -> SinkPopulation | None:
    """The sink role as a population (:class:`SinkPopulation`), from the census's scores table
    (``layer, head, detector, score, baseline, n``) and its long role table; None when the census
    has no sink score (the detector was not run)."""
    sink = scores[scores["detector"] == SINK]
    if sink.empty:
        return None
    n_layers = int(scores["layer"].max()) + 1
    heads = scores[["layer", "head"]].drop_duplicates()
    share = pd.to_numeric(sink["score"], errors="coerce").groupby(sink["layer"]).mean()
    uniform = pd.to_numeric(sink["baseline"], errors="coerce").groupby(sink["layer"]).mean()
    n = pd.to_numeric(sink["n"], errors="coerce") if "n" in sink else pd.Series(dtype=float)
    with_sink = roles[roles["role"] == SINK]
    out = SinkPopulation(
        n_heads=len(heads),
        n_sink=len(with_sink[["layer", "head"]].drop_duplicates()),
        n_sink_only=len(sink_only_heads(roles)),
        n_prompts=int(n.max()) if n.notna().any() else 0,
        layer_share=tuple(float(share.get(layer, np.nan)) for layer in range(n_layers)),
        layer_uniform=tuple(float(uniform.get(layer, np.nan)) for layer in range(n_layers)),
    )
    log.debug("sink population: %d of %d heads (%d sink only), %d layers", out.n_sink, out.n_heads, out.n_sink_only, n_layers)
    return out
