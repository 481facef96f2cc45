"""Head roles from census scores.

A head gets a detector's role when, for that detector,

1. ``score >= threshold`` (defaults below, changeable per detector), and
2. ``ci_low >= baseline_factor * baseline``: the lower end of its 95% bootstrap
   interval is at least ``baseline_factor`` (default 2) times what a uniformly
   attending head would score on the same positions (and above it by more than
   float rounding, :data:`UNIFORM_RTOL`, which matters at ``baseline_factor=1`` only), and
3. any extra statistic the detector gates on clears its minimum.

Referent heads follow their own rule instead of 1. (:func:`headlens.analyses.heads.detectors.referent.referent_passes`):
the one-sided sign test over minimal pairs (the head prefers the agreeing candidate more
often than chance), Holm-corrected over all heads, has ``p_value <= threshold`` (the
referent threshold is this family-wise level, default 0.05), the head prefers the
antecedent in both items of more than half the pairs, the 95% interval of
``A[pronoun, antecedent] - A[pronoun, distractor]`` lies above 0, and 2. holds.

A NaN score, interval or baseline (a target outside a layer's sliding window, or next-token
on causal attention: not measurable) never gives a role, and such a head's strongest detector is among its measured ones.

**A head's strongest detector** (:attr:`HeadRoles.heads`) is its role with the highest score, a role
other than sink where it has one (sink is the default state of most heads in Llama-family models, so a
head that is an induction head and a sink is named an induction head); for a head without a role, the
detector whose score is the largest fraction of its threshold among those whose 95% interval lies above
the uniform baseline (``ci_low`` above it by more than float rounding, :data:`UNIFORM_RTOL`), and none
(``""``, score NaN) where no interval does: a head that attends to its previous token no more than a
uniform head would is not named a weak previous-token head.

**Roles are a long table** (:attr:`HeadRoles.roles`): one row per (head, role), columns
``layer, head, name, role``; a head without a role has no row.  It is the one source of
truth; code asks it with :func:`roles_of` / :func:`heads_with_role`, and the human-readable
joined column (``"induction;sink"``) exists only as a rendering
(:func:`headlens.reports.render.tables.roles_joined`).
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headlens.analyses.heads.census_config import DEFAULT_BASELINE_FACTOR
from headlens.analyses.heads.detectors import registry
from headlens.analyses.heads.detectors.referent import referent_passes, referent_ratio
from headlens.probes.errors import InputError

log = logging.getLogger(__name__)

__all__ = [
    "default_thresholds",
    "parse_thresholds",
    "check_thresholds",
    "check_baseline_factor",
    "without_interval",
    "classify_heads",
    "HeadRoles",
    "roles_of",
    "heads_with_role",
    "roles_from_wide",
    "ROLE_COLUMNS",
    "HEAD_COLUMNS",
    "UNIFORM_RTOL",
    "DEFAULT_BASELINE_FACTOR",
]

#: The long role table: one row per (head, role).
ROLE_COLUMNS = ["layer", "head", "name", "role"]
#: A score within this fraction of its uniform baseline is the baseline (float rounding of a uniform head's mean).
UNIFORM_RTOL = 1e-6
#: The role a head's strongest detector is named after only when the head has no other role.
SINK_ROLE = "sink"
#: One row per head: its strongest detector (see :func:`classify_heads`).
HEAD_COLUMNS = ["layer", "head", "name", "strongest_detector", "strongest_score"]


@dataclass(frozen=True)
class HeadRoles:
    """What :func:`classify_heads` returns.

    ``roles``: the long table (``layer, head, name, role``; one row per (head, role), sorted by
    layer, head, role; heads without a role have no row).  ``heads``: one row per head
    (``layer, head, name, strongest_detector, strongest_score``).
    """

    roles: pd.DataFrame
    heads: pd.DataFrame


def default_thresholds() -> dict[str, float]:
    return {name: det.threshold for name, det in registry().items()}


def parse_thresholds(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """``["induction=0.4", ...]`` -> ``{"induction": 0.4}``, validated by :func:`check_thresholds`."""
    out: dict[str, float] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or not name or not value.strip():
            raise InputError(f"malformed threshold {item!r}: expected DETECTOR=VALUE, e.g. induction=0.4")
        try:
            out[name] = float(value)
        except ValueError:
            raise InputError(f"malformed threshold {item!r}: {value.strip()!r} is not a number") from None
    return check_thresholds(out)


def check_thresholds(thresholds: Mapping[str, object] | None) -> dict[str, float]:
    """The one check of detector thresholds (the CLI's ``--threshold`` and the Python calls):
    each a known detector's name with a number in (0, 1]; a one-line :class:`InputError` naming
    ``thresholds=`` otherwise."""
    if thresholds is None:
        return {}
    if not isinstance(thresholds, Mapping):
        raise InputError(
            f"thresholds= must map detector names to thresholds, e.g. {{'induction': 0.4}}; got {type(thresholds).__name__}",
            parameter="thresholds",
        )
    known = registry()
    out: dict[str, float] = {}
    for name, value in thresholds.items():
        if name not in known:
            raise InputError(f"thresholds=: unknown detector {name!r}; choose from {', '.join(known)}", parameter="thresholds")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InputError(f"thresholds=: the threshold of {name} is not a number ({value!r})", parameter="thresholds")
        t = float(value)
        if np.isnan(t) or not 0.0 < t <= 1.0:
            raise InputError(f"thresholds=: the threshold of {name} must be in (0, 1], got {t:g}", parameter="thresholds")
        out[name] = t
    return out


def check_baseline_factor(baseline_factor: object) -> float:
    """The one check of ``baseline_factor``: a number of at least 1 (a role's interval must clear the baseline)."""
    ok = isinstance(baseline_factor, numbers.Real) and not isinstance(baseline_factor, bool) and float(baseline_factor) >= 1.0
    if not ok:
        raise InputError(
            f"baseline_factor={baseline_factor!r} must be a number of at least 1"
            " (a role needs ci_low >= baseline_factor x the uniform baseline)",
            parameter="baseline_factor",
        )
    return float(baseline_factor)  # type: ignore[arg-type]  # a Real, checked above


def without_interval(scores: pd.DataFrame) -> pd.Series:
    """Rows with a measured score but no bootstrap interval (fewer than 2 prompts, or no
    resample): they cannot get a role, whatever their score."""
    return scores["score"].notna() & scores["ci_low"].isna()


def classify_heads(
    scores: pd.DataFrame,
    thresholds: Mapping[str, float] | None = None,
    *,
    baseline_factor: float = DEFAULT_BASELINE_FACTOR,
) -> HeadRoles:
    """The roles of every head (:class:`HeadRoles`): the long table, and per head its
    ``strongest_detector, strongest_score`` (the role with the highest score, other than sink where
    the head has another role, or when the head
    has no role, the detector whose score is the largest fraction of its threshold among those
    whose interval lies above their uniform baseline; ``""`` and NaN where none does: module doc)."""
    reg = registry()
    th = default_thresholds()
    th.update(check_thresholds(thresholds))
    baseline_factor = check_baseline_factor(baseline_factor)
    df = scores.copy()
    df["threshold"] = df["detector"].map(th)
    measured = df["score"].notna() & df["ci_low"].notna() & df["baseline"].notna()
    passes = measured & (df["score"] >= df["threshold"]) & (df["ci_low"] >= baseline_factor * df["baseline"])
    for name, det in reg.items():
        for stat, minimum in det.extra_thresholds.items():
            rows = df["detector"] == name
            if stat in df:
                passes &= ~rows | (df[stat].fillna(-np.inf) >= minimum)
    ref = df["detector"] == "referent"
    if ref.any():  # a significance rule, not a score threshold
        passes = (passes & ~ref) | (ref & referent_passes(df, df["threshold"], baseline_factor))
    # an interval above a uniformly attending head's score (beyond rounding): what every role needs (even at
    # baseline_factor=1, where ci_low >= baseline alone would pass a uniform head), and a role-less head's strongest detector
    df["above"] = measured & (df["ci_low"] > df["baseline"] + UNIFORM_RTOL * df["baseline"].abs())
    df["role"] = passes & df["above"]
    df["ratio"] = df["score"] / df["threshold"]
    if ref.any():  # referent: its weakest criterion's fraction of passing (1 where it just passes)
        df.loc[ref, "ratio"] = referent_ratio(df[ref], df.loc[ref, "threshold"], baseline_factor)
    heads, long = [], []
    for (layer, head), g in df.groupby(["layer", "head"], sort=True):
        name = f"{int(layer)}.{int(head)}"
        roles = g[g["role"]].sort_values("score", ascending=False)
        roles = pd.concat([roles[roles["detector"] != SINK_ROLE], roles[roles["detector"] == SINK_ROLE]])  # specific roles first
        leaning = g[g["above"]].sort_values("ratio", ascending=False, na_position="last")
        best = roles.iloc[0] if len(roles) else leaning.iloc[0] if len(leaning) else None
        heads.append(
            {
                "layer": int(layer),
                "head": int(head),
                "name": name,
                "strongest_detector": "" if best is None else str(best["detector"]),
                "strongest_score": np.nan if best is None else float(best["score"]),
            }
        )
        long += [{"layer": int(layer), "head": int(head), "name": name, "role": str(det)} for det in sorted(roles["detector"])]
    return HeadRoles(roles=pd.DataFrame(long, columns=ROLE_COLUMNS), heads=pd.DataFrame(heads, columns=HEAD_COLUMNS))


def roles_of(roles: pd.DataFrame) -> dict[tuple[int, int], frozenset[str]]:
    """``{(layer, head): {role, ...}}`` from the long table; heads without a role are absent
    (``roles_of(t).get((l, h), frozenset())``)."""
    out: dict[tuple[int, int], set[str]] = {}
    for layer, head, role in zip(roles["layer"], roles["head"], roles["role"], strict=True):
        out.setdefault((int(layer), int(head)), set()).add(str(role))
    return {k: frozenset(v) for k, v in out.items()}


def heads_with_role(roles: pd.DataFrame, role: str) -> set[str]:
    """Names (``"L.H"``) of the heads the long table gives ``role``."""
    return {
        f"{int(a)}.{int(b)}"
        for a, b in zip(roles.loc[roles["role"] == role, "layer"], roles.loc[roles["role"] == role, "head"], strict=True)
    }


def roles_from_wide(wide: pd.DataFrame) -> pd.DataFrame:
    """The long table from the one-row-per-head ``roles.csv`` that headlens wrote before the long
    table existed (a ``roles`` column of ``;``-joined detector names): the one reader of that
    old format, so old census and report folders still load."""
    log.info("reading a role table in the old one-row-per-head format (;-joined roles)")
    long = []
    for layer, head, joined in zip(wide["layer"], wide["head"], wide["roles"].fillna("").astype(str), strict=True):
        long += [
            {"layer": int(layer), "head": int(head), "name": f"{int(layer)}.{int(head)}", "role": r}
            for r in sorted(filter(None, joined.split(";")))
        ]
    return pd.DataFrame(long, columns=ROLE_COLUMNS)
