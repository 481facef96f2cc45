"""Writing a :class:`~headlens.analyses.sinks.study.SinksRun`: CSV tables and a short Markdown summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.analyses.sinks.study import SinksRun
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.page.md_templates import md_environment
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


def summary_markdown(report: SinksRun, *, model_name: str, figures: Sequence[Path] = ()) -> str:
    """A short Markdown summary of a :class:`~headlens.analyses.sinks.study.SinksRun`, rendered from
    ``templates/summaries/sinks.md.j2`` (this module formats its tables)."""
    cfg, t, info = report.config, report.tables, report.info
    framing = info.get("framing") or {}
    framed = next((f for f in framing.values() if f.get("suffix")), None)  # an encoder's [CLS] ... [SEP]
    rates = t["sink_rates"].copy()
    rates["bos"] = rates["bos"].map(_bos)
    rate_columns = ["bos", "n_sequences", "sink_rate", "uniform_sink_rate", "mean_alpha", "uniform_alpha", "n_sink_heads", "n_heads"]
    context = {
        "model": model_name,
        "eps": cfg.eps,
        "stimuli": info.get("stimuli", ""),
        "window": cfg.window,
        "framed": [*framed.get("prefix", []), *framed["suffix"]] if framed else None,
        "frame_text": _frame_text(framing) if framed else "",
        "n_sequences": list(info.get("n_sequences", {}).items()),
        "window_notes": info.get("window_notes") or [],
        "attention_notes": info.get("attention_notes") or [],
        "rates": _md(rates[rate_columns]),
        "short": [(_bos(b), a) for b, a in zip(t["sink_rates"]["bos"], t["sink_rates"]["uniform_alpha"], strict=True) if a > cfg.eps],
        "sink_heads": _sink_heads(t["census"], cfg.bos),
        "targets": _targets(report) if "sink_targets_by_layer" in t and len(t["sink_targets_by_layer"]) else None,
        "content": _content(t, info, cfg.eps) if "content_verdicts" in t else None,
        "secondary": _secondary(t),
        "top_k": cfg.top_k,
        "value_norm": _value_norm(t) if "value_norm" in t else None,
        "removal": _removal(t["removal"]) if "removal" in t else None,
        "loss_notes": None,
        "windowed": _windowed(t["windowed"]) if "windowed" in t else None,
        "skipped": list((info.get("skipped") or {}).items()),
        "has_figures": bool(figures),
        "figures": [p.name for p in figures if p.suffix == ".png"],
        "tables": [f"{name}.csv" for name in t],
        "definitions": DEFINITIONS_PAGE,
    }
    if "removal" in t or "windowed" in t:
        lines, warnings = sinks_loss_notes(t, info)
        context["loss_notes"] = {"lines": lines, "warnings": warnings}
    return md_environment().get_template("summaries/sinks.md.j2").render(**context)


def _removal(removal: pd.DataFrame) -> str:
    """The sink-removal table: loss with the sinks' attention to position 0 masked."""
    return _md(_bos_named(removal)[["bos", "removed", "n_heads", "loss", "delta_loss"]], floatfmt=".4f")


def _bos_named(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``bos`` column in words."""
    return table.assign(bos=table["bos"].map(_bos))


def _sink_heads(census: pd.DataFrame, settings: Sequence[bool]) -> list[dict[str, Any]]:
    """Per BOS setting, its sink heads (strongest first, at most 20) and how many more."""
    out = []
    for bos in settings:
        sinks = census[(census["bos"] == bos) & census["is_sink"]].sort_values("alpha_mean", ascending=False)
        out.append({"bos": _bos(bos), "heads": list(sinks.head(20).itertuples()), "more": max(len(sinks) - 20, 0)})
    return out


def _targets(report: SinksRun) -> list[dict[str, Any]]:
    """The sink-targets section: per BOS setting, its key groups and a per-layer table of attention shares."""
    info = report.info.get("sink_targets") or {}
    out = []
    for bos, sub in report.tables["sink_targets_by_layer"].groupby("bos", sort=False):
        about = info.get(_bos(bos), {})
        cols = ["layer"]
        for g in ("first", "suffix", "punctuation"):
            if sub[f"{g}_mean"].notna().any():
                cols += [f"{g}_mean", f"{g}_max", f"{g}_uniform"]
        cols.append("sink_on")
        out.append(
            {
                "bos": _bos(bos),
                "first": about.get("first", "position 0"),
                "suffix": ", ".join(about.get("suffix") or []) or "none",
                "punctuation": " ".join(about.get("punctuation") or []) or "none",
                "table": _md(sub[cols]),
            }
        )
    return out


def _content(t: dict[str, pd.DataFrame], info: dict[str, Any], eps: float) -> dict[str, Any]:
    """The position-or-content section: the per-variant table, the variants not run, the heads that sink."""
    per_variant = (
        t["content"]
        .groupby("variant", observed=True)
        .agg(
            sink_rate=("sink_rate", "mean"),
            mean_alpha=("alpha_first", "mean"),
            heads_sinking=("alpha_first", lambda s: int((s > eps).sum())),
        )
        .reset_index()
    )
    v = t["content_verdicts"]
    v = v[v["verdict"] != "none"]
    return {
        "table": _md(per_variant),
        "skipped": list((info.get("skipped_variants") or {}).items()),
        "verdicts": _md(v[["layer", "head", "verdict", "variants_sinking", "variants", "sinks_in"]]) if len(v) else None,
    }


def _secondary(t: dict[str, pd.DataFrame]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Per BOS setting, its top 8 secondary sink tokens (the token as its repr)."""
    if "secondary_tokens_overall" not in t or not len(t["secondary_tokens_overall"]):
        return []
    out = []
    for bos, sub in t["secondary_tokens_overall"].groupby("bos", sort=False):
        rows = [
            {"token": repr(r.token), "mean_excess": r.mean_excess, "heads_in_top_k": r.heads_in_top_k} for r in sub.head(8).itertuples()
        ]
        out.append((_bos(bos), rows))
    return out


def _value_norm(t: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The value-norm table of the sink heads (at most 40 rows), None when no head sinks."""
    vn = t["value_norm"].merge(t["census"][["bos", "layer", "head", "is_sink"]], on=["bos", "layer", "head"])
    vn = vn[vn["is_sink"]].sort_values(["bos", "attn_share"], ascending=[True, False])
    table = _md(_bos_named(vn)[["bos", "layer", "head", "attn_share", "value_norm_share", "norm_ratio"]].head(40)) if len(vn) else None
    return {"table": table}


def _windowed(w: pd.DataFrame) -> list[dict[str, Any]]:
    """Per BOS setting: the sequence length, the full-attention loss and the loss per window and kept first tokens."""
    out = []
    for bos, sub in w.groupby("bos", sort=False):
        full = sub[sub["full_attention"]]
        piv = sub[~sub["full_attention"]].pivot(index="window", columns="keep_first", values="loss")
        piv.columns = [f"keep {k}" for k in piv.columns]
        out.append(
            {
                "bos": _bos(bos),
                "tokens": int(sub["seq_tokens"].iloc[0]),
                "full": float(full["loss"].iloc[0]),
                "table": _md(piv.reset_index(), floatfmt=".4f"),
            }
        )
    return out


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
