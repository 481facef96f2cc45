"""What a study found, in the lines its command prints: one wording for the terminal and the notebook.

Each ``*_findings`` function takes a study's Result and returns :class:`Findings`: the ``lines`` the
command prints on stdout (roles by head, the strongest effects with their intervals, verdicts) and
the ``warnings`` it prints on stderr as ``note: ...`` (too few prompts for an interval, a detector
that cannot measure the model, a skipped variant).  The CLI prints them (adding where it wrote
the files); a Result's ``_repr_html_`` shows them above its tables.  A Result read back from a
folder words what its tables and manifest still hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from headlens.analyses.heads.classify import without_interval
from headlens.analyses.measure.evalset import METRIC_LABELS
from headlens.analyses.measure.stats import small_sample_note
from headlens.reports.render.census_summary import NO_INTERVAL
from headlens.reports.render.design_tables import gqa_reading, knockout_reading, text_table
from headlens.reports.render.evidence_text import evidence_lines
from headlens.reports.render.page.smoke import data_items
from headlens.reports.render.patching_tables import patch_lines
from headlens.reports.render.sink_lines import (
    SINK,
    listed_heads,
    population_of,
    role_counts_text,
    sink_evidence_line,
    sink_population_lines,
)
from headlens.reports.render.sinks_tables import lengths_lines, seed_text_lines
from headlens.reports.render.verdict_text import rank_test_words

if TYPE_CHECKING:
    from headlens.analyses.ablation.pruning import PruneRun
    from headlens.analyses.ablation.study import AblationRun
    from headlens.analyses.patching.activation import PatchRun
    from headlens.probes.capture import Capture

__all__ = [
    "Findings",
    "census_findings",
    "census_role_lines",
    "evidence_count_line",
    "patching_findings",
    "ablation_findings",
    "pruning_findings",
    "sinks_findings",
    "sink_heads_of",
    "sink_lengths_findings",
    "seed_text_findings",
    "gqa_findings",
    "projections_findings",
    "kv_findings",
    "verify_findings",
    "capture_findings",
]

#: Rows of the strongest-effect listings (ablation's ``|delta|``).
TOP_HEADS = 10


@dataclass(frozen=True)
class Findings:
    """``lines``: what the command prints on stdout; ``warnings``: its ``note:`` lines (without the prefix)."""

    lines: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.lines or self.warnings)


def _label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


# -- census -----------------------------------------------------------------------------------
def evidence_count_line(evidence: pd.DataFrame) -> str:
    """``evidence: 2 supported, 1 not testable here`` (``no role to test`` for an empty table)."""
    counts = evidence["evidence"].value_counts()
    return f"evidence: {', '.join(f'{v} {k}' for k, v in counts.items()) or 'no role to test'}"


def census_warnings(scores: pd.DataFrame, notes: dict[str, str] | None) -> list[str]:
    """What a census cannot say: a detector that cannot measure the model, scores without an
    interval (no role given from them; every score without one: no role assigned at all, as the summary says)."""
    out = [str(note) for note in (notes or {}).values()]
    if scores.empty or "ci_low" not in scores:
        return out
    unresolved = without_interval(scores)
    measured = scores["score"].notna()
    if unresolved.any() and not (measured & ~unresolved).any():
        out.append(f"all {int(unresolved.sum())} scores: {NO_INTERVAL.lower()}")
    elif unresolved.any():
        out.append(f"{int(unresolved.sum())} of {len(scores)} scores: {NO_INTERVAL.lower()} for them")
    return out


def _strongest(row: Any, scores: pd.DataFrame) -> str:
    """``  (induction 0.912 [0.881, 0.940])``: the head's strongest score with its interval; ``""`` when not in ``scores``."""
    det = getattr(row, "strongest_detector", None)
    if not det or scores.empty or not {"layer", "head", "detector", "score", "ci_low", "ci_high"} <= set(scores.columns):
        return ""
    hit = scores[(scores["layer"] == row.layer) & (scores["head"] == row.head) & (scores["detector"] == det)]
    if hit.empty or pd.isna(hit["score"].iloc[0]):
        return ""
    r = hit.iloc[0]
    interval = f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if pd.notna(r["ci_low"]) else ""
    return f"  ({det} {r['score']:.3f}{interval})"


