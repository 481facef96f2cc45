"""``headlens selftest``: plant known heads in a model, census it, check every role is found.

The planted checkpoint (:mod:`headlens.analyses.synthetic.planted`) has a previous-token, a sink, a
duplicate-token, an induction (via K-composition) and a referent head, and heads with
no role.  The check passes when each planted role is given to its head and no head
gets a role it was not planted with.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.heads.classify import classify_heads, roles_of
from headlens.analyses.measure.masks import parse_head
from headlens.analyses.synthetic.planted import PLANTED_ROLES, build_planted_checkpoint
from headlens.probes.loading import load_model

__all__ = ["SelftestReport", "run_selftest", "check_planted_roles"]


@dataclass
class SelftestReport:
    device: str
    dtype: str
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    #: the long role table (one row per (head, role)) of the census with BOS
    roles: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        return all(ok for _, ok, _ in self.checks)

    @property
    def n_failed(self) -> int:
        return sum(not ok for _, ok, _ in self.checks)

    def lines(self) -> list[str]:
        return [f"{'PASS' if ok else 'FAIL'}  {name:<28} {detail}" for name, ok, detail in self.checks]


def check_planted_roles(scores: pd.DataFrame, roles: pd.DataFrame, planted: dict[str, str]) -> list[tuple[str, bool, str]]:
    """One check per planted role (found on its head?) plus one for every other head (no role?).
    ``roles``: the long role table (:func:`headlens.analyses.heads.classify.classify_heads`)."""
    by_name = {f"{a}.{b}": set(rs) for (a, b), rs in roles_of(roles).items()}
    detectors = set(scores["detector"])
    checks = []
    for head, role in planted.items():
        if role not in detectors:
            continue
        layer, h = parse_head(head, where="planted heads")
        row = scores[(scores["detector"] == role) & (scores["layer"] == layer) & (scores["head"] == h)].iloc[0]
        got = by_name.get(head, set())
        ok = got == {role}
        checks.append(
            (
                f"{role} on {head}",
                ok,
                f"score {row.score:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}], baseline {row.baseline:.3f}; roles: "
                f"{', '.join(sorted(got)) or 'none'}",
            )
        )
    stray = {name: r for name, r in by_name.items() if r and name not in planted}
    checks.append(
        ("no role on other heads", not stray, "none" if not stray else "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in stray.items()))
    )
    return checks


def run_selftest(
    *,
    device: str = "auto",
    dtype: str = "float32",
    n_prompts: int = 40,
    folder: str | Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> SelftestReport:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(folder) if folder is not None else Path(tmp)
        ckpt = build_planted_checkpoint(where / "planted")
        model = load_model(model=str(ckpt), device=device, dtype=dtype)
        report = SelftestReport(device=str(model.device), dtype=dtype)
        for bos in (True, False):
            result = run_census(model, CensusConfig(n_prompts=n_prompts, prepend_bos=bos), progress=progress)
            roles = classify_heads(result.scores).roles
            for name, ok, detail in check_planted_roles(result.scores, roles, PLANTED_ROLES):
                report.checks.append((f"{name} ({'BOS' if bos else 'no BOS'})", ok, detail))
            if bos:
                report.roles = roles
    return report
