"""Console lines and files of ``headlens patch``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headlens.reports.render.tables import write_table
from headlens.reports.render.verdict_text import rank_test_words

if TYPE_CHECKING:
    from headlens.analyses.patching.activation import PatchRun

__all__ = ["write_tables", "patch_lines", "gap_line", "top_lines", "path_lines", "agreement_lines", "dla_lines"]


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    return [
        write_table(df, out / f"{name}.csv")
        for name, df in tables.items()  # every float in its shortest exact form
    ]


def gap_line(d: dict[str, Any]) -> str:
    """The clean/corrupted line of a gap (``Gap.describe()``, the manifest's ``patching.gap``)."""
    base = f"{d['metric']}: clean {d['clean']:.3f}, corrupted {d['corrupt']:.3f} over {d['n_pairs']} pairs"
    if d.get("undefined_reason") is None:
        interval = f"95% CI {d['gap_low']:.3f} .. {d['gap_high']:.3f}"
        return f"{base}; gap {d['gap']:.3f} ({interval}); effects are normalised: 0 = corrupted, 1 = clean"
    return f"{base}; normalised effects are NOT reported: {d['undefined_reason']}"


def _ci(row: pd.Series, col: str) -> str:
    lo, hi = row.get(f"{col}_low", np.nan), row.get(f"{col}_high", np.nan)
    return f"{row[col]:+.3f} [{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) else f"{row[col]:+.3f}"


def top_lines(table: pd.DataFrame, column: str, k: int = 5) -> list[str]:
    """The ``k`` heads (or head-positions) that matter most in ``column``: the largest absolute
    effect for denoising and attribution, the farthest from 1 (clean) for noising."""
    if column not in table or table[column].isna().all():
        return []
    values = table[column].to_numpy(float)
    order = np.argsort(-np.abs(1.0 - values if column == "noising" else values), kind="stable")[:k]
    where = lambda r: f"{r['name']}" + (f" pos {int(r['pos'])}" if "pos" in r else "")  # noqa: E731
    return [f"  {where(table.iloc[i]):>12}  {_ci(table.iloc[i], column)}" for i in order]


def path_lines(table: pd.DataFrame, k: int = 5) -> list[str]:
    if table["effect"].isna().all():
        return []
    order = np.argsort(-np.abs(table["effect"].to_numpy(float)), kind="stable")[:k]
    return [f"  {r['sender']:>6} -> {r['receiver']} ({r['receiver_input']})  {_ci(r, 'effect')}" for r in (table.iloc[i] for i in order)]


def agreement_lines(agree: dict[str, Any]) -> list[str]:
    """The attribution's agreement with exact denoising (its run's ``info['agreement_with_exact']``,
    :func:`headlens.analyses.patching.attribution.agreement`): the overlap beside its chance level,
    the largest disagreement and the heads the estimate misses."""
    head = (
        f"attribution patching (first-order estimate, not exact) vs exact denoising over {agree['n_heads']} heads: "
        f"Spearman {agree['spearman']:.3f}{rank_test_words(agree.get('spearman_p'))},"
        f" top-{agree['top_k']} overlap {agree['top_k_overlap']:.0%}"
    )
    if not agree.get("n_heads"):
        return [
            "attribution patching (first-order estimate, not exact): no head has both an estimate and an exact effect"
            " (the normalised effects are undefined), so no agreement is reported"
        ]
    if "top_k_chance" not in agree:  # a manifest written before the chance level was recorded
        return [head]
    k, p = agree["top_k"], agree["top_k_p_chance"]
    chance = f"{agree['top_k_chance']:.0%} by chance; random top-{k} sets overlap at least this much with P = {p:.3g}"
    lines = [f"{head} ({chance})" if agree["above_chance"] else f"{head}, no better than chance ({chance})"]
    worst = agree.get("largest_disagreement")
    if worst:
        missed = ", ".join(agree["missed"]) or "none"
        lines.append(
            f"  largest disagreement {worst['head']}: estimate {worst['estimate']:+.3f}, exact {worst['exact']:+.3f}"
            f" (|difference| {worst['abs_difference']:.3f}); of the exact top {agree['top_k']} the estimate misses {missed}"
        )
    return lines


def dla_lines(table: pd.DataFrame, k: int = 5) -> list[str]:
    heads = table[table["kind"] == "head"]
    order = np.argsort(-np.abs(heads["dla"].to_numpy(float)), kind="stable")[:k]
    return [f"  {heads.iloc[i]['component']:>6}  {heads.iloc[i]['dla']:+.3f} (sd {heads.iloc[i]['dla_sd']:.3f})" for i in order]


def patch_lines(
    patching: PatchRun,
    directions: Sequence[str],
    *,
    agreement: dict[str, Any] | None = None,
    path: pd.DataFrame | None = None,
    dla: pd.DataFrame | None = None,
) -> list[str]:
    """What ``headlens patch`` prints about its runs: the gap, the attribution's agreement (``agreement``),
    the strongest heads per direction of ``patching``, paths (``path``: path patching's table) and DLA (``dla``'s table)."""
    lines = [gap_line(patching.gap.describe())]
    if agreement is not None:
        lines += agreement_lines(agreement)
    for col in directions:
        top = top_lines(patching.table, col)
        if top:
            lines.append(f"strongest {col} heads (effect [95% CI]{'; 1 = the head is not needed' if col == 'noising' else ''}):")
            lines += top
    if path is not None:
        top = path_lines(path)
        if top:
            lines.append("strongest paths (effect [95% CI]):")
            lines += top
    if dla is not None:
        lines.append("direct logit attribution, largest heads (mean over pairs):")
        lines += dla_lines(dla)
    return lines
