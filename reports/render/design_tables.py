"""Text of the design questions (``headlens kv``/``gqa``/``projections`` and the report's design section):
Markdown summaries, the plain-language readings and terminal tables.  No computing here: the
numbers come from :mod:`headlens.analyses.design`."""

from __future__ import annotations

import html
import logging
from typing import Any

from headlens.analyses.measure.verdicts import NO_FINDING, SMOKE, Verdict, difference_verdict
from headlens.reports.render.markdown import markdown_cell, markdown_table
from headlens.reports.render.page.md_templates import md_environment
from headlens.reports.render.verdict_text import smoke_sentence, verdict_words

__all__ = [
    "text_table",
    "gqa_markdown",
    "gqa_reading",
    "knockout_reading",
    "projections_markdown",
    "design_section_markdown",
    "design_section_view",
]

log = logging.getLogger(__name__)


def text_table(table: Any) -> str:
    """A table as plain text for the terminal (4 significant digits)."""
    return table.to_string(index=False, float_format=lambda x: f"{x:.4g}")


def gqa_markdown(res: Any, model_name: str, *, basis: str, figure: str | None = None, n_items: int | None = None) -> str:
    """``summary.md`` of a GQA what-if (``templates/summaries/gqa.md.j2``): the loss/cache table, the groups, the
    heads that move most, the reading (``basis``: what the loss is measured on; ``n_items``: the evaluation windows,
    for :func:`gqa_reading`)."""
    return (
        md_environment()
        .get_template("summaries/gqa.md.j2")
        .render(
            model=model_name,
            basis=basis,
            summary=markdown_table(res.summary, floatfmt=".4g"),
            figure=figure,
            groups=markdown_table(res.groups),
            heads=markdown_table(res.heads.sort_values("js", ascending=False).head(8), floatfmt=".3f"),
            task=None if res.task is None else markdown_table(res.task, floatfmt=".4g"),
            comparison=None if res.comparison is None else markdown_table(res.comparison, floatfmt=".4f"),
            reading=gqa_reading(res.summary, res.comparison, n_items=n_items),
        )
    )


def gqa_reading(s: Any, comparison: Any = None, *, n_items: int | None = None, smoke: bool = False) -> list[str]:
    """One line per group size: each grouping's loss change with its interval, and similar minus
    adjacent, each worded by :func:`headlens.analyses.measure.verdicts.difference_verdict` (``n_items``:
    the windows the intervals come from; ``smoke``: a ``--quick`` run, which states no finding)."""
    out = []
    comp = {} if comparison is None else {int(r.g): r for r in comparison.itertuples(index=False)}

    def words(low: Any, high: Any, *, above: str, below: str, versus: str = "0") -> str:
        return verdict_words(difference_verdict(low, high, n_items=n_items, smoke=smoke), above=above, below=below, versus=versus)

    for g, rows in s[s["grouping"] != "original"].groupby("g"):
        by = {r.grouping: r for r in rows.itertuples(index=False)}
        first = rows.iloc[0]
        line = f"- g={g} ({first.kv_saved:.0%} of the cache saved): loss change " + ", ".join(
            f"{r.loss_change:+.4f} [{r.change_ci_low:+.4f}, {r.change_ci_high:+.4f}] {name} "
            f"({words(r.change_ci_low, r.change_ci_high, above='raises the loss', below='lowers the loss')})"
            for name, r in by.items()
        )
        c = comp.get(int(g))
        if c is not None:
            if c.same_groups:
                line += ": both groupings chose the same groups"
            else:
                verdict = words(
                    c.ci_low, c.ci_high, above="similarity grouping loses more", below="similarity grouping loses less", versus="adjacent"
                )
                line += f"; similar minus adjacent {c.similar_minus_adjacent:+.4f} [{c.ci_low:+.4f}, {c.ci_high:+.4f}]: {verdict}"
        out.append(line + f" (95% bootstrap intervals over {'' if n_items is None else f'{n_items} '}windows).")
    return out


