"""The sink role's evidence: sink removal per head, and, when sinks are a population, a seeded
random sample of the sink-only heads with the population's verdict as a count and an interval.

In a Llama-family model more than half the heads have the sink role (SmolLM2-135M: 200 of 270 on
the evaluation text); there the sink is the default state, not a finding about one head, and
testing every one costs a sink-removal pass per head (most of the evidence's time).  When sinks
are a population (the census's rule,
:attr:`headlens.analyses.heads.sink_population.SinkPopulation.is_population`):

* the sink role of every head that also has another role is tested (those heads are listed one
  by one in the census's findings; there are at most as many as heads with a specific role);
* of the heads whose only role is sink, a random sample of
  :data:`~headlens.analyses.patching.evidence_rules.SINK_SAMPLE` (``sink_sample=``; seeded by the
  evidence's ``seed``) is tested; the others get the verdict
  :data:`~headlens.analyses.patching.evidence_rules.NOT_TESTED`, "sampled out", with the
  population's size;
* :func:`sink_sample_verdict` gives the population's verdict: how many of the sampled sink-only
  heads the test supports, the proportion with its 95% Wilson interval (a random sample, so the
  interval is for the share of all sink-only heads whose removal costs loss).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headlens.analyses.heads.sink_population import SINK, sink_only_heads
from headlens.analyses.measure.stats import wilson
from headlens.analyses.measure.texts import TextChoice, choose_text
from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.evidence_rules import NOT_SUPPORTED, NOT_TESTABLE, NOT_TESTED, SUPPORTED, judge, unreadable
from headlens.analyses.patching.sink_removal import SINK_WINDOW, sink_removal_effects
from headlens.probes.errors import InputError, UnsupportedModelError
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["sink_text", "sink_evidence", "SinkSample", "choose_sink_heads", "SinkSampleVerdict", "sink_sample_verdict"]

Head = tuple[int, int]


def sink_text(model: LoadedModel) -> TextChoice:
    """The text the sink test measures on: the model's own held-out text when it carries one (the
    demo), else the built-in text (:func:`~headlens.analyses.measure.texts.choose_text`'s
    default); its ``describe()`` is what the census manifest records."""
    return choose_text(model)


@dataclass(frozen=True)
class SinkSample:
    """Which sink roles the evidence tests: ``tested`` (sorted), ``sampled_out`` (sorted);
    ``population``: the sink-only heads (None when sinks are not a population: every sink role is
    tested); ``sampled``: the sink-only heads in ``tested``; ``seed``."""

    tested: tuple[Head, ...]
    sampled_out: tuple[Head, ...]
    population: int | None
    sampled: int
    seed: int

    def reason(self) -> str:
        """The detail of a sampled-out row."""
        return (
            f"sampled out (population of {self.population}): sinks are a population, so the sink role was tested on a random sample "
            f"of {self.sampled} of the {self.population} sink-only heads (seed {self.seed}) and on every head with another role"
        )

    def describe(self) -> dict[str, object]:
        """For the manifest."""
        return {
            "population": self.population,
            "sampled": self.sampled,
            "seed": self.seed,
            "tested": [f"{a}.{b}" for a, b in self.tested],
            "sampled_out": len(self.sampled_out),
            "rule": "sink-only heads: a seeded random sample; heads with the sink role and another: all",
        }


def choose_sink_heads(roles: pd.DataFrame, sink_heads: list[Head], *, population: bool, k: int, seed: int) -> SinkSample:
    """The sink roles to test (:class:`SinkSample`): every one unless ``population`` (sinks are a
    population), ``k > 0`` and there are more than ``k`` sink-only heads; then every head with the
    sink role and another, and a random sample of ``k`` sink-only heads
    (``numpy.random.default_rng(seed)``, without replacement, from the sorted heads)."""
    only = sorted(h for h in sink_heads if h in sink_only_heads(roles))
    if not population or k <= 0 or len(only) <= k:
        return SinkSample(tuple(sorted(sink_heads)), (), len(only) if population else None, len(only), seed)
    picked = {only[i] for i in np.random.default_rng(seed).choice(len(only), size=k, replace=False)}
    tested = tuple(sorted(h for h in sink_heads if h not in only or h in picked))
    out = tuple(sorted(set(only) - picked))
    log.info("sink evidence: %d of %d sink-only heads sampled (seed %d), %d others tested", k, len(only), seed, len(tested) - k)
    return SinkSample(tested, out, len(only), k, seed)


def sink_evidence(
    model: LoadedModel, heads: list[Head], *, n: int, prepend_bos: bool, seed: int, step: Callable[[int], None] | None = None
) -> dict[Head, tuple]:
    """Per head, the sink-removal row: ``(verdict, figure, low, high, test, detail, windows)``;
    ``step(i)`` after the baseline pass (0) and after each head's pass (``i`` heads done)."""
    text = sink_text(model)
    test = f"sink removal: key 0 masked out of the head's queries, attention renormalised; windows of the {text.label} ({text.why})"
    why = unreadable(model, "loss")
    if why is not None:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, why) for h in heads}
    try:
        found = sink_removal_effects(model, heads, n=n, prepend_bos=prepend_bos, seed=seed, text=text.text, step=step)
    except (UnsupportedModelError, InputError) as exc:
        return {h: (NOT_TESTABLE, np.nan, np.nan, np.nan, test, str(exc)) for h in heads}
    out = {}
    for h, (mean, low, high, k) in found.items():
        said = (
            f"removing its attention to the first token changes the loss by {mean:+.4f} nats [{low:+.4f}, {high:+.4f}]"
            f" over {k} windows of {SINK_WINDOW} tokens"
        )
        # fewer windows than asked for: the text is short; fewer than MIN_ITEMS asked for is a smoke run (no verdict, role_evidence)
        # the count and the interval first: a short text is not testable, whatever the figure says
        if k < min(n, MIN_ITEMS) or not (np.isfinite(low) and np.isfinite(high)):
            detail = f"{said}; the {text.label} holds only {k} windows, a finding needs {MIN_ITEMS} and an interval"
            out[h] = (NOT_TESTABLE, mean, low, high, test, detail, k)
            continue
        verdict, why = judge("sink", mean, low, high, n_items=k, min_items=min(n, MIN_ITEMS))
        out[h] = (verdict, mean, low, high, test, said + (f"; {why}" if why else ""), k)
    return out


