"""Writing a :class:`~headlens.analyses.sinks.study.SinksRun`: CSV tables and a short Markdown summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.tables import write_table

__all__ = ["write_tables", "summary_markdown", "seed_text_lines", "sinks_loss_notes", "FEW_SEQUENCES", "NEAR_CHANCE", "DEFINITIONS_PAGE"]

#: Windowed attention on fewer sequences than this (no interval) is flagged as one measurement.
FEW_SEQUENCES = 20
#: A loss above this share of log(vocabulary) is flagged: the model is near chance on the text.
NEAR_CHANCE = 0.8
#: Where the definitions of the sinks study live (the docs page, not the source).
DEFINITIONS_PAGE = "docs/studies/sinks.md (and docs/methods.md)"


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path) -> list[Path]:
    """Each table as ``OUT/<name>.csv`` (written atomically)."""
    out = Path(out_dir)
    return [
        write_table(df, out / f"{name}.csv")
        for name, df in tables.items()  # every float in its shortest exact form
    ]


def _bos(bos: Any) -> str:
    return "BOS" if bool(bos) else "no BOS"


def _md(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub Markdown table: :func:`headlens.reports.render.markdown.markdown_table` (cells escaped)."""
    return markdown_table(df, floatfmt=floatfmt)


def seed_text_lines(table: pd.DataFrame, top: int | None) -> list[str]:
    """Console lines for the seed measurement: per BOS setting, the strongest heads first."""
    lines = []
    for bos, sub in table.groupby("bos", sort=False):
        first = sub.iloc[0]
        n = int(first["n_tokens"])
        lines.append(
            f"{_bos(bos)}: {n} tokens, first {first['first_token']!r}, last {first['last_token']!r}; uniform attention gives 1/{n} = "
            f"{1 / n:.1%}"
        )
        lines.append(f"{'head':>6} {'last->first':>12} {'1/n':>7} {'ratio':>7}")
        shown = sub if top is None else sub.head(top)
        for r in shown.itertuples():
            lines.append(f"{r.layer:>3}.{r.head:<2} {r.attn_last_to_first:>12.1%} {r.uniform:>7.1%} {r.ratio:>6.2f}x")
        if top is not None and len(sub) > top:
            lines.append(f"... {len(sub) - top} more heads (--top to show them)")
    return lines


