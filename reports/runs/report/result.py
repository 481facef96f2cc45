"""The report as an object: :class:`Report` (every stage's tables), :class:`StageStatus`."""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.probes.errors import InputError
from headlens.probes.outputs import write_text
from headlens.reports.render.page.html import render_html
from headlens.reports.render.page.markdown import render_markdown
from headlens.reports.runs.report.settings import SMOKE_STAGES
from headlens.reports.runs.report.stage_examples import Example
from headlens.reports.runs.report.stages import STAGE_TITLES

log = logging.getLogger(__name__)

__all__ = ["Report", "StageStatus", "Example"]


@dataclass
class StageStatus:
    """One stage's outcome: ``done`` (run now), ``loaded`` (from an earlier run), ``failed``,
    ``skipped``."""

    name: str
    status: str
    seconds: float | None = None
    error: str | None = None
    files: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return STAGE_TITLES.get(self.name, self.name)

    @property
    def ok(self) -> bool:
        return self.status in ("done", "loaded")


@dataclass
class Report:
    """Everything a report shows, as DataFrames, plus the stage outcomes and the manifest.

    ``roles``: the long role table (``layer, head, name, role``: one row per (head, role), the
    census's source of truth); ``strongest``: per head its strongest detector and score.
    ``heads``: one row per head, joining every stage: ``name, layer, head, roles`` (the
    roles joined by ``;`` for reading: :func:`headlens.reports.render.tables.roles_joined`), one score
    column per detector, ``sink_alpha``, ``zero_delta``, ``mean_delta``, ``importance``,
    ``pruned_at`` (fraction of heads removed when pruning took it out).  The other tables are
    the stages' own (``None`` when the stage failed or was skipped).
    """

    model: str
    n_layers: int
    n_heads: int
    settings: dict[str, Any]
    stages: list[StageStatus]
    manifest: dict[str, Any]
    out_dir: Path | None = None
    scores: pd.DataFrame | None = None
    roles: pd.DataFrame | None = None
    #: The evidence stage's table (:data:`headlens.analyses.patching.evidence.EVIDENCE_COLUMNS`).
    evidence: pd.DataFrame | None = None
    strongest: pd.DataFrame | None = None
    sinks: pd.DataFrame | None = None
    sink_rates: pd.DataFrame | None = None
    ablation_zero: pd.DataFrame | None = None
    ablation_mean: pd.DataFrame | None = None
    pruning_curve: pd.DataFrame | None = None
    pruning_random: pd.DataFrame | None = None
    importance: pd.DataFrame | None = None
    examples: list[Example] = field(default_factory=list)
    #: The design stage's tables by name (``kv``, ``gqa_summary``, ``knockout_losses``, ``skipped``...;
    #: :data:`headlens.reports.runs.report.stage_design.TABLES`), ``None`` when it failed or was skipped.
    design: dict[str, pd.DataFrame] | None = None
    thresholds: dict[str, float] = field(default_factory=dict)
    heads: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def ok(self) -> bool:
        """True when no stage failed."""
        return not self.failed

    @property
    def failed(self) -> list[StageStatus]:
        return [s for s in self.stages if s.status == "failed"]

    def stage(self, name: str) -> StageStatus:
        return next(s for s in self.stages if s.name == name)

    def smoke_test(self, name: str) -> bool:
        """True when stage ``name`` ran with ``--quick``'s smoke-test settings and finished: its
        numbers state no finding, and every page marks it."""
        return bool(self.settings.get("quick")) and name in SMOKE_STAGES and self.stage(name).ok

    @property
    def metric_note(self) -> str | None:
        """Plain text for the page: what the embedding metric is and why it replaced the loss
        (``None`` when the stages measured loss)."""
        for name in ("ablation_zero", "ablation_mean", "pruning"):
            s = self.stage(name)
            if s.ok and s.info.get("metric") == "embedding":
                data = s.info.get("data") or {}
                why = str(s.info.get("metric_why") or "").rstrip(".")
                framing = data.get("framing") or {}
                framed = " and ".join(str(t) for t in (*framing.get("prefix", []), *framing.get("suffix", []))) or "no special tokens"
                return (
                    "Ablation and pruning measure the embedding change, not the loss: 1 - cosine between the sentence embedding "
                    f"(the last hidden state averaged over each sentence's tokens, {framed} included) and the unablated model's, "
                    f"averaged over {data.get('n_sentences', '?')} sentences of the evaluation text; the output head is not read"
                    + (f", because {why}." if why else ".")
                    + " Pruning ranks heads by this exact change (it has no gradient in the unablated model), and its threshold is an "
                    "absolute change."
                )
        return None

    @property
    def sinks_note(self) -> str | None:
        """Plain text: sink analyses the sinks stage left out, and why (``None`` when none)."""
        s = self.stage("sinks")
        left = s.info.get("left_out") if s.ok else None
        if not left:
            return None
        return f"Left out: {' and '.join(map(str, left.get('analyses', [])))} ({left.get('why', '')})."

    def html(self) -> str:
        """The self-contained page (what ``report.html`` holds)."""
        return render_html(self)

    def markdown(self) -> str:
        return render_markdown(self)

    def _repr_html_(self) -> str:
        """Inline in a notebook: the page in a sandboxed iframe (its CSS and scripts stay inside)."""
        doc = html.escape(self.html(), quote=True)
        style = "width:100%;height:820px;border:1px solid #ddd"
        return f'<iframe srcdoc="{doc}" sandbox="allow-scripts" style="{style}" title="headlens report"></iframe>'

    def write(self, out_dir: str | Path | None = None) -> tuple[Path, Path]:
        """Write ``report.html`` and ``report.md`` (atomically) into ``out_dir``."""
        out = Path(out_dir) if out_dir is not None else self.out_dir
        if out is None:
            raise InputError("no output folder: pass out_dir")
        return write_text(out / "report.html", self.html()), write_text(out / "report.md", self.markdown())

    def __repr__(self) -> str:
        states = ", ".join(f"{s.name}={s.status}" for s in self.stages)
        return f"Report(model={self.model!r}, {self.n_layers}x{self.n_heads} heads, {states})"