@dataclass(frozen=True)
class SinkSampleVerdict:
    """The sink population's verdict from the sampled sink-only heads: ``supported`` of ``judged``
    (supported or not supported; ``untestable`` had no verdict), ``proportion`` with its 95%
    Wilson interval ``low``, ``high``; ``population`` sink-only heads, ``not_tested`` of them
    sampled out; ``others``: the verdicts of the sink role of heads with another role."""

    supported: int
    judged: int
    untestable: int
    proportion: float
    low: float
    high: float
    population: int
    not_tested: int
    others: dict[str, int]

    def describe(self) -> dict[str, object]:
        return {
            "supported": self.supported,
            "judged": self.judged,
            "untestable": self.untestable,
            "proportion": self.proportion,
            "interval": [self.low, self.high],
            "interval_method": "Wilson, 95%",
            "population": self.population,
            "not_tested": self.not_tested,
            "heads_with_another_role": self.others,
        }


def sink_sample_verdict(evidence: pd.DataFrame, roles: pd.DataFrame) -> SinkSampleVerdict | None:
    """The sink population's verdict (:class:`SinkSampleVerdict`) from an evidence table and the
    census's long role table; None when no sink role was sampled out (every one was tested, or
    sinks are not a population: the per-head verdicts say it all) or none was tested (``roles=``
    left the sink role out)."""
    sinks = evidence[evidence["role"].astype(str) == SINK]
    untested = sinks["evidence"].astype(str) == NOT_TESTED
    if sinks.empty or not untested.any() or untested.all():  # every one tested, or none (the role not chosen)
        return None
    only = sink_only_heads(roles)
    is_only = [(int(a), int(b)) in only for a, b in zip(sinks["layer"], sinks["head"], strict=True)]
    pop, others = sinks[is_only], sinks[[not x for x in is_only]]
    verdicts = pop["evidence"].astype(str)
    k, no = int((verdicts == SUPPORTED).sum()), int((verdicts == NOT_SUPPORTED).sum())
    low, high = wilson(k, k + no)
    return SinkSampleVerdict(
        supported=k,
        judged=k + no,
        untestable=int(((verdicts != SUPPORTED) & (verdicts != NOT_SUPPORTED) & (verdicts != NOT_TESTED)).sum()),
        proportion=k / (k + no) if k + no else float("nan"),
        low=low,
        high=high,
        population=len(pop),
        not_tested=int((verdicts == NOT_TESTED).sum()),
        others={str(v): int(c) for v, c in others["evidence"].astype(str).value_counts().items()},
    )