def sinks_loss_notes(tables: dict[str, pd.DataFrame], info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(lines, warnings)`` on the losses of sink removal and windowed attention: which text they
    were measured on; windowed attention resting on fewer than :data:`FEW_SEQUENCES` sequences with
    no interval; a full-attention loss near chance (above :data:`NEAR_CHANCE` x log(vocabulary))."""
    if "removal" not in tables and "windowed" not in tables:
        return [], []
    lines: list[str] = []
    warnings: list[str] = []
    text = info.get("text") or {}
    if text:
        lines.append(f"losses (sink removal, windowed attention) measured on the {text.get('label')} ({text.get('why')})")
    vocab = info.get("vocab_size")
    chance = math.log(vocab) if isinstance(vocab, int) and vocab > 1 else None
    base = pd.concat(
        [t[t["removed"] == "none"] for t in [tables.get("removal")] if t is not None]
        + [t[t["full_attention"]] for t in [tables.get("windowed")] if t is not None]
    )
    if chance is not None and len(base) and float(base["loss"].min()) > NEAR_CHANCE * chance:
        warnings.append(
            f"the unablated loss ({float(base['loss'].min()):.2f} nats or more) is near chance (log of the vocabulary: {chance:.2f}):"
            " the model barely predicts this text, so the removal and windowed deltas say little about what the sink does"
        )
    if "windowed" in tables:
        w = tables["windowed"]
        for bos, n in (info.get("n_long_sequences") or {}).items():
            if int(n) < FEW_SEQUENCES:
                length = int(w["seq_tokens"].iloc[0]) if len(w) else 0
                warnings.append(
                    f"windowed attention ({bos}) rests on {n} sequence{'s' if int(n) != 1 else ''} of {length} tokens, with no interval:"
                    " one measurement, not an estimate (more with --n-long)"
                )
    return lines, warnings


def _frame_text(framing: dict[str, Any]) -> str:
    for f in framing.values():
        if f.get("prefix") or f.get("suffix"):
            return " ".join([*f.get("prefix", []), "text", *f.get("suffix", [])])
    return "text"


def _target_lines(report: Any) -> list[str]:
    """The sink-targets section: per BOS setting, a per-layer table of attention shares."""
    t = report.tables["sink_targets_by_layer"]
    info = report.info.get("sink_targets") or {}
    out = [
        "",
        "## Where the sink sits: first position, suffix, punctuation",
        "",
        "Attention share of each key group (sum over its keys of A[i, j]), averaged over the queries that can see the group,"
        " per sequence, then over sequences; the mean and the strongest head of each layer, beside a uniform head's share."
        " `sink_on`: the group whose mean share exceeds its uniform share the most. Clark et al. (2019) report BERT's"
        " attention to [CLS], [SEP] and punctuation this way.",
    ]
    for bos, sub in t.groupby("bos", sort=False):
        about = info.get(_bos(bos), {})
        suffix = ", ".join(about.get("suffix") or []) or "none"
        punct = " ".join(about.get("punctuation") or []) or "none"
        out += [
            "",
            f"{_bos(bos)}: first position = {about.get('first', 'position 0')}; suffix = {suffix}; punctuation tokens: {punct}.",
            "",
        ]
        cols = ["layer"]
        for g in ("first", "suffix", "punctuation"):
            if sub[f"{g}_mean"].notna().any():
                cols += [f"{g}_mean", f"{g}_max", f"{g}_uniform"]
        cols.append("sink_on")
        out.append(_md(sub[cols]))
    return out


def summary_markdown(report: Any, *, model_name: str, figures: Sequence[Path] = ()) -> str:
    """A short Markdown summary of a :class:`~headlens.analyses.sinks.study.SinksRun`."""
    cfg = report.config
    t = report.tables
    out = [f"# Attention sinks: {model_name}", ""]
    framing = report.info.get("framing") or {}
    framed = next((f for f in framing.values() if f.get("suffix")), None)  # an encoder's [CLS] ... [SEP]
    included = (
        f"{' and '.join([*framed.get('prefix', []), *framed['suffix']])} included when framed" if framed else "BOS included when prepended"
    )
    out.append(
        f"Gu et al. (2024) sink metric: alpha = mean over queries of the attention to position 0, per sequence and head; "
        f"a (sequence, head) sinks when alpha > eps = {cfg.eps:g}. Stimuli: {report.info.get('stimuli', '')}, "
        f"{cfg.window} tokens per sequence ({included}), "
        + ", ".join(f"{n} sequences {k}" for k, n in report.info.get("n_sequences", {}).items())
        + "."
    )
    if framed:
        out += ["", "With BOS here means with the model's framing: each sequence is " + _frame_text(framing) + "."]
    notes = report.info.get("window_notes") or []
    if notes:
        out += ["", "## Sliding windows", ""] + [f"- {n}" for n in notes]
    notes = report.info.get("attention_notes") or []
    if notes:
        out += ["", "## Bidirectional attention", ""] + [f"- {n}" for n in notes]
    out += ["", "## Sink rate, beside uniform attention", ""]
    rates = t["sink_rates"].copy()
    rates["bos"] = rates["bos"].map(_bos)
    out.append(
        _md(rates[["bos", "n_sequences", "sink_rate", "uniform_sink_rate", "mean_alpha", "uniform_alpha", "n_sink_heads", "n_heads"]])
    )
    for r in t["sink_rates"].itertuples():
        if r.uniform_alpha > cfg.eps:
            out += [
                "",
                f"**Note ({_bos(r.bos)}):** uniform attention itself is above eps here (alpha {r.uniform_alpha:.3f} > {cfg.eps:g}): the "
                "sequences are too short for the metric; Gu et al. use 64 tokens.",
            ]
    census = t["census"]
    for bos in cfg.bos:
        sinks = census[(census["bos"] == bos) & census["is_sink"]].sort_values("alpha_mean", ascending=False)
        names = ", ".join(
            f"{r.layer}.{r.head} ({r.alpha_mean:.2f}, {r.alpha_over_uniform:.1f}x uniform)" for r in sinks.head(20).itertuples()
        )
        more = f" and {len(sinks) - 20} more" if len(sinks) > 20 else ""
        out += ["", f"Sink heads ({_bos(bos)}, mean alpha > {cfg.eps:g}): {names or 'none'}{more}."]
    if "sink_targets_by_layer" in t and len(t["sink_targets_by_layer"]):
        out += _target_lines(report)
    if "content_verdicts" in t:
        out += ["", "## Position or content (first token varied)", ""]
        c = t["content"]
        per_variant = (
            c.groupby("variant", observed=True)
            .agg(
                sink_rate=("sink_rate", "mean"),
                mean_alpha=("alpha_first", "mean"),
                heads_sinking=("alpha_first", lambda s: int((s > cfg.eps).sum())),
            )
            .reset_index()
        )
        out.append(_md(per_variant))
        skipped_variants = report.info.get("skipped_variants") or {}
        if skipped_variants:
            out += ["", "Variants not run: " + "; ".join(f"`{k}` ({why})" for k, why in skipped_variants.items()) + "."]
        v = t["content_verdicts"]
        v = v[v["verdict"] != "none"]
        if len(v):
            out += [
                "",
                "Heads that sink in at least one variant:",
                "",
                _md(v[["layer", "head", "verdict", "variants_sinking", "variants", "sinks_in"]]),
            ]
    if "secondary_tokens_overall" in t and len(t["secondary_tokens_overall"]):
        out += ["", "## Secondary sinks (tokens receiving attention beyond uniform, positions >= 1)", ""]
        for bos, sub in t["secondary_tokens_overall"].groupby("bos", sort=False):
            top = sub.head(8)
            out.append(
                f"- {_bos(bos)}: "
                + ", ".join(
                    f"{r.token!r} ({r.mean_excess:+.3f} mean over heads, top-{cfg.top_k} in {r.heads_in_top_k} heads)"
                    for r in top.itertuples()
                )
            )
    if "value_norm" in t:
        out += ["", "## Does the sink carry anything? (value norms, Kobayashi et al. 2020)", ""]
        vn = t["value_norm"].merge(census[["bos", "layer", "head", "is_sink"]], on=["bos", "layer", "head"])
        vn = vn[vn["is_sink"]].sort_values(["bos", "attn_share"], ascending=[True, False])
        if len(vn):
            vn = vn.assign(bos=vn["bos"].map(_bos))
            out.append(_md(vn[["bos", "layer", "head", "attn_share", "value_norm_share", "norm_ratio"]].head(40)))
            out += [
                "",
                "attn_share: mean A[i,0] over queries i >= 1"
                + (" (every query on bidirectional layers)" if report.info.get("attention_notes") else "")
                + "; value_norm_share: mean of ||A[i,0] v0 W_O|| / sum_j ||A[i,j] vj W_O||; a large attention share with a small norm "
                "share is a no-op sink.",
            ]
        else:
            out.append("No sink heads.")
    if "removal" in t:
        out += ["", "## Sink removal (attention to position 0 masked, rows renormalised)", ""]
        r = t["removal"].copy()
        r["bos"] = r["bos"].map(_bos)
        out.append(_md(r[["bos", "removed", "n_heads", "loss", "delta_loss"]], floatfmt=".4f"))
    if "removal" in t or "windowed" in t:
        lines, warnings = sinks_loss_notes(t, report.info)
        out += [""] + [f"{line[:1].upper()}{line[1:]}." for line in lines] + [f"**Note**: {w}." for w in warnings]
    if "windowed" in t:
        out += ["", "## Windowed attention (StreamingLLM-style, every head)", ""]
        w = t["windowed"]
        for bos, sub in w.groupby("bos", sort=False):
            full = sub[sub["full_attention"]]
            piv = sub[~sub["full_attention"]].pivot(index="window", columns="keep_first", values="loss")
            piv.columns = [f"keep {k}" for k in piv.columns]
            out += [
                f"{_bos(bos)}, {int(sub['seq_tokens'].iloc[0])}-token sequences, full attention loss {float(full['loss'].iloc[0]):.4f}:",
                "",
                _md(piv.reset_index(), floatfmt=".4f"),
                "",
            ]
    skipped = report.info.get("skipped") or {}
    if skipped:
        out += ["", "## Not run", ""] + [f"- {name}: {why}" for name, why in skipped.items()]
    if figures:
        out += ["", "## Figures", ""] + [f"- [{p.name}]({p.name})" for p in figures if p.suffix == ".png"]
    out += ["", "Tables: " + ", ".join(f"{name}.csv" for name in t) + f". Definitions: {DEFINITIONS_PAGE}.", ""]
    return "\n".join(out)


def _lengths_stats(rows: pd.DataFrame, eps: float, suffix: str = "") -> str:
    return (
        f"mean alpha {rows['alpha' + suffix].mean():.3f} (uniform {rows['uniform_alpha' + suffix].mean():.3f}), "
        f"sink rate {rows['sink_rate' + suffix].mean():.3f} (eps {eps:g}), first-token share {rows['first_share' + suffix].mean():.3f}, "
        f"value-norm share {rows['value_norm_share' + suffix].mean():.3f}"
    )


def _window_line(label: str, layer: int, rows: pd.DataFrame) -> str:
    """What a window layer's means averaged, length by length (see :mod:`headlens.analyses.sinks.lengths`)."""
    window = int(rows["window"].iloc[0])
    parts = []
    for _, sub in rows.groupby("length", sort=True):
        first = sub.iloc[0]
        length = int(sub["length"].iloc[0])
        if first["queries"] == "visible":
            parts.append(
                f"{length} tokens: {sub['alpha'].mean():.3f} over the {int(first['n_queries'])} queries that see token 0, "
                f"{sub['alpha_all'].mean():.3f} over all {int(first['n_queries_all'])} queries"
            )
        else:
            parts.append(
                f"{length} tokens: {sub['alpha'].mean():.3f} over all {int(first['n_queries'])} queries (the window hides nothing)"
            )
    return f"window: {label}layer {layer} ({window}-key window), mean alpha over heads: " + "; ".join(parts)


def lengths_lines(table: pd.DataFrame, eps: float) -> list[str]:
    """Console lines of ``sinks --lengths``.  Per BOS setting and length: the means over heads of
    alpha, sink rate (eps), first-token and value-norm shares, uniform alpha, the path; where a
    sliding window hides the first token from some queries, the same over all queries beside
    them.  Then one line per window layer saying which queries its means average."""
    lines = []
    keys = ["bos", "length"] if "bos" in table else ["length"]
    for key, rows in table.groupby(keys, sort=True):
        bos = key[0] if len(keys) == 2 else None
        label = "" if bos is None else f"{_bos(bos)}, "
        line = f"{label}{int(rows['length'].iloc[0])} tokens: {_lengths_stats(rows, eps)} [{rows['attention'].iloc[0]}]"
        if (rows["queries"] == "visible").any():
            line += f"; window layers average the queries that see token 0; all queries: {_lengths_stats(rows, eps, '_all')}"
        lines.append(line)
    settings = table.groupby("bos", sort=True) if "bos" in table else [(None, table)]
    for bos, part in settings:
        label = "" if bos is None else f"{_bos(bos)}, "
        for layer, rows in part[part["window"].notna()].groupby("layer", sort=True):
            lines.append(_window_line(label, int(layer), rows))
    return lines
