"""``MODEL_CARD.md`` of a demo checkpoint: the facts of :mod:`headlens.analyses.demo.card`
rendered through its Jinja2 template (``analyses/demo/model_card.md.j2``) and written atomically.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from headlens.analyses.demo.card import card_facts, census_of, heldout_text_losses, template_text
from headlens.analyses.demo.replay import read_log
from headlens.analyses.measure.spec import EvalSpec
from headlens.probes.outputs import write_text
from headlens.probes.settings import settings_of
from headlens.reports.render.markdown import markdown_table
from headlens.reports.render.tables import roles_joined
from headlens.reports.runs.report.settings import ReportSettings
from headlens.reports.runs.sweep.plan import SweepConfig

__all__ = ["command_windows", "render_model_card", "write_model_card"]

log = logging.getLogger(__name__)

_CENSUS_TITLES = {"bos": "With BOS (the default)", "no_bos": "Without BOS (`--no-bos`)"}
_SINK_LABELS = {"bos": "with BOS", "no_bos": "without BOS"}


def _fmt(x: float | None, nd: int = 3) -> str:
    return "" if x is None else f"{x:.{nd}f}"


def _census_table(census: dict[str, Any], detectors: list[str]) -> str:
    """One census as a Markdown table: a head's role scores in bold, the uniform baseline last."""
    heads = pd.DataFrame([{"layer": h["layer"], "head": h["head"]} for h in census["heads"]], columns=["layer", "head"])
    joined = roles_joined(census["roles"], heads)
    rows = []
    for h, roles in zip(census["heads"], joined, strict=True):
        cells = [f"**{_fmt(v)}**" if role else _fmt(v) for v, role in zip(h["scores"], h["has_role"], strict=True)]
        rows.append([f"{h['layer']}.{h['head']}", roles or "-", *cells])
    rows.append(["*uniform baseline*", "", *(_fmt(b) for b in census["baseline"])])
    return markdown_table(rows, ["head", "roles", *detectors], escape=False)  # cells hold Markdown (bold)


def _tables(facts: dict[str, Any]) -> dict[str, Any]:
    rec, final = facts["recipe"], facts["final"]
    n_params = facts["n_params"]
    arch = markdown_table(
        [
            ["class", "Hugging Face `GPT2LMHeadModel` (GPT-2 architecture, tied input/output embeddings)"],
            ["layers x heads", f"{rec['n_layer']} x {rec['n_head']} (d_head {rec['d_model'] // rec['n_head']})"],
            ["d_model / MLP", f"{rec['d_model']} / {4 * rec['d_model']}"],
            ["context", f"{rec['n_ctx']} positions"],
            ["vocabulary", "50,257: the real GPT-2 tokenizer (`<|endoftext|>` = 50256 is BOS/EOS)"],
            ["parameters", f"{n_params:,}" if n_params else ""],
            ["weights", f"`model.safetensors`, float32, {facts['size_mb']:.1f} MB"],
        ],
        ["", ""],
    )
    bases = facts["bases"]
    losses = markdown_table(
        [
            [bases["heldout"], f"{final['heldout_targets']:,}", final["heldout_loss"], final["heldout_unigram_loss"]],
            [bases["eval_text"], f"{final['eval_text_targets']:,}", final["eval_text_loss"], final["eval_text_unigram_loss"]],
        ],
        ["text", "tokens scored", "demo model", "unigram (add-one, training split)"],
    )
    text_losses = (
        markdown_table(
            [
                [r["what"], r["basis"], f"{r['loss']:.3f}", "" if r["window_sd"] is None else f"{r['window_sd']:.2f}"]
                for r in facts["text_losses"]
            ],
            ["command (its default windows)", "measured on", "loss", "sd over windows"],
        )
        if facts["text_losses"]
        else ""
    )
    curve = markdown_table(
        [
            [
                r["step"],
                f"{r['tokens']:,}",
                _fmt(r["train_loss_mean"]),
                r["heldout_loss"],
                f"{r['induction']:.3f} ({r['induction_head']})",
                f"{r['previous_token']:.3f} ({r['previous_token_head']})",
                f"{r['sink']:.3f} ({r['sink_head']})",
            ]
            for r in facts["curve"]
        ],
        ["step", "tokens", "train loss (mean of last 50 steps)", "held-out loss", "induction", "previous-token", "sink"],
    )
    sections = [
        {"title": _CENSUS_TITLES[key], "table": _census_table(c, facts["detectors"]), "best": c["best"]}
        for key, c in facts["census"].items()
    ]
    sinks = [{**s, "label": _SINK_LABELS[key]} for key, s in facts["sinks"].items()]
    return {
        "arch_table": arch,
        "losses_table": losses,
        "text_losses_table": text_losses,
        "curve_table": curve,
        "census_sections": sections,
        "sink_lines": sinks,
    }


