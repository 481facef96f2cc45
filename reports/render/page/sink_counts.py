"""Which heads are sink heads: the one answer the page and the Markdown give.

Two stages measure the same Gu et al. alpha (mean attention to the first position) on
different text, so a head near the threshold can land on either side:

* the **census** (its ``sink`` detector, on windows of natural text, ~100 prompts) gives the
  **sink role**: score at least the threshold and the lower end of its 95% interval at least
  twice the uniform baseline.  This is the source of truth: the role table, the heatmaps'
  outlines and the stdout role list all read it;
* the **sinks stage** measures alpha on its own sequences (8 under ``--quick``), both BOS
  settings, and counts heads with mean alpha > eps, without an interval.  Its count is shown
  labelled as that ("alpha > 0.3 on these 8 sequences"), beside the census's role count, and
  the heads on which the two disagree are listed with both numbers.
"""

from __future__ import annotations

import logging

from headlens.reports.render.page.report_view import ReportView
from headlens.reports.render.page.values import finite, num

log = logging.getLogger(__name__)

__all__ = ["census_sink_heads", "sink_rate_rows", "sink_disagreement", "CENSUS_RULE"]

CENSUS_RULE = (
    "the census's sink role: alpha on its natural-text windows at least the threshold, "
    "and the lower end of its 95% interval at least twice the uniform baseline"
)


def census_sink_heads(report: ReportView) -> list[str] | None:
    """Names of the heads the census gives the sink role, in layer-head order; None when the
    census did not finish or has no sink detector."""
    if report.roles is None or report.scores is None or "sink" not in set(report.scores["detector"]):
        return None
    rows = report.roles[report.roles["role"] == "sink"].sort_values(["layer", "head"])
    return [f"{int(a)}.{int(b)}" for a, b in zip(rows["layer"], rows["head"], strict=True)]


def _census_bos(report: ReportView) -> bool:
    return bool(report.settings.get("prepend_bos", True))


def sink_rate_rows(report: ReportView) -> list[dict[str, str]] | None:
    """The sinks table's rows: the sinks stage's figures, its own count labelled as such, and the
    census's sink-role count on the row of the census's BOS setting."""
    if report.sink_rates is None:
        return None
    census = census_sink_heads(report)
    rows = []
    for d in report.sink_rates.to_dict("records"):
        bos = bool(d["bos"])
        n_heads = int(d["n_heads"])
        if census is None or bos != _census_bos(report):
            role = "not measured" if census is not None else "n/a"
        else:
            role = f"{len(census)} of {n_heads}" + (f" ({', '.join(census)})" if census else "")
        rows.append(
            {
                "setting": "with BOS" if bos else "no BOS",
                "n": str(int(d["n_sequences"])),
                "rate": num(d["sink_rate"]),
                "uniform_rate": num(d["uniform_sink_rate"]),
                "alpha": num(d["mean_alpha"]),
                "uniform_alpha": num(d["uniform_alpha"]),
                "stage_heads": f"{int(d['n_sink_heads'])} of {n_heads}",
                "census_heads": role,
            }
        )
    return rows


def sink_disagreement(report: ReportView) -> str | None:
    """A sentence naming the heads on which the census's sink role and the sinks stage's
    ``alpha > eps`` disagree, with both alphas; None when they agree (or one is missing)."""
    census = census_sink_heads(report)
    if census is None or report.sinks is None or report.scores is None:
        return None
    bos = _census_bos(report)
    stage = report.sinks[report.sinks["bos"].astype(bool) == bos]
    if not len(stage):
        return None
    eps = float(report.stage("sinks").info.get("eps", 0.3))
    alpha = {f"{int(a)}.{int(b)}": float(v) for a, b, v in zip(stage["layer"], stage["head"], stage["alpha_mean"], strict=True)}
    scores = report.scores[report.scores["detector"] == "sink"]
    score = {f"{int(a)}.{int(b)}": v for a, b, v in zip(scores["layer"], scores["head"], scores["score"], strict=True)}
    stage_heads = {name for name, a in alpha.items() if a > eps}
    differ = sorted(set(census) ^ stage_heads, key=lambda n: tuple(int(x) for x in n.split(".")))
    if not differ:
        return None
    parts = [
        f"{name}: census alpha {num(score.get(name))} "
        f"({'sink role' if name in census else 'no sink role'}), sinks stage alpha {num(alpha.get(name))}"
        for name in differ
    ]
    n_census = int(scores["n"].max()) if "n" in scores and finite(scores["n"].max()) is not None else None
    n_stage = int(report.sink_rates["n_sequences"].iloc[0]) if report.sink_rates is not None and len(report.sink_rates) else None
    return (
        f"The sink heads are the census's ({CENSUS_RULE}; {n_census or '?'} prompts). The sinks stage measures the same alpha on its own "
        f"{n_stage or '?'} sequences and counts mean alpha > {eps:g} without "
        "an interval, so a head near the threshold can fall on either side. "
        f"They differ on {'; '.join(parts)}."
    )
