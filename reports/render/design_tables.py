"""Text of the design questions (``headlens kv``/``gqa``/``projections`` and the report's design section):
Markdown summaries, the plain-language readings and terminal tables.  No computing here: the
numbers come from :mod:`headlens.analyses.design`."""

from __future__ import annotations

import html
import logging
from typing import Any

from headlens.analyses.verdicts import NO_FINDING, SMOKE, Verdict, difference_verdict
from headlens.reports.render.markdown import markdown_cell, markdown_table
from headlens.reports.render.verdict_text import smoke_sentence, verdict_words

__all__ = ["text_table", "with_basis", "gqa_markdown", "gqa_reading", "knockout_reading", "projections_markdown", "design_section_markdown"]

log = logging.getLogger(__name__)


def text_table(table: Any) -> str:
    """A table as plain text for the terminal (4 significant digits)."""
    return table.to_string(index=False, float_format=lambda x: f"{x:.4g}")


def with_basis(markdown: str, basis: str) -> str:
    """``markdown`` with the line saying what the loss is measured on (``basis``) after its title."""
    title, sep, rest = markdown.partition("\n\n")
    return f"{title}{sep}Loss on {basis}.\n\n{rest}" if sep else f"{markdown}\nLoss on {basis}.\n"


def gqa_markdown(res: Any, model_name: str, *, figure: str | None = None, n_items: int | None = None) -> str:
    """Markdown of a GQA what-if: the loss/cache table, the groups, the heads that move most, the
    reading (``n_items``: the evaluation windows, for :func:`gqa_reading`)."""
    s = res.summary
    lines = [
        f"# GQA what-if: {model_name}",
        "",
        "K and V of the KV heads in a group mean-pooled in every layer (no retraining); loss on text windows; JS = Jensen-Shannon "
        "divergence (bits) between each head's original and pooled attention rows, mean over queries.",
        "",
    ]
    lines += [markdown_table(s, floatfmt=".4g"), ""]
    if figure:
        lines += [f"![loss vs KV cache]({figure})", ""]
    lines += ["## Groups", "", markdown_table(res.groups), ""]
    top = res.heads.sort_values("js", ascending=False).head(8)
    lines += ["## Heads whose pattern moves most", "", markdown_table(top, floatfmt=".3f"), ""]
    if res.task is not None:
        lines += ["## Task metric", "", markdown_table(res.task, floatfmt=".4g"), ""]
    if res.comparison is not None:
        lines += ["## Similarity vs adjacent grouping (paired over windows)", "", markdown_table(res.comparison, floatfmt=".4f"), ""]
    lines += ["## Reading", "", *gqa_reading(s, res.comparison, n_items=n_items), ""]
    return "\n".join(lines)


def gqa_reading(s: Any, comparison: Any = None, *, n_items: int | None = None, smoke: bool = False) -> list[str]:
    """One line per group size: each grouping's loss change with its interval, and similar minus
    adjacent, each worded by :func:`headlens.analyses.verdicts.difference_verdict` (``n_items``:
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


def projections_markdown(losses: Any, roles: Any | None, model_name: str, *, figure: str | None = None) -> str:
    """Markdown of a projection knockout run: the loss table, the role changes, the reading."""
    lines = [
        f"# Projection knockout: {model_name}",
        "",
        "One layer at a time: queries from the key projection (q=k), values from the key projection (v=k), or both (q=k=v); loss on text "
        "windows.",
        "",
    ]
    lines += [markdown_table(losses, floatfmt=".4g"), ""]
    if figure:
        lines += [f"![knockout loss change]({figure})", ""]
    if roles is not None:
        lines += ["## Roles on the census (heads whose roles change)", "", markdown_table(roles[roles["kind"] != "none"]), ""]
    lines += ["## Reading", "", *knockout_reading(losses, roles), ""]
    return "\n".join(lines)


def design_section_markdown(
    tables: dict[str, Any],
    *,
    heading: str | None = "## Design questions",
    figure: str | None = None,
    n_items: int | None = None,
    smoke: str | None = None,
) -> str:
    """Markdown of :func:`headlens.analyses.design.section.design_section_tables` (the report's
    design section; ``heading`` None leaves the title to the caller, ``figure`` links the
    loss-vs-cache image).  Parts not run are listed with their reason (HTML-escaped).
    ``n_items``: the windows the intervals come from; ``smoke``: on what a ``--quick`` run ran
    (e.g. ``"2 windows of 32 tokens"``): the section is marked a smoke test and states no finding."""
    lines = [heading, ""] if heading else []
    if smoke:
        lines += [f"**{smoke_sentence(smoke)}**", ""]
    for r in tables["skipped"].itertuples(index=False) if "skipped" in tables else []:
        lines.append(f"- {markdown_cell(r.part)}: not run ({html.escape(markdown_cell(r.reason), quote=False)})")
    if lines and lines[-1] != "":
        lines.append("")
    if "kv" in tables:
        lines += ["### KV cache", "", markdown_table(tables["kv"], floatfmt=".3g"), ""]
    if "gqa_summary" in tables:
        lines += ["### GQA what-if (K/V mean-pooled, no retraining)", "", markdown_table(tables["gqa_summary"], floatfmt=".4g"), ""]
        if figure:
            lines += [f"![loss vs KV cache]({figure})", ""]
        lines += [*gqa_reading(tables["gqa_summary"], tables.get("gqa_comparison"), n_items=n_items, smoke=bool(smoke)), ""]
    if "knockout_losses" in tables:
        roles = tables.get("knockout_roles")
        lines += [
            "### Projection knockout",
            "",
            markdown_table(tables["knockout_losses"], floatfmt=".4g"),
            "",
            *knockout_reading(tables["knockout_losses"], roles, n_items=n_items, smoke=bool(smoke)),
            "",
        ]
    return "\n".join(lines)
