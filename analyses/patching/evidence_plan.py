"""What the role evidence will cost, said before it starts: the forwards each test runs and, from
one measured forward, the time (:func:`evidence_plan`, :func:`time_forward`).

A unit is one forward over a test's ``n`` items (sequences, pairs or windows; a copy of the batch
per head counts as one more).  Per test, with ``H`` heads tested:

* induction: ``2 + 2H`` (the unablated pass and the knockout's unedited pass, then per head one
  zero-ablated pass and one knockout of its attention to the token after the earlier occurrence);
* previous_token: ``2 + 2H`` (path patching: the clean and corrupted caches, then per sender head
  its step-1 and its joint step-2 copy), 0 without an induction head after it;
* duplicate_token: ``1 + 2H`` (the unedited pass, two knockouts per head);
* referent: ``2 + H`` (the clean and corrupted passes, one patched pass per head);
* sink: ``1 + H`` over windows of evaluation text (the unedited pass, one removal per head).

The time is the forwards times one timed forward over ``n`` repeated random sequences (prefix +
``2T`` tokens), a sink window's forward scaled by its length; an estimate, said as one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import pandas as pd
import torch

from headlens.analyses.patching.duplicate_knockout import repeated_batch
from headlens.analyses.patching.evidence_sink import SinkSample, choose_sink_heads
from headlens.analyses.patching.sink_removal import SINK_WINDOW
from headlens.probes.loading import LoadedModel
from headlens.probes.progress import Progress

log = logging.getLogger(__name__)

__all__ = [
    "EvidencePlan",
    "EvidenceSelection",
    "select_tests",
    "evidence_plan",
    "time_forward",
    "forwards_of",
    "forward_ticker",
    "FORWARDS",
]

Head = tuple[int, int]

#: Forwards per test: (fixed, per head tested).
FORWARDS = {"induction": (2, 2), "previous_token": (2, 2), "duplicate_token": (1, 2), "referent": (2, 1), "sink": (1, 1)}


def forwards_of(role: str, heads: int) -> int:
    """The forwards :mod:`headlens.analyses.patching.evidence`'s test of ``role`` runs on ``heads`` heads (0 for none)."""
    fixed, each = FORWARDS.get(role, (0, 0))
    return fixed + each * heads if heads else 0


@dataclass(frozen=True)
class EvidencePlan:
    """The evidence's cost: ``tests`` maps each role to ``(heads tested, forwards)``; ``not_tested``
    counts the (head, role) rows not tested; ``sink_note`` says how the sink heads were chosen;
    ``n`` items per forward, ``T`` tokens per copy; ``seconds``: one measured forward (None: not
    measured); ``sink_scale``: a sink window's forward against the measured one."""

    tests: Mapping[str, tuple[int, int]]
    not_tested: int
    n: int
    T: int
    sink_note: str = ""
    seconds: float | None = None
    sink_scale: float = 1.0

    @property
    def forwards(self) -> int:
        return sum(f for _, f in self.tests.values())

    @property
    def estimate_s(self) -> float | None:
        """The estimated seconds (None without a measured forward)."""
        if self.seconds is None:
            return None
        weighted = sum(f * (self.sink_scale if role == "sink" else 1.0) for role, (_, f) in self.tests.items())
        return weighted * self.seconds

    def text(self) -> str:
        """``evidence: 36 (head, role) tests (8 induction, ..., 20 sink: ...), 94 forwards of 32 items;
        one took 1.2 s: about 2.1 min`` (no time without a measured forward)."""
        note = {"sink": f" ({self.sink_note})"} if self.sink_note else {}
        parts = [f"{h} {role}{note.get(role, '')}" for role, (h, _) in self.tests.items()]
        heads = sum(h for h, _ in self.tests.values())
        line = f"evidence: {heads} (head, role) tests ({', '.join(parts) or 'none'}), {self.forwards} forwards of {self.n} items"
        if self.not_tested:
            line += f"; {self.not_tested} not tested"
        if self.seconds is not None and self.estimate_s is not None:
            line += f"; one forward took {self.seconds:.2f} s: about {_minutes(self.estimate_s)} in all"
        return line

    def describe(self) -> dict[str, object]:
        return {
            "tests": {role: {"heads": h, "forwards": f} for role, (h, f) in self.tests.items()},
            "forwards": self.forwards,
            "not_tested": self.not_tested,
            "seconds_per_forward": self.seconds,
            "estimate_s": self.estimate_s,
        }


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


