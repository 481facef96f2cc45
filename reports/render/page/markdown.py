"""``report.md``: the report's tables as GitHub Markdown, with links to the figure files.

Strings from the model or the user go through :func:`md_text`: HTML special characters are
escaped (a renderer that allows raw HTML still shows ``<script>`` as text) and so are the
characters Markdown gives meaning to (``|`` would break a table).
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import quote

from headlens.analyses.verdicts import difference_verdict, finite_float
from headlens.reports.render.design_tables import design_section_markdown
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.page.evidence_view import evidence_md
from headlens.reports.render.page.heatmaps import scored_detectors
from headlens.reports.render.page.sink_counts import sink_disagreement, sink_rate_rows
from headlens.reports.render.page.smoke import data_items, smoke_columns_note, smoke_note, smoke_where
from headlens.reports.render.tables import roles_joined
from headlens.reports.render.verdict_text import verdict_words

__all__ = ["render_markdown", "md_text"]


def md_text(value: Any) -> str:
    """Plain text for a Markdown table cell or paragraph, whatever it holds."""
    s = str(value).replace("\\", "\\\\")
    for ch in "`*_[]|#":
        s = s.replace(ch, "\\" + ch)
    return " ".join(html.escape(s, quote=False).splitlines())


def _num(x: Any, digits: int = 3, signed: bool = False) -> str:
    v = finite_float(x)
    if v is None:
        return "n/a"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Cells are Markdown already (escaped by :func:`md_text`): :func:`markdown_table` without escaping."""
    return markdown_table(rows, header, escape=False).split("\n")


def _link(path: str, label: str) -> str:
    return f"[{label}]({quote(path)})"


