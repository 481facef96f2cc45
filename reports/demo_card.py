"""``MODEL_CARD.md`` of a demo checkpoint: the facts of :mod:`headlens.analyses.demo.card`
rendered through its Jinja2 template (``analyses/demo/model_card.md.j2``) and written atomically.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from headlens.analyses.demo.card import census_of, card_facts, template_text
from headlens.analyses.demo.replay import read_log
from headlens.probes.outputs import write_text
from headlens.reports.markdown import markdown_table
from headlens.reports.tables import roles_joined

__all__ = ["render_model_card", "write_model_card"]

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
    for h, roles in zip(census["heads"], joined):
        cells = [f"**{_fmt(v)}**" if role else _fmt(v) for v, role in zip(h["scores"], h["has_role"])]
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
    losses = markdown_table(
        [
            [f"held-out split ({final['heldout_windows']} windows of {rec['seq_len']})", f"{final['heldout_targets']:,}", final["heldout_loss"], final["heldout_unigram_loss"]],
            ["headlens evaluation text (`analyses/data/eval_text.txt`)", f"{final['eval_text_targets']:,}", final["eval_text_loss"], final["eval_text_unigram_loss"]],
        ],
        ["text", "tokens scored", "demo model", "unigram (add-one, training split)"],
    )
    curve = markdown_table(
        [
            [
                r["step"], f"{r['tokens']:,}", _fmt(r["train_loss_mean"]), r["heldout_loss"],
                f"{r['induction']:.3f} ({r['induction_head']})", f"{r['previous_token']:.3f} ({r['previous_token_head']})", f"{r['sink']:.3f} ({r['sink_head']})",
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
    return {"arch_table": arch, "losses_table": losses, "curve_table": curve, "census_sections": sections, "sink_lines": sinks}


def render_model_card(folder: str | Path, census: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> str:
    """The card's Markdown from ``training_summary.json``, ``training_log.jsonl`` and a census per
    BOS setting (``{"bos": (scores, roles), "no_bos": ...}``)."""
    import jinja2

    facts = card_facts(folder, census)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["fmt"] = format
    return env.from_string(template_text()).render(**facts, **_tables(facts))


def write_model_card(folder: str | Path) -> Path:
    """Run the census (with and without BOS) on the checkpoint in ``folder`` and write ``MODEL_CARD.md`` there."""
    folder = Path(folder)
    read_log(folder)  # a missing or broken log fails here, before the census runs
    census = {"bos": census_of(folder, prepend_bos=True), "no_bos": census_of(folder, prepend_bos=False)}
    return write_text(folder / "MODEL_CARD.md", render_model_card(folder, census))
