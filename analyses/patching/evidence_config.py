"""The role-evidence settings (:class:`EvidenceSettings`): light (no torch), so ``headlens classify
--help`` reads its ``--evidence-n`` and ``--evidence-seq-len`` from these fields.

:class:`headlens.analyses.patching.evidence.EvidenceConfig` is this dataclass with the run attached.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlens.analyses.measure.verdicts import MIN_ITEMS
from headlens.analyses.patching.evidence_rules import MIN_T, ROLE_RULES, SINK_SAMPLE
from headlens.probes.counts import check_count
from headlens.probes.errors import InputError
from headlens.probes.settings import check_seed, seed_setting, setting

__all__ = ["EvidenceSettings"]


@dataclass(frozen=True, kw_only=True)
class EvidenceSettings:
    """How the role evidence runs: ``n`` pairs, sequences or windows per test, ``T`` random tokens
    per copy (at least :data:`~headlens.analyses.patching.evidence_rules.MIN_T`), ``seed``,
    ``roles`` (which roles to test; None: all), ``sink_sample`` (how many sink-only heads to test
    when sinks are a population; 0: all), ``smoke`` (no verdicts: a smoke test)."""

    n: int = setting(32, help=f"Pairs, sequences or windows per evidence test (at least {MIN_ITEMS}).")
    T: int = setting(20, help=f"Random tokens per copy in the induction evidence (at least {MIN_T}).")
    seed: int = seed_setting(0, help="Seed of the evidence's random tokens and pairs.")
    roles: tuple[str, ...] | None = setting(
        None, help="Comma-separated roles to test (default: all); the others are recorded as not tested.", choices=tuple(ROLE_RULES)
    )
    sink_sample: int = setting(
        SINK_SAMPLE,
        help=(
            "When more than half the heads sink: test the sink role on a seeded random sample of this many sink-only heads "
            "(0: every one); heads with another role are all tested."
        ),
        minimum=0,
    )
    smoke: bool = setting(False, help="A smoke test: run every test on few items and state no verdict.", cli=False)

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if isinstance(self.roles, str):  # "induction,sink" from the library, as the CLI gives it
            object.__setattr__(self, "roles", tuple(r.strip() for r in self.roles.split(",")))
        if self.roles is not None:
            object.__setattr__(self, "roles", tuple(self.roles))
            unknown = [r for r in self.roles if r not in ROLE_RULES]
            if unknown or not self.roles:
                raise InputError(f"roles={self.roles!r}: choose from {', '.join(ROLE_RULES)}", roles=self.roles)
        if self.sink_sample < 0:
            raise InputError(f"sink_sample={self.sink_sample}: 0 (every sink head) or more", sink_sample=self.sink_sample)
        if not self.smoke and self.n < MIN_ITEMS:
            raise InputError(
                f"evidence needs at least {MIN_ITEMS} items per test to state a verdict (n={self.n}); fewer is a smoke test", n=self.n
            )
        if self.n < 2:
            raise InputError(f"evidence needs at least 2 items per test for an interval (n={self.n})", n=self.n)
        check_count("n", self.n, minimum=2, subject=f"evidence items (n={self.n})")  # at most MAX_COUNT; memory: check_fits
        check_count("T", self.T, minimum=2, subject=f"evidence tokens per copy (T={self.T})")
        if self.T < MIN_T:
            raise InputError(
                f"evidence needs at least {MIN_T} random tokens per copy (T={self.T}): the induction task's direct-effect check needs them",
                T=self.T,
            )
