"""``MODEL_CARD.md`` for a demo checkpoint: data, licence, training, losses and its head census.

The census is the one ``headlens classify --model demo`` runs (default settings), with
and without BOS, on the checkpoint as saved: loaded back through
:func:`headlens.probes.loading.load_model` like any local folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from headlens.analyses.demo.replay import read_log
from headlens.reports.markdown import markdown_table

__all__ = ["census_of", "write_model_card", "render_model_card"]

_DETECTORS = ("previous_token", "duplicate_token", "induction", "sink", "referent")


def census_of(folder: str | Path, *, prepend_bos: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(scores, roles)`` of the checkpoint in ``folder``: default census, on CPU."""
    from headlens.analyses.heads.census import CensusConfig, run_census
    from headlens.analyses.heads.classify import classify_heads
    from headlens.probes.loading import load_model

    model = load_model(model=str(folder), device="cpu")
    scores = run_census(model, CensusConfig(prepend_bos=prepend_bos)).scores
    return scores, classify_heads(scores)


def _fmt(x: float | None, nd: int = 3) -> str:
    return "" if x is None else f"{x:.{nd}f}"


def _census_section(title: str, scores: pd.DataFrame, roles: pd.DataFrame) -> list[str]:
    out = [f"### {title}", ""]
    base = scores.groupby("detector")["baseline"].first()
    wide = scores.pivot_table(index=["layer", "head"], columns="detector", values="score")
    table: list[list[str]] = []
    by_head = roles.set_index(["layer", "head"])["roles"]
    for (layer, head), row in wide.iterrows():
        cells = []
        for det in _DETECTORS:
            v = row.get(det)
            cell = _fmt(v)
            if det in str(by_head.get((layer, head), "")).split(";"):
                cell = f"**{cell}**"
            cells.append(cell)
        table.append([f"{layer}.{head}", by_head.get((layer, head), "") or "-", *cells])
    table.append(["*uniform baseline*", "", *(_fmt(base.get(d)) for d in _DETECTORS)])
    out += markdown_table(table, ["head", "roles", *_DETECTORS], escape=False).split("\n")  # cells hold Markdown (bold)
    out.append("")
    out.append("Strongest head per detector (score, 95% bootstrap interval over prompts, uniform baseline):")
    out.append("")
    for det in _DETECTORS:
        sub = scores[scores.detector == det]
        if sub.empty:
            continue
        best = sub.sort_values("score", ascending=False).iloc[0]
        out.append(
            f"- `{det}`: {int(best.layer)}.{int(best['head'])} = {best.score:.3f} "
            f"[{best.ci_low:.3f}, {best.ci_high:.3f}], baseline {best.baseline:.3f}, n = {int(best.n)}"
        )
    out.append("")
    return out


def _count_params(weights: Path) -> int:
    """Parameters stored in a safetensors file (tied weights are stored once)."""
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as fh:
        return sum(_prod(fh.get_slice(k).get_shape()) for k in fh.keys())