def census_role_lines(heads: pd.DataFrame, scores: pd.DataFrame, roles: pd.DataFrame | None) -> list[str]:
    """How many heads have a role, then each head's roles with its strongest score and interval
    (``heads``: one row per head with ``roles`` joined and ``strongest_detector``).  When more than
    half the heads have the sink role, the first line counts the heads per role, the list holds the
    heads with a role other than sink, and the sinks follow as one population
    (:mod:`headlens.reports.render.sink_lines`).  The report page shows the same lines."""
    named = heads[heads["roles"].astype(str) != ""]
    population = population_of({"scores": scores, "roles": roles}) if roles is not None else None
    lines = [f"{len(named)} of {len(heads)} heads have a role"]
    if population is not None and roles is not None:  # sinks are the default state: the specific roles first
        lines[0] += f": {role_counts_text(roles, [str(d) for d in scores['detector'].unique()])}"
        named = listed_heads(heads, roles)
    lines += [f"  {r.name:>6}  {r.roles}{_strongest(r, scores)}" for r in named.itertuples()]
    return lines + (sink_population_lines(population) if population is not None else [])


def census_findings(tables: dict[str, pd.DataFrame], *, notes: dict[str, str] | None = None, evidence_seed: int | None = None) -> Findings:
    """``headlens classify``: how many heads have a role, each head's roles (:func:`census_role_lines`),
    then the evidence verdicts (``evidence_seed``: the evidence run's seed, named beside a sampled sink test);
    ``notes``: what a detector cannot measure on this model."""
    if "heads" not in tables:
        return Findings()
    scores = tables.get("scores", pd.DataFrame())
    lines = census_role_lines(tables["heads"], scores, tables.get("roles"))
    evidence = tables.get("evidence")
    if evidence is not None:
        lines.append(evidence_count_line(evidence))
        if population_of(tables) is not None:  # the sinks' verdicts in one line, as their roles
            lines += evidence_lines(evidence[evidence["role"].astype(str) != SINK])
            lines += sink_evidence_line(evidence, tables.get("roles"), evidence_seed)
        else:
            lines += evidence_lines(evidence)
    return Findings(tuple(lines), tuple(census_warnings(scores, notes)))


# -- patching ---------------------------------------------------------------------------------
def patching_findings(
    patching: PatchRun,
    directions: Sequence[str],
    *,
    agreement: dict[str, Any] | None = None,
    path: pd.DataFrame | None = None,
    dla: pd.DataFrame | None = None,
) -> Findings:
    """``headlens patch``: the gap, the attribution's agreement, the strongest heads, paths and DLA
    (:func:`~headlens.reports.render.patching_tables.patch_lines`); notes when effects are not normalised
    or the intervals rest on few pairs."""
    lines = patch_lines(patching, directions, agreement=agreement, path=path, dla=dla)
    reason = patching.gap.reason
    notes = [f"normalised effects are not reported: {reason}"] if reason else []
    info = patching.info
    small = small_sample_note((info.get("task") or {}).get("n_pairs"), items="pairs") if info.get("n_resamples", 1) > 0 else None
    return Findings(tuple(lines), tuple(notes + ([small] if small else [])))


# -- ablation and pruning ---------------------------------------------------------------------
def ablation_findings(run: AblationRun, *, basis: str = "", record: dict[str, Any]) -> Findings:
    """``headlens ablate``: what was measured (on ``basis``, when known), the unablated value, the heads with
    the largest ``|delta|`` (with the interval), the attribution's agreement (``record``: the manifest's
    ``ablation`` entry, for the mask and the intervals' items)."""
    table = run.table
    label = _label(run.metric)
    on = f" on {basis}" if basis else ""
    mask = record.get("mask")
    lines = [
        f"{run.config.method} ablation of {len(table)} head(s){on}; metric {label}",
        f"unablated {label}: {run.unablated_value:.6g}"
        + (f"; with the {len(mask['removed'])} masked head(s) removed: {run.masked_value:.6g}" if mask else ""),
        "heads with the largest |delta|:",
    ]
    shown = table.reindex(table["delta"].abs().sort_values(ascending=False).index).head(TOP_HEADS)
    cols = [
        c
        for c in ["layer", "head", "value", "delta", "ci_low", "ci_high"] + ([] if "attribution" in run.info else ["attribution"])
        if c in shown and not (c == "attribution" and shown[c].isna().all())  # attribution off: no column of NaN
    ]
    lines += shown[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}").split("\n")
    if run.spearman is not None:
        lines.append(
            f"attribution (first-order estimate) vs exact delta: Spearman rank correlation {run.spearman:.3f} over {len(table)} heads"
            + rank_test_words(run.spearman_p)
        )
    if "attribution" in run.info:
        lines.append(f"attribution {run.info['attribution']}")
    return Findings(tuple(lines), tuple(filter(None, [ablation_small_sample_note(record)])))