@dataclass(frozen=True)
class EvidenceSelection:
    """What the evidence tests: ``pairs`` every (layer, head, role) of the role table in its order;
    ``tested`` role -> heads to test; ``skipped`` (head, role) -> why it is not tested; ``sink``
    the sink heads' sample (None without a sink role to test)."""

    pairs: list[tuple[int, int, str]]
    tested: dict[str, list[Head]]
    skipped: dict[tuple[Head, str], str] = field(default_factory=dict)
    sink: SinkSample | None = None


def select_tests(
    roles: pd.DataFrame, *, only: tuple[str, ...] | None = None, sink_sample: int = 0, population: bool = False, seed: int = 0
) -> EvidenceSelection:
    """The (head, role) pairs of ``roles`` (the census's long role table) to test: those of the
    roles in ``only`` (None: all), the sink role on a sample when ``population``
    (:func:`~headlens.analyses.patching.evidence_sink.choose_sink_heads`); the rest with why not."""
    pairs = list(
        zip(roles["layer"].astype(int).tolist(), roles["head"].astype(int).tolist(), roles["role"].astype(str).tolist(), strict=True)
    )
    by_role: dict[str, list[Head]] = {}
    skipped: dict[tuple[Head, str], str] = {}
    for layer, head, role in pairs:
        if only is not None and role not in only:
            skipped[((layer, head), role)] = f"role not chosen (roles={','.join(only)})"
        else:
            by_role.setdefault(role, []).append((layer, head))
    sink = None
    if "sink" in by_role:
        sink = choose_sink_heads(roles, by_role["sink"], population=population, k=sink_sample, seed=seed)
        by_role["sink"] = list(sink.tested)
        skipped.update({(h, "sink"): sink.reason() for h in sink.sampled_out})
    return EvidenceSelection(pairs=pairs, tested=by_role, skipped=skipped, sink=sink)


def evidence_plan(selection: EvidenceSelection, *, n: int, T: int) -> EvidencePlan:
    """The plan of ``selection``, no time yet (:func:`time_forward` adds it)."""
    tests = {role: (len(h), forwards_of(role, len(h))) for role, h in selection.tested.items() if h}
    s = selection.sink
    note = f"{s.sampled} of {s.population} sink-only heads, a random sample (seed {s.seed})" if s is not None and s.sampled_out else ""
    return EvidencePlan(tests=tests, not_tested=len(selection.skipped), n=n, T=T, sink_note=note)


def time_forward(model: LoadedModel, plan: EvidencePlan, *, seed: int = 0) -> EvidencePlan:
    """``plan`` with one forward over its ``n`` repeated random sequences timed (seconds; the
    first forward of the run, so a little slow rather than fast) and the sink windows' scale."""
    if not plan.tests:
        return plan
    tokens, _ = repeated_batch(model, n=plan.n, T=plan.T, seed=seed)
    start = time.perf_counter()
    with torch.inference_mode():
        model.bridge(tokens.to(model.device), return_type="logits")
    seconds = time.perf_counter() - start
    scale = min(SINK_WINDOW, model.n_ctx) / tokens.shape[1]
    log.info("evidence: one forward of %d x %d tokens took %.2f s", *tokens.shape, seconds)
    return replace(plan, seconds=seconds, sink_scale=scale)


def forward_ticker(progress: Progress | None, plan: EvidencePlan) -> Callable[[str, int], None]:
    """``tick(role, heads)``: ``heads`` more heads of ``role``'s test done (0: its fixed passes;
    -1: one more head, the fixed passes counted before it), as forwards to ``progress("evidence", done, total)``."""
    total, done = plan.forwards, [0]
    fixed_said: set[str] = set()

    def tick(role: str, heads: int) -> None:
        if progress is None or role not in plan.tests:
            return
        fixed, each = FORWARDS[role]
        add = 0 if role in fixed_said else fixed
        fixed_said.add(role)
        add += each * (1 if heads < 0 else heads)
        done[0] = min(total, done[0] + add)
        progress("evidence", done[0], total)

    if progress is not None and total:
        progress("evidence", 0, total)
    return tick