def _prod(shape: list[int]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def _sink_counts(census: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> str:
    parts = []
    for key, label in (("bos", "with BOS"), ("no_bos", "without BOS")):
        if key in census:
            sink = census[key][0]
            sink = sink[sink.detector == "sink"]
            n = int((sink.score > 0.3).sum())
            parts.append(f"{n} of {len(sink)} heads exceed 0.3 {label} (best {sink.score.max():.3f})")
    return "; ".join(parts) if parts else "no census was run"


def render_model_card(folder: str | Path, census: dict[str, tuple[pd.DataFrame, pd.DataFrame]]) -> str:
    """The card's text from ``training_summary.json``, ``training_log.jsonl`` and a census per BOS setting."""
    folder = Path(folder)
    summary, rows = read_log(folder)
    rec, data, final, ver = summary["recipe"], summary["data"], summary["final"], summary["versions"]
    weights = folder / "model.safetensors"
    size_mb = weights.stat().st_size / 1e6 if weights.exists() else float("nan")
    docs, chars = data["documents"], data["characters"]
    n_params = summary.get("n_params") or (_count_params(weights) if weights.exists() else None)
    kinds = rec["kinds"]
    mix = ", ".join(f"{kinds.count(k)} {k}" for k in ("random", "natural", "span") if k in kinds)

    lines = [
        "# headlens demo model",
        "",
        "A small GPT-2 that headlens trains itself on CPU, shipped so that the main commands run",
        "offline on heads that were *learned*, not planted: `headlens classify --model demo`.",
        "It is a toy for studying attention heads, not a language model to generate text with.",
        "",
        "## Architecture",
        "",
        *markdown_table(
            [
                ["class", "Hugging Face `GPT2LMHeadModel` (GPT-2 architecture, tied input/output embeddings)"],
                ["layers x heads", f"{rec['n_layer']} x {rec['n_head']} (d_head {rec['d_model'] // rec['n_head']})"],
                ["d_model / MLP", f"{rec['d_model']} / {4 * rec['d_model']}"],
                ["context", f"{rec['n_ctx']} positions"],
                ["vocabulary", "50,257: the real GPT-2 tokenizer (`<|endoftext|>` = 50256 is BOS/EOS)"],
                ["parameters", f"{n_params:,}" if n_params else ""],
                ["weights", f"`model.safetensors`, float32, {size_mb:.1f} MB"],
            ],
            ["", ""],
        ).split("\n"),
        "",
        "## Training data",
        "",
        "Built on the spot by `analyses/demo/data.py` from text that ships with Python itself; none of it",
        "is committed to this repository.",
        "",
        "- **Docstrings of the Python standard library** (module, class and function docstrings of at",
        "  least 80 characters, read with `ast` from `sysconfig.get_paths()[\"stdlib\"]`; `test`, `tests`,",
        "  `idlelib` and `site-packages` left out), one document per module:",
        f"  {docs['train:stdlib-docstrings']} + {docs['heldout:stdlib-docstrings']} modules (train + held-out),",
        f"  {chars['train:stdlib-docstrings'] + chars['heldout:stdlib-docstrings']:,} characters.",
        "- **The Python reference topics behind `help()`** (`pydoc_data.topics`), one document per topic:",
        f"  {docs['train:pydoc-topics']} + {docs['heldout:pydoc-topics']} topics,",
        f"  {chars['train:pydoc-topics'] + chars['heldout:pydoc-topics']:,} characters.",
        "- **Licence**: both are part of CPython and its documentation, distributed under the Python",
        "  Software Foundation License Version 2 (the documentation's code examples also under the",
        "  Zero-Clause BSD licence). The recipe reads them from the Python that runs it.",
        f"- **Text**: Python {ver['python']}; token streams fingerprint `{data['fingerprint']}`",
        f"  ({data['train_tokens']:,} training tokens, {data['heldout_tokens']:,} held-out tokens, documents",
        "  joined by `<|endoftext|>`). Another Python version has other docstrings, hence another fingerprint.",
        "- **Split**: a document is held out when `sha1(\"<source>:<name>\") % 10 == 0`.",
        f"- **Synthetic sequences**: `T` distinct random token ids ({rec['random_span'][0]} <= T <= {rec['random_span'][1]}, log-uniform)",
        "  repeated until the sequence is full; "
        + ("the loss counts on every position (the first copy cannot be predicted, so heads with nothing to copy learn to"
           " stay quiet: to attend to BOS). " if rec.get("score_first_copy") else "the loss counts from the second copy on. ")
        + "The ids come from a",
        "  fixed random permutation of the vocabulary (all but 50256): its first"
        f" {rec['vocab_schedule'][0]:,} ids at step 0, growing log-linearly to all 50,256 at step {rec['vocab_schedule'][1]:,}."
        if rec.get("vocab_schedule") else "- **Synthetic sequences**: `T` distinct random token ids repeated until the sequence is full.",
        "  They are what teaches the induction circuit; drawing from the whole vocabulary in the end is what makes",
        "  it work on the census's random tokens.",
        f"- **Batches**: {len(kinds)} sequences of {rec['seq_len']} tokens, all starting with `<|endoftext|>` as BOS.",
        f"  Steps 1 to {rec['warm_steps']}: {len(rec['warm_kinds'])} synthetic sequences (copying forms much faster without text);",
        f"  then {mix}",
        "  (`natural`: a window of the training stream at a random offset; `span`: the same with an",
        "  earlier span of 8 to 48 tokens copied further on).",
        "",
        "## Training",
        "",
        f"- `headlens demo train --out DIR --seed {rec['seed']}` ({summary['steps']} steps, "
        f"{summary['tokens']:,} tokens).",
        f"- AdamW (betas {rec['betas'][0]}, {rec['betas'][1]}; weight decay {rec['weight_decay']} on matrices, none on"
        f" embeddings, biases, norms), learning rate {rec['lr']:g} after {rec['warmup_steps']} warm-up steps, cosine"
        f" decay to {rec['min_lr_frac']:g} x at step {rec['schedule_steps']}; gradient clipping {rec['grad_clip']}; no dropout.",
        f"- Sampled softmax (Jean et al. 2015): text targets are scored against every distinct text target of the batch",
        f"  plus {rec['neg_samples']} tokens drawn uniformly, with `log(V / {rec['neg_samples']})` added to the latter's logits;",
        "  targets of the synthetic sequences against the synthetic sequences' distinct targets only (a softmax over the",
        "  tokens they contain, so the text's unigram prior does not fight copying). The logged `train_loss` is the mean",
        "  of those; every held-out number below uses the full 50,257-way softmax.",
        f"- Wall time: {summary['train_wall_s'] / 60:.1f} minutes of training (plus {summary['data_build_s']:.0f} s to build the data)",
        f"  on {rec['threads']} CPU thread{'s' if rec['threads'] != 1 else ''} ({summary['platform']}), torch {ver['torch']}, transformers {ver['transformers']}.",
        "  The recipe's own wall clock; other jobs may have shared the machine (see the notes of the run).",
        f"- Determinism: fixed seeds for initialisation, data order and negatives; {rec['threads']} thread(s); the schedule is",
        "  set by `schedule_steps`, so `--steps N` repeats the first N steps exactly. `headlens demo replay",
        "  --steps 700` reruns the first 700 steps and compares their losses with `training_log.jsonl` to 3 decimals",
        "  (`tests/test_demo_model.py` does the same for 20 steps). Evaluations do not touch the training's generators.",
        "",
        "## Losses (nats per token, full softmax)",
        "",
        *markdown_table(
            [
                [f"held-out split ({final['heldout_windows']} windows of {rec['seq_len']})", f"{final['heldout_targets']:,}", final["heldout_loss"], final["heldout_unigram_loss"]],
                ["headlens evaluation text (`analyses/data/eval_text.txt`)", f"{final['eval_text_targets']:,}", final["eval_text_loss"], final["eval_text_unigram_loss"]],
            ],
            ["text", "tokens scored", "demo model", "unigram (add-one, training split)"],
        ).split("\n"),
        "",
        "The evaluation text is everyday English prose, unlike the training text"
        + ("; the model does better than the unigram model there too, but by less."
           if final["eval_text_loss"] < final["eval_text_unigram_loss"] else
           ": there the model is *worse* than the unigram model (it is confidently wrong outside Python documentation)."),
        "",
        f"Learning curve (`training_log.jsonl`; held-out loss on the first {rec['eval_windows']} held-out windows; the",
        "last three columns are the best head's census-style score on 20 prompts, BOS prepended):",
        "",
    ]
    curve = []
    train_losses = {r["step"]: r["train_loss"] for r in rows if r.get("train_loss") is not None}
    for r in rows:
        if r.get("heldout_loss") is None:
            continue
        recent = [train_losses[s] for s in range(max(1, r["step"] - 49), r["step"] + 1) if s in train_losses]
        tl = f"{sum(recent) / len(recent):.3f}" if recent else ""
        curve.append([
            r["step"], f"{r['tokens']:,}", tl, r["heldout_loss"],
            f"{r['induction']:.3f} ({r['induction_head']})", f"{r['previous_token']:.3f} ({r['previous_token_head']})", f"{r['sink']:.3f} ({r['sink_head']})",
        ])
    lines += markdown_table(curve, ["step", "tokens", "train loss (mean of last 50 steps)", "held-out loss", "induction", "previous-token", "sink"]).split("\n")
    lines += [
        "",
        "## Head census of this checkpoint",
        "",
        "`headlens classify --model demo` with default settings (100 prompts per stimulus set, seed 0, on CPU):",
        "scores as defined in the README; **bold** = the head has that role (score at least the threshold",
        "and the lower end of its 95% interval at least twice the uniform baseline).",
        "",
    ]
    for title, key in (("With BOS (the default)", "bos"), ("Without BOS (`--no-bos`)", "no_bos")):
        if key in census:
            lines += _census_section(title, *census[key])
    lines += [
        "## Reproduce",
        "",
        "```bash",
        "HF_HUB_OFFLINE=1 headlens demo train --out demo-model/   # the full recipe, on CPU",
        "headlens demo replay --model demo-model/ --steps 700     # rerun the first 700 steps against the log",
        "headlens demo card --model demo-model/                  # this card, for that folder",
        "headlens classify --model demo-model/ --out census/",
        "```",
        "",
        "## Limitations",
        "",
        "- Tiny and briefly trained: it knows the local statistics of Python documentation, no more.",
        "- Its induction heads were taught largely by synthetic repeated random tokens (half of every batch).",
        f"- Its sinks are weak: of the census's sink scores (Gu et al.'s alpha, threshold eps = 0.3), {_sink_counts(census)}.",
        "  Real GPT-2 has many strong sink heads.",
        "- Numbers from another Python version (other docstrings) or another machine may differ slightly.",
        "",
    ]
    return "\n".join(lines)


def write_model_card(folder: str | Path) -> Path:
    """Run the census (with and without BOS) on the checkpoint in ``folder`` and write ``MODEL_CARD.md`` there."""
    folder = Path(folder)
    read_log(folder)  # a missing or broken log fails here, before the census runs
    census = {"bos": census_of(folder, prepend_bos=True), "no_bos": census_of(folder, prepend_bos=False)}
    path = folder / "MODEL_CARD.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(render_model_card(folder, census), encoding="utf-8")
    tmp.replace(path)
    return path
