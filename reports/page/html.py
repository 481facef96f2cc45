"""``report.html``: one self-contained page (inline CSS, inline script, inline SVG; no network).

Safe by construction:

* every string that came from the model, the user or the file system (tokens, prompts, model
  names, paths, errors) goes through :func:`html.escape` when written into markup;
* the data the script needs is one ``<script type="application/json">`` block written by
  :func:`json_for_script` (``<``, ``>``, ``&`` and line separators as ``\\uXXXX`` escapes, so no
  string can close the element), read with ``JSON.parse`` and put on the page with
  ``textContent`` only (the script never assigns ``innerHTML``);
* a Content-Security-Policy allows exactly one script (by its SHA-256), inline styles and
  ``data:`` images, and no connection anywhere: even markup that slipped through could not run.

Deterministic: the same report renders to the same bytes (fixed ids, fixed number formats, no
clock); the only timestamp is the manifest's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from html import escape
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from headlens.reports.tables import baseline_label

__all__ = ["render_html", "json_for_script", "SCRIPT"]

#: Column labels of the role table (full names in the header's tooltip).
SHORT = {"previous_token": "prev. token", "next_token": "next token", "duplicate_token": "dup. token", "induction": "induction", "sink": "sink", "referent": "referent"}
COLUMN_TITLES = {
    "sink_alpha": "sink score: Gu et al. alpha from the sinks stage",
    "zero_delta": "change in the metric when the head alone is zero-ablated",
    "mean_delta": "change in the metric when the head alone is mean-ablated",
    "importance": "pruning importance (Michel et al.), L2-normalised per layer",
    "pruned_at": "fraction of heads removed when pruning took this head out",
}

EXACT_IMPORTANCE_TITLE = "pruning importance: the exact change in the metric when the head alone is zero-ablated from the unpruned model"


def _exact_importance(report: Any) -> bool:
    """True when pruning ranked heads by their exact ablation change (the embedding metric)."""
    s = report.stage("pruning")
    return s.ok and s.info.get("metric") == "embedding"


def _metric_label(metric: str) -> str:
    from headlens.analyses.ablation.data import METRIC_LABELS

    return METRIC_LABELS.get(str(metric), str(metric))


def _metric_note(report: Any) -> str:
    note = report.metric_note
    return f'<p class="metric-note"><strong>Metric.</strong> {escape(note)}</p>' if note else ""


#: Short definitions shown under each detector's heatmap (README "Head scores").
DETECTOR_NOTES = {
    "previous_token": "mean attention from each token to the one before it",
    "next_token": "mean attention from each token to the one after it (encoders; not measurable on causal attention)",
    "duplicate_token": "repeated random tokens: attention from the second copy to the same token's first occurrence",
    "induction": "repeated random tokens: attention from the second copy to the token after the first occurrence",
    "sink": "mean attention to the first position (Gu et al. alpha)",
    "referent": "attention from a pronoun to its antecedent (the role needs a Holm-corrected sign test over sentence pairs, more than half the pairs won, and antecedent above distractor)",
}


# --------------------------------------------------------------------------- helpers


def json_for_script(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: it cannot close the
    element or open a comment, whatever the strings hold."""
    text = json.dumps(obj, ensure_ascii=True, sort_keys=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _f(x: Any) -> float | None:
    """A finite float rounded to 6 significant digits (stable output), or None."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return float(f"{v:.6g}")


def _num(x: Any, digits: int = 3) -> str:
    v = _f(x)
    return "n/a" if v is None else f"{v:.{digits}f}"


def _signed(x: Any, digits: int = 3) -> str:
    v = _f(x)
    return "n/a" if v is None else f"{v:+.{digits}f}"


def _sortval(x: Any) -> str:
    v = _f(x)
    return "" if v is None else repr(v)


def _hex(rgba: Any) -> str:
    r, g, b = (int(round(255 * c)) for c in rgba[:3])
    return f"#{r:02x}{g:02x}{b:02x}"


def _luminance(rgba: Any) -> float:
    r, g, b = rgba[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b


def _cmap(name: str) -> Any:
    import matplotlib

    return matplotlib.colormaps[name]


# --------------------------------------------------------------------------- pieces of the page


def _banner(report: Any, *names: str) -> str:
    """A FAILED (or skipped) notice for the stages a section is built from."""
    out = []
    for name in names:
        s = report.stage(name)
        if s.status == "failed":
            out.append(f'<p class="failed-banner"><strong>FAILED</strong>: stage <code>{escape(name)}</code> ({escape(s.title)}): {escape(s.error or "")}</p>')
        elif s.status == "skipped":
            out.append(f'<p class="skipped-banner">Stage <code>{escape(name)}</code> ({escape(s.title)}) was skipped.</p>')
    return "".join(out)


def _stages_table(report: Any) -> str:
    rows = []
    for i, s in enumerate(report.stages, start=1):
        if s.status == "failed":
            status = f'<span class="status failed">FAILED</span> <span class="error">{escape(s.error or "")}</span>'
        else:
            shown = "done" if s.status == "loaded" else s.status  # the page is the same whether a stage ran now or earlier
            status = f'<span class="status {escape(shown)}">{escape(shown)}</span>'
        shown = "done" if s.status == "loaded" else s.status
        secs = "" if s.seconds is None else f"{float(s.seconds):.1f} s"
        rows.append(f'<tr id="stage-{escape(s.name)}" class="stage-{escape(shown)}"><td>{i}</td><td><code>{escape(s.name)}</code></td><td>{escape(s.title)}</td><td>{status}</td><td class="num">{secs}</td></tr>')
    return '<table class="stages"><thead><tr><th>#</th><th>stage</th><th>what</th><th>status</th><th>time</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>"


def _role_badges(roles: str) -> str:
    items = [r for r in str(roles or "").split(";") if r]
    if not items:
        return '<span class="none">-</span>'
    return " ".join(f'<span class="badge">{escape(r)}</span>' for r in items)


def _head_columns(report: Any) -> list[tuple[str, str, str]]:
    """``(column, header, kind)`` of the role table after head and roles."""
    heads = report.heads
    cols = []
    for det in ([] if report.scores is None else list(dict.fromkeys(report.scores["detector"]))):
        cols.append((det, SHORT.get(det, det.replace("_", " ")), "score"))
    extra = [("sink_alpha", "sink \u03b1", "score"), ("zero_delta", "zero \u0394", "delta"), ("mean_delta", "mean \u0394", "delta"), ("importance", "import.", "score"), ("pruned_at", "pruned at", "pct")]
    cols += [c for c in extra if c[0] in heads.columns]
    return cols


def _role_table(report: Any) -> str:
    heads = report.heads
    cols = _head_columns(report)
    head_cells = ['<th data-col="0" data-type="num" aria-sort="ascending" title="layer.head; click to sort">head</th>', '<th data-col="1" data-type="text" title="roles the census gave this head">roles</th>']
    for k, (col, label, _) in enumerate(cols, start=2):
        title = EXACT_IMPORTANCE_TITLE if col == "importance" and _exact_importance(report) else COLUMN_TITLES.get(col, col + " score")
        head_cells.append(f'<th data-col="{k}" data-type="num" class="num" title="{escape(title)}; click to sort">{escape(label)}</th>')
    body = []
    for r in heads.itertuples(index=False):
        d = r._asdict()
        cells = [f'<td data-v="{int(d["layer"]) * 100000 + int(d["head"])}"><code>{escape(str(d["name"]))}</code></td>', f'<td data-v="{escape(str(d["roles"] or ""))}">{_role_badges(d["roles"])}</td>']
        for col, _, kind in cols:
            v = d.get(col)
            text = _signed(v) if kind == "delta" else (("n/a" if _f(v) is None else f"{100 * float(v):.0f}%") if kind == "pct" else _num(v))
            cells.append(f'<td class="num" data-v="{_sortval(v)}">{text}</td>')
        body.append(f'<tr data-head="{escape(str(d["name"]))}" data-roles="{escape(str(d["roles"] or ""))}" tabindex="0">' + "".join(cells) + "</tr>")
    return '<table id="role-table" class="roles"><thead><tr>' + "".join(head_cells) + "</tr></thead><tbody>" + "".join(body) + "</tbody></table>"


def _role_filter(report: Any) -> str:
    dets = [] if report.scores is None else list(dict.fromkeys(report.scores["detector"]))
    options = ['<option value="">all heads</option>', '<option value="*">any role</option>', '<option value="-">no role</option>']
    options += [f'<option value="{escape(d)}">{escape(d)}</option>' for d in dets]
    return (
        '<div class="controls"><label>role <select id="role-filter">' + "".join(options) + "</select></label> "
        '<label>search <input id="head-search" type="search" placeholder="head or role, e.g. 1.0 or induction"></label> '
        f'<span id="row-count">{len(report.heads)} of {len(report.heads)} heads</span></div>'
    )


def _heatmap(title: str, note: str, values: np.ndarray, *, cmap: str, vmin: float, vmax: float, fmt: str, outlined: np.ndarray | None = None, map_id: str) -> str:
    cm = _cmap(cmap)
    n_layers, n_heads = values.shape
    show = n_heads <= 16
    rows = ["<tr><th></th>" + "".join(f'<th scope="col">{h}</th>' for h in range(n_heads)) + "</tr>"]
    for layer in range(n_layers):
        cells = [f'<th scope="row">{layer}</th>']
        for h in range(n_heads):
            v = values[layer, h]
            name = f"{layer}.{h}"
            if not math.isfinite(v):
                cells.append(f'<td class="cell nan" data-head="{name}" title="{name}: n/a"></td>')
                continue
            t = 0.5 if vmax == vmin else min(1.0, max(0.0, (v - vmin) / (vmax - vmin)))
            rgba = cm(t)
            fg = "#fff" if _luminance(rgba) < 0.55 else "#111"
            text = format(v, fmt)
            cls = "cell role" if outlined is not None and outlined[layer, h] else "cell"
            cells.append(f'<td class="{cls}" data-head="{name}" style="background:{_hex(rgba)};color:{fg}" title="{name}: {text}">{text if show else ""}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    stops = ", ".join(_hex(cm(t)) for t in np.linspace(0, 1, 7))
    legend = f'<div class="legend"><span>{format(vmin, fmt)}</span><span class="bar" style="background:linear-gradient(to right, {stops})"></span><span>{format(vmax, fmt)}</span></div>'
    return (
        f'<figure class="heatmap" id="{escape(map_id)}"><figcaption><strong>{escape(title)}</strong><br><span class="note">{escape(note)}</span></figcaption>'
        f'<table class="hm"><caption class="axis">rows: layer, columns: head</caption>{"".join(rows)}</table>{legend}</figure>'
    )


def _grid(df: pd.DataFrame, column: str, n_layers: int, n_heads: int) -> np.ndarray:
    g = np.full((n_layers, n_heads), np.nan)
    for r in df.itertuples(index=False):
        d = r._asdict()
        layer, head = int(d["layer"]), int(d["head"])
        if 0 <= layer < n_layers and 0 <= head < n_heads:
            v = _f(d[column])
            g[layer, head] = np.nan if v is None else v
    return g


def _heatmaps(report: Any) -> str:
    L, H = report.n_layers, report.n_heads
    out = [_banner(report, "census", "sinks", "ablation_zero", "ablation_mean", "pruning")]
    maps = []
    if report.scores is not None and L and H:
        roles = report.heads.set_index(["layer", "head"])["roles"]
        for det, g in report.scores.groupby("detector", sort=False):
            grid = _grid(g, "score", L, H)
            outlined = np.array([[det in str(roles.get((a, b), "")).split(";") for b in range(H)] for a in range(L)])
            th = report.thresholds.get(str(det))
            note = DETECTOR_NOTES.get(str(det), "")
            note += f"; uniform baseline {baseline_label(g['baseline'])}" + (f"; role threshold {th:g}" if th is not None else "") + "; outlined: heads with the role"
            maps.append(_heatmap(f"{det} score", note, grid, cmap="viridis", vmin=0.0, vmax=1.0, fmt=".2f", outlined=outlined, map_id=f"hm-{det}"))
    if report.sinks is not None and L and H:
        bos = bool(report.settings.get("prepend_bos", True))
        sub = report.sinks[report.sinks["bos"].astype(bool) == bos]
        if len(sub):
            grid = _grid(sub, "alpha_mean", L, H)
            eps = report.stage("sinks").info.get("eps", 0.3)
            maps.append(_heatmap("sink score (alpha)", f"Gu et al. alpha, {'with' if bos else 'no'} BOS; sink head when > {eps:g}; uniform {_num(sub['uniform_alpha'].iloc[0])}", grid, cmap="viridis", vmin=0.0, vmax=1.0, fmt=".2f", outlined=grid > eps, map_id="hm-sink-alpha"))
    for name, label in (("ablation_zero", "zero"), ("ablation_mean", "mean")):
        table = getattr(report, name)
        if table is not None and L and H and len(table):
            grid = _grid(table, "delta", L, H)
            finite = grid[np.isfinite(grid)]
            bound = float(np.abs(finite).max()) if finite.size else 1.0
            bound = bound or 1.0
            info = report.stage(name).info
            metric = _metric_label(str(table["metric"].iloc[0]))
            maps.append(_heatmap(f"{label} ablation: \u0394 {metric}", f"change in {metric} when the head alone is {label}-ablated; unablated {_num(info.get('unablated_value'), 4)}", grid, cmap="RdBu_r", vmin=-bound, vmax=bound, fmt="+.3f", map_id=f"hm-{label}-ablation"))
    if report.importance is not None and L and H:
        grid = _grid(report.importance, "importance", L, H)
        top = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
        if _exact_importance(report):
            low = min(0.0, float(np.nanmin(grid))) if np.isfinite(grid).any() else 0.0
            maps.append(_heatmap("pruning importance", "exact: embedding change when the head alone is zero-ablated (unpruned model)", grid, cmap="viridis", vmin=low, vmax=top or 1.0, fmt=".3f", map_id="hm-importance"))
        else:
            maps.append(_heatmap("pruning importance", "Michel et al. gradient importance, L2-normalised per layer", grid, cmap="viridis", vmin=0.0, vmax=top or 1.0, fmt=".2f", map_id="hm-importance"))
    if not maps:
        out.append('<p class="none">No heatmap: the stages they come from did not finish.</p>')
    out.append('<div class="heatmaps">' + "".join(maps) + "</div>")
    return "".join(out)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out = []
    v = start
    while v <= hi + 1e-9 * span:
        out.append(round(v, 10))
        v += step
    return out


def _pruning_svg(report: Any) -> str:
    curve = report.pruning_curve
    info = report.stage("pruning").info
    metric = str(info.get("metric", "loss"))
    v0 = _f(info.get("unablated_value"))
    max_inc = _f(info.get("max_increase")) or 0.0
    removable = _f(info.get("removable_fraction")) or 0.0
    W, Ht, ml, mr, mt, mb = 640, 340, 64, 16, 16, 44
    xs = [100 * float(x) for x in curve["fraction_removed"]]
    series = [curve["value"], curve["random_mean"], curve["random_min"], curve["random_max"], curve["random_mean"] - curve["random_std"], curve["random_mean"] + curve["random_std"]]
    ys = [float(v) for s in series for v in s if _f(v) is not None]
    embedding = metric == "embedding"
    sign = -1 if metric == "logit-diff" else 1
    if embedding:  # the unablated embedding change is 0: the threshold is absolute
        threshold = None if v0 is None else v0 + max_inc
    else:
        threshold = None if v0 is None else v0 + sign * max_inc * abs(v0)
    if threshold is not None:
        ys.append(threshold)
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = (hi - lo) * 0.06 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad

    def X(x: float) -> float:
        return round(ml + (W - ml - mr) * x / 100.0, 2)

    def Y(y: float) -> float:
        return round(mt + (Ht - mt - mb) * (1 - (y - lo) / (hi - lo)), 2)

    parts = [f'<svg id="pruning-svg" viewBox="0 0 {W} {Ht}" width="{W}" height="{Ht}" role="img" aria-label="pruning curve" xmlns="http://www.w3.org/2000/svg">']
    parts.append(f'<rect x="{ml}" y="{mt}" width="{W - ml - mr}" height="{Ht - mt - mb}" fill="#fff" stroke="#999"/>')
    for t in _ticks(lo, hi):
        parts.append(f'<line x1="{ml}" x2="{W - mr}" y1="{Y(t)}" y2="{Y(t)}" stroke="#eee"/><text x="{ml - 6}" y="{Y(t) + 4}" text-anchor="end" class="tick">{t:g}</text>')
    for t in range(0, 101, 20):
        parts.append(f'<line x1="{X(t)}" x2="{X(t)}" y1="{mt}" y2="{Ht - mb}" stroke="#eee"/><text x="{X(t)}" y="{Ht - mb + 16}" text-anchor="middle" class="tick">{t}%</text>')
    parts.append(f'<text x="{(ml + W - mr) / 2}" y="{Ht - 6}" text-anchor="middle" class="axis-label">heads removed</text>')
    parts.append(f'<text x="14" y="{(mt + Ht - mb) / 2}" text-anchor="middle" transform="rotate(-90 14 {(mt + Ht - mb) / 2})" class="axis-label">{escape(metric)}</text>')

    def band(low: pd.Series, high: pd.Series, cls: str) -> None:
        pts = [(x, _f(a), _f(b)) for x, a, b in zip(xs, low, high)]
        pts = [(x, a, b) for x, a, b in pts if a is not None and b is not None]
        if len(pts) >= 2:
            poly = [f"{X(x)},{Y(a)}" for x, a, _ in pts] + [f"{X(x)},{Y(b)}" for x, _, b in reversed(pts)]
            parts.append(f'<polygon class="{cls}" points="{" ".join(poly)}"/>')

    def line(values: pd.Series, cls: str, label: str) -> None:
        pts = [(x, _f(v)) for x, v in zip(xs, values)]
        pts = [(x, v) for x, v in pts if v is not None]
        if not pts:
            return
        parts.append(f'<polyline class="{cls}" points="{" ".join(f"{X(x)},{Y(v)}" for x, v in pts)}"/>')
        for x, v in pts:
            parts.append(f'<circle class="{cls}" cx="{X(x)}" cy="{Y(v)}" r="3"><title>{escape(label)}: {x:.0f}% removed, {metric} {v:.4g}</title></circle>')

    if curve["random_mean"].notna().any():
        band(curve["random_min"], curve["random_max"], "band-minmax")
        band(curve["random_mean"] - curve["random_std"], curve["random_mean"] + curve["random_std"], "band-sd")
        line(curve["random_mean"], "random", "random order, mean")
    line(curve["value"], "importance", "importance order")
    if threshold is not None:
        parts.append(f'<line class="threshold" x1="{ml}" x2="{W - mr}" y1="{Y(threshold)}" y2="{Y(threshold)}"/>')
    parts.append(f'<line class="removable" x1="{X(100 * removable)}" x2="{X(100 * removable)}" y1="{mt}" y2="{Ht - mb}"/>')
    parts.append("</svg>")
    legend = (
        f'<div class="svg-legend"><span><i class="sw importance"></i>{"exact importance order" if embedding else "importance order (Michel et al. 2019)"}</span>'
        f'<span><i class="sw random"></i>random order: mean of {int(info.get("random_seeds") or 0)}, band = \u00b11 sd and min-max</span>'
        + (f'<span><i class="sw threshold"></i>unablated {escape(metric)} + {max_inc:g}</span>' if embedding else f'<span><i class="sw threshold"></i>unablated {escape(metric)} {"+" if sign > 0 else "-"}{max_inc:.0%}</span>')
        + f'<span><i class="sw removable"></i>removable: {removable:.0%} of heads</span></div>'
    )
    return "".join(parts) + legend


def _pruning(report: Any) -> str:
    out = [_banner(report, "pruning")]
    curve = report.pruning_curve
    if curve is None:
        return "".join(out)
    info = report.stage("pruning").info
    embedding = info.get("metric") == "embedding"
    metric = escape(_metric_label(str(info.get("metric", "loss"))))
    if embedding:
        out.append(
            "<p>Heads are removed (zero-ablated) in order of least exact importance (the embedding change when the head alone is removed from the model as pruned "
            f"so far), recomputed after each step, and the {metric} over sentences of the evaluation text is measured; the grey curve removes the same numbers of heads "
            f"in random orders. Unablated {metric}: {_num(info.get('unablated_value'), 4)}; removable within an embedding change of at most "
            f"{float(info.get('max_increase') or 0):g}: <strong>{100 * float(info.get('removable_fraction') or 0):.0f}%</strong> of heads.</p>"
        )
    else:
        out.append(
            f'<p>Heads are removed (zero-ablated) in order of least gradient importance, recomputed after each step, and the {metric} on the '
            f"evaluation text is measured; the grey curve removes the same numbers of heads in random orders. Unablated {metric}: "
            f"{_num(info.get('unablated_value'), 4)}; removable within +{100 * float(info.get('max_increase') or 0):.0f}%: "
            f"<strong>{100 * float(info.get('removable_fraction') or 0):.0f}%</strong> of heads.</p>"
        )
    out.append('<div class="curve">' + _pruning_svg(report) + "</div>")
    rows = []
    for c in curve.itertuples(index=False):
        d = c._asdict()
        removed = d.get("removed_this_step")
        removed = "" if not isinstance(removed, str) else removed
        rnd = "n/a" if _f(d["random_mean"]) is None else f"{_num(d['random_mean'], 4)} \u00b1 {_num(d['random_std'], 4)}"
        rows.append(
            f"<tr><td>{int(d['step'])}</td><td class=\"num\">{int(d['n_removed'])}</td><td class=\"num\">{100 * float(d['fraction_removed']):.0f}%</td>"
            f"<td class=\"num\">{_num(d['value'], 4)}</td><td class=\"num\">{_signed(d['relative_change'], 4) if embedding else _signed(100 * float(d['relative_change']), 1) + '%'}</td><td class=\"num\">{rnd}</td>"
            f"<td class=\"num\">{int(d['kv_bytes_saved_per_1k_tokens']):,}</td><td>{escape(removed)}</td></tr>"
        )
    out.append(
        f'<details><summary>curve table</summary><table class="curve-table"><thead><tr><th>step</th><th>removed</th><th>fraction</th><th>{metric}</th><th>change</th>'
        "<th>random order</th><th>KV bytes saved / 1k tokens</th><th>heads removed at this step</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></details>"
    )
    return "".join(out)


def _sinks_summary(report: Any) -> str:
    out = [_banner(report, "sinks")]
    if report.sinks_note:
        out.append(f'<p class="metric-note">{escape(report.sinks_note)}</p>')
    rates = report.sink_rates
    if rates is None:
        return "".join(out)
    rows = []
    for r in rates.itertuples(index=False):
        d = r._asdict()
        rows.append(
            f"<tr><td>{'with BOS' if bool(d['bos']) else 'no BOS'}</td><td class=\"num\">{int(d['n_sequences'])}</td><td class=\"num\">{_num(d['sink_rate'])}</td>"
            f"<td class=\"num\">{_num(d['uniform_sink_rate'])}</td><td class=\"num\">{_num(d['mean_alpha'])}</td><td class=\"num\">{_num(d['uniform_alpha'])}</td>"
            f"<td class=\"num\">{int(d['n_sink_heads'])} of {int(d['n_heads'])}</td></tr>"
        )
    out.append(
        "<p>Sink rate (Gu et al. 2024): the fraction of (sequence, head) whose attention to the first position exceeds eps, beside what uniform attention would give.</p>"
        '<table class="sink-rates"><thead><tr><th>setting</th><th>sequences</th><th>sink rate</th><th>uniform</th><th>mean alpha</th><th>uniform alpha</th><th>sink heads</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )
    return "".join(out)


def _figure_links(report: Any) -> str:
    items = []
    for s in report.stages:
        figs = [f for f in s.files if f.endswith(".png")]
        for f in figs:
            stem = f[: -len(".png")]
            fmts = [ext for ext in ("png", "svg", "pdf") if f"{stem}.{ext}" in s.files]
            links = " ".join(f'<a href="{escape(quote(f"{s.name}/{stem}.{ext}"))}">{ext.upper()}</a>' for ext in fmts)
            items.append(f"<li><code>{escape(s.name)}/{escape(stem)}</code> {links}</li>")
    if not items:
        return ""
    return '<details><summary>figure files for papers (in the report folder)</summary><ul class="files">' + "".join(items) + "</ul></details>"


def _examples_list(report: Any) -> str:
    out = [_banner(report, "examples")]
    if report.examples:
        items = []
        for i, e in enumerate(report.examples, start=1):
            note = " (cut to the first tokens)" if e.truncated else ""
            items.append(f'<li><span class="prompt">{escape(e.prompt)}</span> <span class="note">{len(e.tokens)} tokens{note}</span></li>')
        out.append('<ol class="prompts">' + "".join(items) + "</ol>")
    return "".join(out)


# --------------------------------------------------------------------------- the data the script reads


def _quantised(pattern: np.ndarray) -> str:
    """Lower triangle of every head's pattern as bytes (0-255), base64: [layer][head][q][k <= q]."""
    L, H, T, _ = pattern.shape
    rows, cols = np.tril_indices(T)
    q = np.clip(np.rint(pattern[:, :, rows, cols] * 255.0), 0, 255).astype(np.uint8)
    return base64.b64encode(q.tobytes()).decode("ascii")


def _data(report: Any) -> dict[str, Any]:
    heads: dict[str, Any] = {}
    for r in report.heads.itertuples(index=False):
        d = r._asdict()
        heads[str(d["name"])] = {"roles": [x for x in str(d["roles"] or "").split(";") if x]}
    if report.scores is not None:
        for r in report.scores.itertuples(index=False):
            d = r._asdict()
            name = f"{int(d['layer'])}.{int(d['head'])}"
            if name in heads:
                det = str(d["detector"])
                heads[name].setdefault("scores", []).append([det, _f(d["score"]), _f(d["ci_low"]), _f(d["ci_high"]), _f(d["baseline"]), int(d["n"]), _f(d["accuracy"]), report.thresholds.get(det)])
    for attr, key in (("ablation_zero", "zero"), ("ablation_mean", "mean")):
        table = getattr(report, attr)
        if table is not None:
            for r in table.itertuples(index=False):
                d = r._asdict()
                name = f"{int(d['layer'])}.{int(d['head'])}"
                if name in heads:
                    heads[name][key] = [_f(d["delta"]), _f(d["ci_low"]), _f(d["ci_high"]), _f(d["value"]), int(d["n"])]
    if report.sinks is not None:
        for r in report.sinks.itertuples(index=False):
            d = r._asdict()
            name = f"{int(d['layer'])}.{int(d['head'])}"
            if name in heads:
                heads[name].setdefault("sink", []).append([bool(d["bos"]), _f(d["alpha_mean"]), _f(d["alpha_std"]), _f(d["sink_rate"]), _f(d["uniform_alpha"])])
    for r in report.heads.itertuples(index=False):
        d = r._asdict()
        if "importance" in d and _f(d["importance"]) is not None:
            heads[str(d["name"])]["importance"] = _f(d["importance"])
        if "pruned_at" in d and _f(d["pruned_at"]) is not None:
            heads[str(d["name"])]["pruned_at"] = _f(d["pruned_at"])
    metric = None
    for attr in ("ablation_zero", "ablation_mean"):
        t = getattr(report, attr)
        if t is not None and len(t):
            metric = _metric_label(str(t["metric"].iloc[0]))
    examples = [{"prompt": e.prompt, "tokens": list(e.tokens), "att": _quantised(e.pattern), "truncated": bool(e.truncated)} for e in report.examples if e.pattern.shape[:2] == (report.n_layers, report.n_heads)]
    return {
        "L": report.n_layers,
        "H": report.n_heads,
        "metric": metric,
        "bos": bool(report.settings.get("prepend_bos", True)),
        "initial": _initial_head(report),
        "heads": heads,
        "examples": examples,
        "failed": {s.name: s.error for s in report.stages if s.status == "failed"},
    }


def _initial_head(report: Any) -> str:
    """The head shown first: the strongest one with a role, else 0.0."""
    if report.roles is not None and len(report.roles):
        named = report.roles[report.roles["roles"].fillna("") != ""]
        if len(named):
            best = named.sort_values(["strongest_score", "layer", "head"], ascending=[False, True, True], kind="stable").iloc[0]
            return f"{int(best['layer'])}.{int(best['head'])}"
    return "0.0"


# --------------------------------------------------------------------------- style and script

CSS = """
:root{--fg:#1b1f24;--muted:#5b6470;--line:#d8dde3;--accent:#1f5fbf;--bad:#b3261e;--bg2:#f5f7fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);margin:0;background:#fff}
header{padding:18px 28px 10px;border-bottom:1px solid var(--line);background:var(--bg2)}
header h1{margin:0 0 4px;font-size:22px}
header .sub{color:var(--muted)}
nav{margin-top:8px}nav a{margin-right:14px;color:var(--accent);text-decoration:none}
main{padding:8px 28px 40px;max-width:1500px}
section{margin:22px 0}
h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
table{border-collapse:collapse}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.stages .failed,.failed-banner strong{color:var(--bad);font-weight:700}
.failed-banner{border-left:4px solid var(--bad);background:#fdecea;padding:6px 10px}
.metric-note{border-left:4px solid #888;background:#f4f4f4;padding:6px 10px}
.skipped-banner{border-left:4px solid #999;background:#f3f3f3;padding:6px 10px}
.status.done,.status.loaded{color:#1e7b34}
.error{font-family:ui-monospace,monospace;font-size:12.5px}
.controls{margin:6px 0 8px;display:flex;gap:14px;align-items:center;flex-wrap:wrap}
.controls select,.controls input{font:inherit;padding:2px 6px}
#row-count{color:var(--muted)}
.heads-layout{display:grid;grid-template-columns:minmax(0,1.3fr) minmax(360px,1fr);gap:16px;align-items:start}
.table-wrap{max-height:72vh;overflow:auto;border:1px solid var(--line)}
table.roles{width:100%}
table.roles{font-size:12.5px}
table.roles th,table.roles td{padding:3px 5px}
table.roles thead th{position:sticky;top:0;background:var(--bg2);cursor:pointer;user-select:none;vertical-align:bottom}
table.roles thead th[aria-sort=ascending]::after{content:" \\25B2";font-size:10px}
table.roles thead th[aria-sort=descending]::after{content:" \\25BC";font-size:10px}
table.roles tbody tr{cursor:pointer}
table.roles tbody tr:hover{background:#eef4ff}
table.roles tbody tr.selected{background:#dbe8ff}
.badge{display:inline-block;background:#e7eefc;color:#123f8c;border-radius:9px;padding:0 7px;margin:1px 2px 1px 0;font-size:12px}
.none{color:var(--muted)}
aside#head-detail{position:sticky;top:8px;border:1px solid var(--line);border-radius:6px;padding:10px 14px;background:#fff;max-height:96vh;overflow:auto}
aside#head-detail h3{margin:0 0 6px}
#detail-body table{margin:4px 0 10px;font-size:12.5px}
#detail-body td{white-space:nowrap;padding:2px 6px}
#detail-body th{padding:2px 6px}
#detail-body h4{margin:10px 0 4px;font-size:14px}
.example{margin:8px 0 14px}
.ex-prompt{color:var(--muted);font-size:12.5px;margin-bottom:4px;word-break:break-word}
.tokens{font-family:ui-monospace,monospace;font-size:12.5px}
.tok{display:inline-block;white-space:pre;padding:0 2px;margin:1px;border-radius:3px;cursor:pointer;border:1px solid transparent;line-height:1.6}
.tok.query{border-color:var(--accent);box-shadow:0 0 0 1px var(--accent)}
.tok.future{color:#b8bec6}
.ex-info{font-size:12.5px;color:var(--muted);min-height:1.4em;word-break:break-word}
.heatmaps{display:flex;flex-wrap:wrap;gap:18px}
figure.heatmap{margin:0;border:1px solid var(--line);border-radius:6px;padding:8px 10px;max-width:100%;overflow:auto}
figure.heatmap figcaption{margin-bottom:6px;max-width:420px}
.note{color:var(--muted);font-size:12px}
table.hm{border-collapse:separate;border-spacing:1px}
table.hm caption.axis{caption-side:bottom;font-size:11px;color:var(--muted);text-align:left}
table.hm th{font-size:11px;color:var(--muted);border:0;padding:0 4px;text-align:center}
table.hm td.cell{min-width:30px;height:24px;text-align:center;font-size:11px;border:2px solid transparent;padding:0 2px;cursor:pointer}
table.hm td.cell.role{border-color:#e8112d}
table.hm td.cell.nan{background:repeating-linear-gradient(45deg,#eee,#eee 3px,#fff 3px,#fff 6px)}
table.hm td.cell.sel{outline:2px solid #000;outline-offset:-1px}
.legend{display:flex;gap:6px;align-items:center;font-size:11px;color:var(--muted);margin-top:4px}
.legend .bar{display:inline-block;width:140px;height:10px;border:1px solid var(--line)}
.curve svg{max-width:100%;height:auto}
svg .tick{font-size:11px;fill:#555}svg .axis-label{font-size:12px;fill:#333}
svg .band-minmax{fill:#9aa3ad;opacity:.22}svg .band-sd{fill:#9aa3ad;opacity:.38}
svg polyline{fill:none;stroke-width:2}svg polyline.importance{stroke:#1f77b4}svg polyline.random{stroke:#7f7f7f}
svg circle.importance{fill:#1f77b4}svg circle.random{fill:#7f7f7f}
svg line.threshold{stroke:#d62728;stroke-dasharray:6 4}svg line.removable{stroke:#2ca02c;stroke-dasharray:2 3;stroke-width:1.6}
.svg-legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:var(--muted);margin:4px 0 8px}
.sw{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:5px}
.sw.importance{background:#1f77b4}.sw.random{background:#7f7f7f}.sw.threshold{background:#d62728}.sw.removable{background:#2ca02c}
pre.manifest{background:var(--bg2);border:1px solid var(--line);padding:10px;overflow:auto;max-height:60vh;font-size:12px}
.prompts .prompt{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
@media (max-width:900px){.heads-layout{grid-template-columns:1fr}aside#head-detail{position:static;max-height:none}}
"""

#: The page's only script.  It reads ``#hl-data`` and writes with ``textContent`` only.
SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("hl-data").textContent);
  var H = D.H;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function num(x, d) { return (x === null || x === undefined) ? "n/a" : Number(x).toFixed(d === undefined ? 3 : d); }
  function signed(x, d) { if (x === null || x === undefined) return "n/a"; var s = Number(x).toFixed(d === undefined ? 3 : d); return Number(x) >= 0 ? "+" + s : s; }
  function pct(x) { return (x === null || x === undefined) ? "n/a" : (100 * x).toFixed(1) + "%"; }
  function showTok(t) { return t.replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205"; }
  function table(head, rows) {
    var t = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", null, h)); });
    var th = el("thead"); th.appendChild(tr); t.appendChild(th);
    var tb = el("tbody");
    rows.forEach(function (r) {
      var row = el("tr");
      r.forEach(function (c, i) { row.appendChild(el("td", i > 0 ? "num" : null, c)); });
      tb.appendChild(row);
    });
    t.appendChild(tb);
    return t;
  }
  var examples = D.examples.map(function (e) {
    var b = atob(e.att), a = new Uint8Array(b.length);
    for (var i = 0; i < b.length; i++) a[i] = b.charCodeAt(i);
    return { prompt: e.prompt, tokens: e.tokens, n: e.tokens.length, att: a, truncated: e.truncated, query: e.tokens.length - 1, pinned: false, spans: [], info: null };
  });
  var state = { head: null };
  function weight(e, layer, head, q, k) {
    if (k > q) return 0;
    var T = e.n;
    return e.att[(layer * H + head) * (T * (T + 1) / 2) + q * (q + 1) / 2 + k] / 255;
  }
  function paint(e) {
    if (!state.head) return;
    var lh = state.head.split("."), layer = +lh[0], head = +lh[1], q = e.query;
    var best = [];
    e.spans.forEach(function (s, k) {
      var w = weight(e, layer, head, q, k);
      s.style.backgroundColor = k > q ? "transparent" : "rgba(230, 85, 13, " + w.toFixed(3) + ")";
      s.style.color = (k <= q && w > 0.6) ? "#fff" : "";
      s.classList.toggle("query", k === q);
      s.classList.toggle("future", k > q);
      s.title = k <= q ? "attention from token " + q + " to token " + k + ": " + (100 * w).toFixed(1) + "%" : "later token (causal: not attended)";
      if (k <= q) best.push([w, k]);
    });
    best.sort(function (a, b) { return b[0] - a[0] || a[1] - b[1]; });
    var parts = best.slice(0, 3).map(function (p) { return "\u201c" + showTok(e.tokens[p[1]]) + "\u201d (" + p[1] + ") " + (100 * p[0]).toFixed(0) + "%"; });
    e.info.textContent = "head " + state.head + ", query \u201c" + showTok(e.tokens[q]) + "\u201d (" + q + ")" + (e.pinned ? " [pinned]" : "") + " attends most to: " + parts.join(", ");
  }
  function buildExamples(box) {
    examples.forEach(function (e, i) {
      var wrap = el("div", "example");
      wrap.appendChild(el("div", "ex-prompt", "Prompt " + (i + 1) + (e.truncated ? " (cut)" : "") + ": " + e.prompt));
      var toks = el("div", "tokens");
      e.spans = e.tokens.map(function (t, k) {
        var s = el("span", "tok", showTok(t));
        s.tabIndex = 0;
        s.dataset.k = String(k);
        s.addEventListener("mouseenter", function () { if (!e.pinned) { e.query = k; paint(e); } });
        s.addEventListener("focus", function () { if (!e.pinned) { e.query = k; paint(e); } });
        s.addEventListener("click", function () { if (e.pinned && e.query === k) { e.pinned = false; } else { e.pinned = true; e.query = k; } paint(e); });
        toks.appendChild(s);
        return s;
      });
      wrap.appendChild(toks);
      e.info = el("div", "ex-info");
      wrap.appendChild(e.info);
      box.appendChild(wrap);
    });
  }
  function renderDetail(name) {
    var h = D.heads[name];
    var title = document.getElementById("detail-title");
    var body = document.getElementById("detail-body");
    title.textContent = "Head " + name;
    while (body.firstChild) body.removeChild(body.firstChild);
    if (!h) { body.appendChild(el("p", "none", "No such head.")); return; }
    var roles = el("p");
    roles.appendChild(el("span", null, "roles: "));
    if (h.roles.length) h.roles.forEach(function (r) { roles.appendChild(el("span", "badge", r)); });
    else roles.appendChild(el("span", "none", "none"));
    body.appendChild(roles);
    body.appendChild(el("h4", null, "Scores (95% bootstrap interval over prompts)"));
    if (h.scores) {
      body.appendChild(table(["detector", "score", "95% CI", "uniform", "role at", "n"], h.scores.map(function (s) {
        return [s[0] + (s[6] !== null ? " (acc. " + num(s[6], 2) + ")" : ""), num(s[1]), "[" + num(s[2]) + ", " + num(s[3]) + "]", num(s[4]), s[7] === null || s[7] === undefined ? "n/a" : "\u2265 " + s[7], String(s[5])];
      })));
    } else body.appendChild(el("p", "none", D.failed.census ? "census FAILED: " + D.failed.census : "no census scores"));
    body.appendChild(el("h4", null, "Ablation of this head alone: change in " + (D.metric || "metric")));
    var ab = [];
    [["zero", h.zero], ["mean", h.mean]].forEach(function (p) {
      if (p[1]) ab.push([p[0], signed(p[1][0], 4), "[" + signed(p[1][1], 4) + ", " + signed(p[1][2], 4) + "]", num(p[1][3], 4), String(p[1][4])]);
    });
    if (ab.length) body.appendChild(table(["method", "\u0394", "95% CI", "ablated value", "items"], ab));
    else body.appendChild(el("p", "none", "no ablation results"));
    if (h.sink) {
      body.appendChild(el("h4", null, "Attention sink (Gu et al. alpha)"));
      body.appendChild(table(["setting", "alpha", "sd", "sink rate", "uniform"], h.sink.map(function (s) {
        return [s[0] ? "with BOS" : "no BOS", num(s[1]), num(s[2]), num(s[3]), num(s[4])];
      })));
    }
    if (h.importance !== undefined || h.pruned_at !== undefined) {
      body.appendChild(el("p", null, "pruning importance " + num(h.importance) + (h.pruned_at !== undefined ? "; removed when " + pct(h.pruned_at) + " of heads are pruned" : "")));
    }
    body.appendChild(el("h4", null, "Attention on example prompts (hover a token to see where it attends; click to pin)"));
    var box = el("div");
    body.appendChild(box);
    if (examples.length) { buildExamples(box); examples.forEach(paint); }
    else box.appendChild(el("p", "none", D.failed.examples ? "examples FAILED: " + D.failed.examples : "no example prompts"));
  }
  function select(name, scroll) {
    if (!D.heads[name]) return;
    state.head = name;
    document.querySelectorAll("#role-table tbody tr").forEach(function (tr) { tr.classList.toggle("selected", tr.dataset.head === name); });
    document.querySelectorAll("td.cell").forEach(function (td) { td.classList.toggle("sel", td.dataset.head === name); });
    renderDetail(name);
    if (scroll) document.getElementById("head-detail").scrollIntoView({ block: "nearest" });
  }
  var tbody = document.querySelector("#role-table tbody");
  tbody.addEventListener("click", function (ev) { var tr = ev.target.closest("tr"); if (tr) select(tr.dataset.head, false); });
  tbody.addEventListener("keydown", function (ev) { if (ev.key === "Enter" || ev.key === " ") { var tr = ev.target.closest("tr"); if (tr) { ev.preventDefault(); select(tr.dataset.head, false); } } });
  document.querySelectorAll("td.cell").forEach(function (td) { td.addEventListener("click", function () { select(td.dataset.head, true); }); });
  document.querySelectorAll("#role-table thead th").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = +th.dataset.col, isNum = th.dataset.type === "num";
      var dir = th.getAttribute("aria-sort") === "descending" ? 1 : (th.getAttribute("aria-sort") === "ascending" ? -1 : (isNum && col > 1 ? -1 : 1));
      document.querySelectorAll("#role-table thead th").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(tbody.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        if (isNum) {
          var fx = x === "" ? NaN : parseFloat(x), fy = y === "" ? NaN : parseFloat(y);
          if (isNaN(fx) && isNaN(fy)) return 0;
          if (isNaN(fx)) return 1;
          if (isNaN(fy)) return -1;
          return dir * (fx - fy);
        }
        return dir * (x < y ? -1 : x > y ? 1 : 0);
      });
      rows.forEach(function (r) { tbody.appendChild(r); });
    });
  });
  var roleSel = document.getElementById("role-filter"), search = document.getElementById("head-search"), count = document.getElementById("row-count");
  function filter() {
    var role = roleSel.value, q = search.value.trim().toLowerCase(), shown = 0, rows = tbody.rows;
    for (var i = 0; i < rows.length; i++) {
      var tr = rows[i], roles = tr.dataset.roles ? tr.dataset.roles.split(";") : [];
      var ok = role === "" || (role === "*" ? roles.length > 0 : role === "-" ? roles.length === 0 : roles.indexOf(role) >= 0);
      if (ok && q) ok = tr.dataset.head.indexOf(q) === 0 || tr.dataset.roles.toLowerCase().indexOf(q) >= 0;
      tr.hidden = !ok;
      if (ok) shown++;
    }
    count.textContent = shown + " of " + rows.length + " heads";
  }
  roleSel.addEventListener("change", filter);
  search.addEventListener("input", filter);
  select(D.initial, false);
})();
"""


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
    return f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


# --------------------------------------------------------------------------- the page


def render_html(report: Any) -> str:
    """The whole page for a :class:`headlens.reports.report.build.Report`."""
    model = escape(str(report.model))
    quick = bool(report.settings.get("quick"))
    bos = bool(report.settings.get("prepend_bos", True))
    sub = (
        f"{report.n_layers} layers \u00d7 {report.n_heads} heads \u00b7 BOS {'prepended' if bos else 'not prepended'} \u00b7 "
        + ("quick run (smoke-test settings: few prompts and windows)" if quick else "full run")
    )
    failed = report.failed
    status = ""
    if failed:
        names = ", ".join(escape(s.name) for s in failed)
        status = f'<p class="failed-banner"><strong>FAILED</strong>: {len(failed)} stage(s) failed: {names}. The sections they feed are marked below; the other stages are complete.</p>'
    manifest = escape(json.dumps(report.manifest, indent=2, sort_keys=False, default=str))
    body = f"""<header>