def ablation_small_sample_note(info: dict[str, Any]) -> str | None:
    """:func:`headlens.analyses.measure.stats.small_sample_note` for an ablation's intervals (``info``: the
    manifest's ``ablation`` section): their items and level as the run recorded them."""
    ci = info.get("ci") or {}
    if ci.get("bootstrap") == 0:
        return None  # no interval to warn about
    n, unit = data_items(info)
    return small_sample_note(n, items=unit, level=float(ci.get("level", 0.95)))


#: The pruning curve's columns the command prints.
CURVE_COLUMNS = (
    "step",
    "n_removed",
    "fraction_removed",
    "value",
    "relative_change",
    "random_mean",
    "random_std",
    "kv_bytes_saved_per_1k_tokens",
)


def pruning_findings(run: PruneRun, *, basis: str = "", model_name: str | None, dtype: Any, record: dict[str, Any]) -> Findings:
    """``headlens prune``: how it ranked, the curve against random orders, the removable fraction (``record``: the
    manifest's ``pruning`` entry, for the value and KV bytes at the removable set; ``dtype``: the model's, as recorded)."""
    curve, metric = run.curve, run.metric
    how = "exact single-head ablation importance" if metric == "embedding" else "gradient importance"
    on = f" on {basis}" if basis else ""
    lines = [f"pruned {model_name} by {how} in {len(curve) - 1} step(s){on}; metric {_label(metric)}, unablated {run.unablated_value:.6g}"]
    cols = [c for c in CURVE_COLUMNS if c in curve]
    lines += curve[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}").split("\n")
    max_increase = run.config.max_increase
    within = f"an embedding change of at most {max_increase:g}" if metric == "embedding" else f"+{max_increase:.0%}"
    lines.append(
        f"removable within {within}: {run.removable_fraction:.1%} of heads ({len(run.pruned)}), {_label(metric)} "
        f"{record['value_at_removable']:.6g};"
        f" KV cache saved: {record['kv_bytes_saved_per_1k_tokens_at_removable']:,} bytes per 1,000 tokens at "
        f"{str(dtype).removeprefix('torch.')}"
    )
    return Findings(tuple(lines))


# -- sinks ------------------------------------------------------------------------------------
def sink_heads_of(census: pd.DataFrame, bos: bool) -> list[tuple[int, int]]:
    """``(layer, head)`` of the sink heads of one BOS setting in a sinks census table, strongest first."""
    c = census[(census["bos"] == bos) & census["is_sink"]].sort_values("alpha_mean", ascending=False)
    return [(int(r.layer), int(r.head)) for r in c.itertuples()]


def sinks_findings(tables: dict[str, pd.DataFrame], eps: float, info: dict[str, Any]) -> Findings:
    """``headlens sinks``: per BOS setting the sink rate and mean alpha against uniform attention
    and the sink heads (``tables``: the run's ``sink_rates`` and ``census``); notes for uniform attention
    above ``eps`` and variants not run (``info``: the analysis')."""
    if "sink_rates" not in tables or "census" not in tables:
        return Findings()
    lines: list[str] = []
    warnings: list[str] = []
    for r in tables["sink_rates"].to_dict("records"):
        found = sink_heads_of(tables["census"], bool(r["bos"]))
        names = ", ".join(f"{layer}.{head}" for layer, head in found[:10]) + (" ..." if len(found) > 10 else "")
        lines.append(
            f"{'BOS' if r['bos'] else 'no BOS'}: sink rate {r['sink_rate']:.3f} (uniform attention {r['uniform_sink_rate']:.3f}), "
            f"mean alpha {r['mean_alpha']:.3f} (uniform {r['uniform_alpha']:.3f}), sink heads: {names or 'none'}"
        )
        if r["uniform_alpha"] > eps:
            warnings.append(
                f"uniform attention is itself above eps ({r['uniform_alpha']:.3f} > {eps:g}) at these lengths; "
                "use longer sequences (Gu et al.: 64 tokens)"
            )
    warnings += [f"first-token variant {name} not run: {why}" for name, why in (info.get("skipped_variants") or {}).items()]
    warnings += [f"{name} {why}" for name, why in (info.get("skipped") or {}).items()]
    return Findings(tuple(lines), tuple(warnings))