def knockout_reading(losses: Any, roles: Any | None, *, n_items: int | None = None, smoke: bool = False) -> list[str]:
    """A few lines saying what each whole-layer knockout did to the loss and to the roles
    (``smoke``: a ``--quick`` run, each loss change marked as stating no finding, from ``n_items`` windows)."""
    out = []
    whole = losses[(losses["head"] == -1) & (losses["kind"] != "none")]
    mark = f", {verdict_words(Verdict(kind=NO_FINDING, why=SMOKE, n_items=n_items), above='', below='')}" if smoke else ""
    for r in whole.sort_values("loss_change", ascending=False).itertuples(index=False):
        line = f"- layer {r.layer}, {r.kind}: loss {r.loss_change:+.4f} nats ({r.relative_change:+.1%}){mark}"
        if roles is not None:
            ch = roles[(roles["knocked_layer"] == r.layer) & (roles["kind"] == r.kind)]
            lost = [f"{x.layer}.{x.head} {x.lost}" for x in ch.itertuples(index=False) if x.lost]
            gained = [f"{x.layer}.{x.head} {x.gained}" for x in ch.itertuples(index=False) if x.gained]
            line += "; roles lost: " + (", ".join(lost) or "none") + "; gained: " + (", ".join(gained) or "none")
        out.append(line)
    if roles is not None:
        prev = roles[(roles["kind"].isin(["q=k", "q=k=v"])) & roles["lost"].str.contains("previous_token")]
        if len(prev):
            out.append(
                "- Tied Q = K makes scores symmetric (s_ij = s_ji): a head can no longer prefer the previous token by what it matches, "
                "so previous-token roles go, and heads that read them (induction) lose what they key on."
            )
    return out


def projections_markdown(losses: Any, roles: Any | None, model_name: str, *, basis: str, figure: str | None = None) -> str:
    """``summary.md`` of a projection knockout run (``templates/summaries/projections.md.j2``): the loss table,
    the role changes, the reading (``basis``: what the loss is measured on)."""
    return (
        md_environment()
        .get_template("summaries/projections.md.j2")
        .render(
            model=model_name,
            basis=basis,
            losses=markdown_table(losses, floatfmt=".4g"),
            figure=figure,
            roles=None if roles is None else markdown_table(roles[roles["kind"] != "none"]),
            reading=knockout_reading(losses, roles),
        )
    )


def design_section_view(
    tables: dict[str, Any],
    *,
    heading: str | None = "## Design questions",
    figure: str | None = None,
    n_items: int | None = None,
    smoke: str | None = None,
) -> dict[str, Any]:
    """What ``summaries/design.md.j2``'s ``design_section`` shows of
    :func:`headlens.analyses.design.section.design_section_tables` (the report's design section;
    ``heading`` None leaves the title to the caller, ``figure`` links the loss-vs-cache image).  Parts
    not run are listed with their reason (HTML-escaped).  ``n_items``: the windows the intervals come
    from; ``smoke``: on what a ``--quick`` run ran (e.g. ``"2 windows of 32 tokens"``): the section
    is marked a smoke test and states no finding."""
    skipped = tables["skipped"].itertuples(index=False) if "skipped" in tables else []
    gqa, knockout = tables.get("gqa_summary"), tables.get("knockout_losses")
    return {
        "heading": heading,
        "smoke": smoke_sentence(smoke) if smoke else None,
        "skipped": [(markdown_cell(r.part), html.escape(markdown_cell(r.reason), quote=False)) for r in skipped],
        "kv": markdown_table(tables["kv"], floatfmt=".3g") if "kv" in tables else None,
        "gqa": None if gqa is None else markdown_table(gqa, floatfmt=".4g"),
        "figure": figure,
        "gqa_reading": [] if gqa is None else gqa_reading(gqa, tables.get("gqa_comparison"), n_items=n_items, smoke=bool(smoke)),
        "knockout": None if knockout is None else markdown_table(knockout, floatfmt=".4g"),
        "knockout_reading": []
        if knockout is None
        else knockout_reading(knockout, tables.get("knockout_roles"), n_items=n_items, smoke=bool(smoke)),
    }


def design_section_markdown(tables: dict[str, Any], **view: Any) -> str:
    """The design section as Markdown (the report's design stage's ``summary.md``): :func:`design_section_view`
    (same keywords) rendered by ``summaries/design_section.md.j2``."""
    return md_environment().get_template("summaries/design_section.md.j2").render(design=design_section_view(tables, **view))