def render_model_card(
    folder: str | Path, census: dict[str, tuple[pd.DataFrame, pd.DataFrame]], text_losses: list[dict[str, Any]] | None = None
) -> str:
    """The card's Markdown from ``training_summary.json``, ``training_log.jsonl``, a census per
    BOS setting (``{"bos": (scores, roles), "no_bos": ...}``) and the losses on the held-out text
    as the commands cut it (:func:`headlens.analyses.demo.card.heldout_text_losses`; None: not measured)."""
    facts = card_facts(folder, census, text_losses)
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False
    )
    env.filters["fmt"] = format
    return env.from_string(template_text()).render(**facts, **_tables(facts))


#: The commands that measure a loss on windows of an evaluation text (:class:`EvalSpec`'s ``n_windows`` x ``window``).
EVAL_TEXT_COMMANDS = ("ablate", "prune", "gqa", "projections")


def command_windows(summary: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(commands, n_windows, window)``: the windows each command cuts from a ``--text-file`` by
    default (read from the settings they take them from: :class:`EvalSpec`'s fields, whose defaults
    are the commands' options, tests/meta/test_settings_once.py), and every window of the held-out text."""
    rec, final = summary["recipe"], summary["final"]
    n_ctx = int(rec["n_ctx"])
    found: dict[tuple[int, int], list[str]] = {}
    spec = {info.name: info.default for info in settings_of(EvalSpec)}
    for name in EVAL_TEXT_COMMANDS:
        found.setdefault((int(spec["n_windows"]), min(int(spec["window"]), n_ctx)), []).append(f"`{name}`")
    for label, settings in (("`report`", ReportSettings()), ("`report --quick`", ReportSettings(quick=True))):
        d = settings.eval_data(n_ctx)
        found.setdefault((int(d["n_windows"]), int(d["window"])), []).append(label)
    sweep = SweepConfig()
    found.setdefault((sweep.loss_windows, min(sweep.loss_window, n_ctx)), []).append("`sweep`")
    rows = [(", ".join(labels), n, w) for (n, w), labels in sorted(found.items(), key=lambda kv: kv[0][0] * kv[0][1])]
    if final:
        n, w = int(final["heldout_windows"]), int(rec["seq_len"])
        rows.append((f"all of it: `--n-windows {n} --window {w}`", n, w))
    return rows


def write_model_card(folder: str | Path) -> Path:
    """Run the census (with and without BOS) on the checkpoint in ``folder``, measure its loss on
    the held-out text as the commands cut it, and write ``MODEL_CARD.md`` there."""
    folder = Path(folder)
    summary, _ = read_log(folder)  # a missing or broken log fails here, before the census runs
    census = {"bos": census_of(folder, prepend_bos=True), "no_bos": census_of(folder, prepend_bos=False)}
    text_losses = heldout_text_losses(folder, command_windows(summary)) if summary.get("final") else None
    return write_text(folder / "MODEL_CARD.md", render_model_card(folder, census, text_losses))