def sink_lengths_findings(table: pd.DataFrame, eps: float) -> Findings:
    """``headlens sinks --lengths``: the summary lines of its table (``eps``: the sink threshold it ran with)."""
    return Findings(tuple(lengths_lines(table, eps)))


def seed_text_findings(table: pd.DataFrame, top: int = 5) -> Findings:
    """``headlens sinks --text``: per head, the last token's attention to the first against 1/n (``table``: ``seed_text``)."""
    return Findings(tuple(seed_text_lines(table, top)))


# -- design -----------------------------------------------------------------------------------
def gqa_findings(summary: pd.DataFrame, comparison: pd.DataFrame | None, *, basis: str = "", n_items: int | None = None) -> Findings:
    """``headlens gqa``: loss, KV cache and JS per grouping (``summary``), and what they say with the similar-vs-adjacent
    ``comparison`` (no finding from fewer than 10 windows: ``n_items``; ``basis``: what the loss is measured on)."""
    on = f" on {basis}" if basis else ""
    lines = [f"GQA what-if, loss{on}; JS in bits, mean over queries", *text_table(summary).split("\n")]
    lines += gqa_reading(summary, comparison, n_items=n_items)
    return Findings(tuple(lines))


def projections_findings(losses: pd.DataFrame, role_changes: pd.DataFrame | None, *, basis: str = "") -> Findings:
    """``headlens projections``: the loss change of each knockout (``losses``) and what it says, with the roles
    each knockout changes (``role_changes``; ``basis``: what the loss is measured on)."""
    on = f" on {basis}" if basis else ""
    lines = [f"projection knockout, loss{on}", *text_table(losses).split("\n")]
    lines += knockout_reading(losses, role_changes)
    return Findings(tuple(lines))


def kv_findings(table: pd.DataFrame, model_name: str | None) -> Findings:
    """``headlens kv``: the bytes of each variant (``table``: ``kv``), and the formula beside each."""
    lines = [
        f"KV cache of {model_name} (2 tensors, K and V, per layer, per KV head, per cached token)",
        *text_table(table.drop(columns=["formula"], errors="ignore")).split("\n"),
    ]
    if "formula" in table:
        lines += [f"  {r.variant}: {r.formula}" for r in table.itertuples(index=False)]
    return Findings(tuple(lines))


def verify_findings(table: pd.DataFrame) -> Findings:
    """``headlens verify``: per layer the error of the hooked forward against the plain one (``table``: ``verify``);
    ok or which layers fail."""
    lines = table.to_string(index=False, float_format=lambda x: f"{x:.2e}").split("\n")
    bad = table[~table["ok"].astype(bool)] if "ok" in table else table.iloc[:0]
    errors = [c for c in ("max_err_pattern", "max_err_z", "max_row_sum_err") if c in table]
    if len(bad):
        lines.append(
            f"verify failed on layer(s) {', '.join(str(v) for v in bad['layer'])}: error above tolerance {table['tolerance'].iloc[0]:.1e}"
        )
    elif errors and len(table):
        lines.append(f"verify: ok ({len(table)} layers, worst error {table[errors].to_numpy().max():.2e})")
    return Findings(tuple(lines))


def capture_findings(capture: Capture, verify_table: pd.DataFrame | None = None) -> Findings:
    """``headlens capture``: which tensors were captured (by hook name), with their shapes, for how many prompts,
    and the verify table's lines."""
    lines = [f"{len(capture.tensors)} captured tensor(s) for {len(capture.batch)} prompt(s):"]
    lines += [f"  {name}  {list(t.shape)}" for name, t in capture.tensors.items()]
    verify = verify_findings(verify_table) if verify_table is not None else Findings()
    return Findings(tuple(lines) + verify.lines, verify.warnings)