<h1>headlens report: <span id="model-name">{model}</span></h1>
<div class="sub">{escape(sub)}</div>
<nav><a href="#heads">heads</a><a href="#heatmaps">heatmaps</a><a href="#pruning">pruning</a><a href="#sinks">sinks</a><a href="#stages">stages</a><a href="#manifest">manifest</a></nav>
</header>
<main>
{status}
<section id="heads"><h2>Heads and their roles</h2>
{_banner(report, "census")}
<p>One row per head. Click a column header to sort, choose a role or type to filter, and click a head to see its scores with intervals and its attention on the example prompts.
A head gets a role when its score clears the threshold and the lower end of its 95% interval is at least twice the uniform baseline. \u0394 columns: change in {escape(_metric_label(_data_metric(report)))} when the head alone is ablated.</p>
{_metric_note(report)}
{_role_filter(report)}
<div class="heads-layout">
<div class="table-wrap">{_role_table(report)}</div>
<aside id="head-detail" aria-live="polite"><h3 id="detail-title">Head</h3><div id="detail-body"><p class="none">Select a head.</p></div></aside>
</div>
<h3>Example prompts</h3>
{_examples_list(report)}
</section>
<section id="heatmaps"><h2>Layer \u00d7 head heatmaps</h2>
<p>Click a cell to show that head. Scores of each detector (outlined: heads with the role), the sink score, the change in the metric under zero and mean ablation, and pruning importance.</p>
{_heatmaps(report)}
{_figure_links(report)}
</section>
<section id="pruning"><h2>Pruning curve</h2>
{_pruning(report)}
</section>
<section id="sinks"><h2>Attention sinks</h2>
{_sinks_summary(report)}
</section>
<section id="stages"><h2>Stages</h2>
{_stages_table(report)}
</section>
<section id="manifest"><h2>Manifest</h2>
<p>Model, tokenizer, settings, versions and the command line: everything needed to reproduce these numbers.</p>
<pre class="manifest" id="manifest-json">{manifest}</pre>
</section>
</main>"""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(_csp(), quote=False)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="headlens">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>headlens report: {model}</title>\n"
        f"<style>{CSS}</style>\n"
        "</head><body>\n"
        f"{body}\n"
        f'<script type="application/json" id="hl-data">{json_for_script(_data(report))}</script>\n'
        f"<script>{SCRIPT}</script>\n"
        "</body></html>\n"
    )


def _data_metric(report: Any) -> str:
    for attr in ("ablation_zero", "ablation_mean"):
        t = getattr(report, attr)
        if t is not None and len(t):
            return str(t["metric"].iloc[0])
    return "loss"