def _figures(report: Any, stage: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    s = report.stage(stage)
    out = []
    for f in s.files:
        if f.endswith(".png") and f not in leave_out:
            stem = f[: -len(".png")]
            fmts = [ext for ext in ("png", "svg", "pdf") if f"{stem}.{ext}" in s.files]
            out.append(f"![{md_text(stem)}]({quote(f'{stage}/{f}')})")
            out.append("")
            out.append(f"`{stage}/{stem}`: " + ", ".join(_link(f"{stage}/{stem}.{ext}", ext.upper()) for ext in fmts))
            out.append("")
    return out


def _smoke(text: str | None) -> list[str]:
    return [f"**{md_text(text)}**", ""] if text else []


def _status(report: Any, *names: str) -> list[str]:
    out = []
    for name in names:
        s = report.stage(name)
        if s.status == "failed":
            out += [f"**FAILED**: stage `{name}`: {md_text(s.error or '')}", ""]
        elif s.status == "skipped":
            out += [f"Stage `{name}` was skipped.", ""]
    return out


def render_markdown(report: Any) -> str:
    bos = bool(report.settings.get("prepend_bos", True))
    lines = [
        f"# headlens report: {md_text(report.model)}",
        "",
        f"{report.n_layers} layers x {report.n_heads} heads; BOS {'prepended' if bos else 'not prepended'}; "
        + ("quick run (smoke-test settings)." if report.settings.get("quick") else "full run."),
        "The same content, interactive, is in [report.html](report.html); reproducibility details in [manifest.json](manifest.json).",
        "",
    ]
    if report.failed:
        lines += [f"**FAILED**: {len(report.failed)} stage(s) failed: " + ", ".join(f"`{s.name}`" for s in report.failed) + ".", ""]
    lines += ["## Stages", ""]
    rows = []
    for i, s in enumerate(report.stages, start=1):
        status = {"done": "done", "loaded": "done", "skipped": "skipped"}.get(s.status, "**FAILED**: " + md_text(s.error or ""))
        rows.append([str(i), f"`{s.name}`", md_text(s.title), status, "" if s.seconds is None else f"{float(s.seconds):.1f} s"])
    lines += [*_table(["#", "stage", "what", "status", "time"], rows), ""]

    lines += ["## Heads and their roles", "", *_status(report, "census")]
    heads = report.heads
    dets, unscored = scored_detectors(report.scores)
    # the sinks stage's alpha is not here: the `sink` column is the census's score, the one the role comes from
    extra = [c for c in ("zero_delta", "mean_delta", "importance", "pruned_at") if c in heads.columns]
    lines += _smoke(smoke_columns_note(report, {c: c for c in extra}))
    if unscored:
        lines += [
            f"No head has a score for {', '.join(f'`{d}`' for d in unscored)} on this "
            "model (see the census's notes): left out of the table and the heatmaps.",
            "",
        ]
    header = ["head", "roles"] + [f"`{d}`" for d in dets] + [f"`{c}`" for c in extra]
    shown = roles_joined(report.roles, heads, sep=", ") if report.roles is not None else [""] * len(heads)
    rows = []
    for r, roles in zip(heads.to_dict("records"), shown, strict=True):
        row = [str(r["name"]), md_text(roles) or "-"]
        row += [_num(r.get(d)) for d in dets]
        for c in extra:
            if c == "pruned_at":
                v = finite_float(r.get(c))
                row.append("n/a" if v is None else f"{100 * v:.0f}%")
            else:
                row.append(_num(r.get(c), signed=c.endswith("delta")))
        rows.append(row)
    lines += [*_table(header, rows), ""]
    if dets:
        lines += [
            "Scores are means over prompts; a head gets a role when its score clears the threshold ("
            + ", ".join(f"{md_text(k)} {v:g}" for k, v in report.thresholds.items())
            + ") and the lower end of its 95% bootstrap interval is at least twice the uniform baseline. "
            "`zero_delta`/`mean_delta`: change in the metric when the head alone is "
            "ablated; `pruned_at`: fraction of heads removed when pruning took it out.",
            "",
        ]
        lines += ["### Scores with intervals", ""]
        rows = []
        for r in report.scores.to_dict("records"):
            acc = finite_float(r.get("accuracy"))
            rows.append(
                [
                    f"{int(r['layer'])}.{int(r['head'])}",
                    f"`{r['detector']}`",
                    _num(r["score"]),
                    f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]",
                    _num(r["baseline"]),
                    str(int(r["n"])),
                    "" if acc is None else f"{acc:.2f}",
                ]
            )
        lines += [
            "<details><summary>all scores</summary>",
            "",
            *_table(["head", "detector", "score", "95% CI", "uniform", "n", "accuracy"], rows),
            "",
            "</details>",
            "",
        ]
        lines += ["### Heatmaps", "", *_figures(report, "census", leave_out=tuple(f"heatmap_{d}.png" for d in unscored))]

    lines += evidence_md(report, md_text, _table)
    lines += (
        ["## Attention sinks", ""]
        + _status(report, "sinks")
        + _smoke(smoke_note(report, "sinks"))
        + ([md_text(report.sinks_note), ""] if report.sinks_note else [])
    )
    sink_rows = sink_rate_rows(report)
    if sink_rows is not None:
        eps = f"{float(report.stage('sinks').info.get('eps', 0.3)):g}"
        rows = [
            [
                r["setting"],
                r["n"],
                r["rate"],
                r["uniform_rate"],
                r["alpha"],
                r["uniform_alpha"],
                md_text(r["census_heads"]),
                r["stage_heads"],
            ]
            for r in sink_rows
        ]
        lines += [
            *_table(
                [
                    "setting",
                    "sequences",
                    "sink rate",
                    "uniform",
                    "mean alpha",
                    "uniform alpha",
                    "sink heads (census role)",
                    f"heads with alpha > {eps} on these sequences",
                ],
                rows,
            ),
            "",
        ]
        differ = sink_disagreement(report)
        lines += [md_text(differ), ""] if differ else []
        lines += _figures(report, "sinks")

    note = report.metric_note
    lines += ["## Ablation of single heads", ""] + ([md_text(note), ""] if note else [])
    for name, label in (("ablation_zero", "Zero"), ("ablation_mean", "Mean")):
        lines += [f"### {label} ablation", "", *_status(report, name), *_smoke(smoke_note(report, name))]
        table = getattr(report, name)
        if table is None:
            continue
        info = report.stage(name).info
        metric = str(table["metric"].iloc[0]) if len(table) else "metric"
        data = info.get("data") or {}
        if metric == "embedding":  # a change from the unablated model already (0 there): no unablated value
            lines += [
                "The sentence embedding's change (1 - cosine to the unablated model) over "
                f"{md_text(data.get('n_sentences', '?'))} sentences of the evaluation text. Largest first:",
                "",
            ]
        else:
            lines += [
                f"Change in {md_text(metric)} on {md_text(data.get('n_windows', '?'))} windows of "
                f"{md_text(data.get('window', '?'))} tokens of the evaluation "
                f"text ({md_text(data.get('text', 'built-in evaluation text'))}); "
                f"unablated {_num(info.get('unablated_value'), 4)}. Largest |change| first:",
                "",
            ]
        n_items, unit = data_items(info)
        smoke = report.smoke_test(name)
        up, down = (
            ("moves the embedding", "below 0")
            if metric == "embedding"
            else (f"raises the {md_text(metric)}", f"lowers the {md_text(metric)}")
        )
        top = table.reindex(table["delta"].abs().sort_values(ascending=False, kind="stable").index)
        rows = [
            [
                f"{int(r['layer'])}.{int(r['head'])}",
                _num(r["delta"], 4, signed=True),
                f"[{_num(r['ci_low'], 4, True)}, {_num(r['ci_high'], 4, True)}]",
                _num(r["value"], 4),
                verdict_words(
                    difference_verdict(r["ci_low"], r["ci_high"], n_items=n_items, smoke=smoke), above=up, below=down, items=unit
                ),
            ]
            for r in top.to_dict("records")
        ]
        lines += [*_table(["head", "change", "95% CI", "ablated value", "reading"], rows), "", *_figures(report, name)]

    lines += ["## Pruning curve", "", *_status(report, "pruning"), *_smoke(smoke_note(report, "pruning"))]
    if report.pruning_curve is not None:
        info = report.stage("pruning").info
        embedding = info.get("metric") == "embedding"
        how = "exact single-head ablation importance" if embedding else "gradient importance (Michel et al. 2019)"
        within = (
            f"an embedding change of at most {float(info.get('max_increase') or 0):g}"
            if embedding
            else f"+{100 * float(info.get('max_increase') or 0):.0f}%"
        )
        metric_name = "embedding change" if embedding else md_text(info.get("metric", "loss"))
        removable = f"{100 * float(info.get('removable_fraction') or 0):.0f}%"
        lines += [
            f"Iterative pruning by {how} against {md_text(info.get('random_seeds', '?'))} random orders; "
            f"unablated {metric_name} {_num(info.get('unablated_value'), 4)}; removable within {within}: "
            + (f"{removable} of heads (smoke test: no finding)." if report.smoke_test("pruning") else f"**{removable}** of heads."),
            "",
        ]
        rows = []
        for r in report.pruning_curve.to_dict("records"):
            removed = r.get("removed_this_step")
            rnd = "n/a" if finite_float(r["random_mean"]) is None else f"{_num(r['random_mean'], 4)} +/- {_num(r['random_std'], 4)}"
            change = _num(r["relative_change"], 4, signed=True) if embedding else f"{100 * float(r['relative_change']):+.1f}%"
            rows.append(
                [
                    str(int(r["step"])),
                    str(int(r["n_removed"])),
                    f"{100 * float(r['fraction_removed']):.0f}%",
                    _num(r["value"], 4),
                    change,
                    rnd,
                    f"{int(r['kv_bytes_saved_per_1k_tokens']):,}",
                    md_text(removed if isinstance(removed, str) else ""),
                ]
            )
        lines += [
            *_table(
                [
                    "step",
                    "removed",
                    "fraction",
                    "value",
                    "change",
                    "random order",
                    "KV bytes saved / 1k tokens",
                    "heads removed at this step",
                ],
                rows,
            ),
            "",
            *_figures(report, "pruning"),
        ]

    lines += _design(report)
    lines += ["## Example prompts", "", *_status(report, "examples")]
    for i, e in enumerate(report.examples, start=1):
        lines.append(f"{i}. {md_text(e.prompt)} ({len(e.tokens)} tokens{', cut' if e.truncated else ''})")
    lines += [
        "",
        "Their attention patterns, head by head, are in report.html (`examples/patterns.npz`: `[layer, head, query, key]` per prompt).",
        "",
    ]
    lines += [
        "## Manifest",
        "",
        "<details><summary>manifest.json (summary)</summary>",
        "",
        "```json",
        json.dumps(_manifest_summary(report.manifest), indent=2, default=str)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("`", "\\u0060"),
        "```",
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def _design(report: Any) -> list[str]:
    """The design stage's section (:func:`headlens.reports.render.design_tables.design_section_markdown`)."""
    out = ["## Design questions", "", *_status(report, "design")]
    if report.design is not None:
        smoke = smoke_where(report, "design") if report.smoke_test("design") else None
        n_items = data_items(report.stage("design").info)[0]
        out += design_section_markdown(
            report.design,
            heading=None,
            figure=quote("design/gqa_loss_vs_cache.png") if "gqa_summary" in report.design else None,
            n_items=n_items,
            smoke=smoke,
        ).split("\n")
    return out


def _manifest_summary(manifest: dict[str, Any]) -> dict[str, Any]:
    keep = ("headlens_version", "created_utc", "command", "model", "prepend_bos", "seed", "dtype", "device", "versions")
    out = {k: manifest[k] for k in keep if k in manifest}
    smoke = (manifest.get("report") or {}).get("smoke_test")
    if smoke:
        out["smoke_test"] = smoke
    return out
