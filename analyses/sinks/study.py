"""Attention-sink investigations: which heads sink, onto what, position or content, does the
sink carry anything, and what breaks without it.

``run_sinks(model, SinkConfig(...))`` returns a :class:`SinksRun` whose ``tables`` are the
DataFrames that ``headlens sinks`` writes as CSV files:

==========================  =====================================================================
table                       one row per
==========================  =====================================================================
``census``                  BOS setting x head: Gu et al. alpha (mean, std), sink rate, uniform
                            baseline, ``is_sink`` (mean alpha > eps)
``sink_rates``              BOS setting: the model's sink rate beside the uniform baseline
``sink_rate_by_layer``      BOS setting x layer
``content``                 first-token variant x head (:mod:`headlens.analyses.sinks.content`)
``content_verdicts``        head: position / BOS / first token / none
``secondary_positions``     BOS setting x head x key position: excess attention received
``secondary_tokens``        BOS setting x head x token (the ``top_k`` per head)
``secondary_tokens_overall`` BOS setting x token: excess averaged over every head
``sink_targets``            BOS setting x head: attention share of position 0, of the suffix
                            (``[SEP]``) and of punctuation, each beside its uniform baseline
``sink_targets_by_layer``   BOS setting x layer: the same, over heads; where the layer sinks
``value_norm``              BOS setting x head: attention share vs value-norm share of the sink
``removal``                 BOS setting x intervention: loss without the sink
``windowed``                BOS setting x window x keep_first: loss under windowed attention
==========================  =====================================================================

Definitions live with the code that computes them:

* Sink alpha, sink rate, sink heads and the uniform baseline: :mod:`headlens.analyses.sinks.rows`
  (computed by the reducers of :mod:`headlens.analyses.sinks.reducers`; which queries count on
  window and bidirectional layers: :mod:`headlens.analyses.sinks.layers`).
* Stimuli (evaluation-text windows, BOS settings, encoder framing): :mod:`headlens.analyses.sinks.batches`;
  which text the windows are cut from: :func:`headlens.analyses.measure.texts.choose_text`, the
  rule ablate uses (``config.text``; the default is the model's own held-out text when it carries
  one, else the built-in text; ``info["text"]`` records which, why, its SHA-256 and length).
* Secondary sinks and value-norm shares: :mod:`headlens.analyses.sinks.reductions`; sink targets:
  :mod:`headlens.analyses.sinks.targets`.
* **Encoders** (BERT): every statistic is bidirectional (uniform baseline ``1/n``, alpha over
  every query), and the sink is reported on ``[CLS]`` (position 0), ``[SEP]`` and punctuation
  separately (``sink_targets``, as Clark et al. 2019 did for BERT).  Sink removal and windowed
  attention measure next-token loss, which an encoder does not predict: they are skipped there,
  with the reason in ``info["skipped"]``.  First-token variants the tokenizer cannot express are
  skipped too (``info["skipped_variants"]``).
* Sink removal and windowed attention: :mod:`headlens.analyses.sinks.intervene`.
* **Seed measurement**: :mod:`headlens.analyses.sinks.seed`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from headlens.analyses.heads.stimulus_sets import model_framing
from headlens.analyses.measure.texts import TextChoice, choose_text
from headlens.analyses.sinks.batches import census_batch, frame_tokens, long_batch, long_length, n_windows
from headlens.analyses.sinks.config import SinkConfig, default_attn_windows
from headlens.analyses.sinks.content import VARIANTS, content_verdicts, variant_batches
from headlens.analyses.sinks.intervene import mean_loss, removal_hooks, window_hooks
from headlens.analyses.sinks.rows import census_rows, layer_rows, rate_row, secondary_rows, target_info, target_rows, value_norm_rows
from headlens.analyses.sinks.stream import stream_sink_stats
from headlens.analyses.stimuli import text_windows
from headlens.probes.engine import layer_causal
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.prompts import TokenBatch, tokenize_prompts

__all__ = ["SinksRun", "run_sinks"]

log = logging.getLogger(__name__)

#: ``progress(stage, done, total)``: ``stage`` names the pass ("census, BOS", ...).
StageProgress = Callable[[str, int, int], None]


def _bos_label(bos: bool) -> str:
    return "BOS" if bos else "no BOS"


@dataclass
class SinksRun:
    """Every table of the investigation (see the module docstring) plus what produced them."""

    config: SinkConfig
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.tables[name]

    def sink_heads(self, bos: bool) -> list[tuple[int, int]]:
        """``(layer, head)`` of the sink heads for one BOS setting, strongest first."""
        c = self.tables["census"]
        c = c[(c["bos"] == bos) & c["is_sink"]].sort_values("alpha_mean", ascending=False)
        return [(int(r.layer), int(r.head)) for r in c.itertuples()]


def _vocab_size(model: LoadedModel) -> int:
    return min(len(model.tokenizer), int(getattr(model.bridge.cfg, "d_vocab", len(model.tokenizer))))


def _check_against_model(model: LoadedModel, config: SinkConfig) -> None:
    """The checks of ``config`` that need the model (:class:`InputError`): context, framing tokens, heads."""
    if config.window > model.n_ctx:
        raise InputError(f"window={config.window} is larger than the model's context of {model.n_ctx} tokens", window=config.window)
    if True in config.bos:
        prefix, suffix = frame_tokens(model, True)  # an InputError when the tokenizer lacks them
        if config.window < len(prefix) + len(suffix) + 1:
            raise InputError(
                f"window={config.window} leaves no text token beside {len(prefix) + len(suffix)} special tokens", window=config.window
            )
    if config.runs("windowed") and not _is_encoder(model):
        length = long_length(model, config)
        if length > model.n_ctx:
            raise InputError(f"long_tokens={length} is larger than the model's context of {model.n_ctx} tokens", long_tokens=length)
        beyond = [k for k in config.keep_first if k >= length]
        if beyond:
            raise InputError(
                f"keep_first={beyond[0]} is beyond the {length}-token sequences of windowed attention (it would keep every"
                f" position, the same as full attention): give keep_first= below {length}",
                keep_first=beyond[0],
            )
        for w in config.attn_windows or ():
            if w > length:
                raise InputError(
                    f"attn_windows={w} is larger than the context the windowed run uses"
                    f" ({length} tokens; set it with long_tokens=, at most {model.n_ctx})",
                    window=w,
                )
    if config.heads:
        check_layers_heads(model, None, config.heads)


# ----------------------------------------------------------------------------- the run


def run_sinks(
    model: LoadedModel,
    config: SinkConfig | None = None,
    *,
    progress: StageProgress | None = None,
) -> SinksRun:
    """Run every analysis ``config`` asks for and return the tables.

    ``progress(stage, done, total)`` is called after each batch of each pass.
    """
    config = config or SinkConfig()
    _check_against_model(model, config)
    choice = choose_text(model, config.text)
    report = SinksRun(config=config)
    report.info = {"n_layers": model.n_layers, "n_heads": model.n_heads, "n_ctx": model.n_ctx, "vocab_size": _vocab_size(model)}
    if config.prompts is None or (config.runs("windowed") and not _is_encoder(model)):
        report.info["text"] = choice.describe()
        log.info("sinks: evaluation windows cut from the %s (%s)", choice.label, choice.why)

    def prog(stage: str) -> Callable[[int, int], None] | None:
        report_to = progress
        if report_to is None:
            return None
        return lambda done, total: report_to(stage, done, total)

    batches = _run_census(model, config, report, prog, choice)
    if config.runs("content"):
        _run_content(model, config, report, prog, choice)
    encoder = _is_encoder(model)
    for name in ("removal", "windowed"):
        if config.runs(name) and encoder:
            report.info.setdefault("skipped", {})[name] = (
                "not run on an encoder: it measures next-token loss, which a bidirectional encoder does not predict"
                " (each position sees the token it would predict)"
            )
    if config.runs("removal") and not encoder:
        _run_removal(model, config, report, batches, prog)
    if config.runs("windowed") and not encoder:
        _run_windowed(model, config, report, prog, choice)
    return report


def _run_census(
    model: LoadedModel,
    config: SinkConfig,
    report: SinksRun,
    prog: Callable[[str], Callable[[int, int], None] | None],
    choice: TextChoice,
) -> dict[bool, TokenBatch]:
    """The sink census of every BOS setting (one streamed pass each) and the tables it gives:
    census, rates (overall and by layer), targets, and the secondary sinks and value norms where
    asked for; returns the batches (the removal pass reuses them)."""
    census, rates, by_layer, pos_rows, tok_rows, overall_rows, vn_rows = [], [], [], [], [], [], []
    head_target_rows, layer_target_rows = [], []
    batches: dict[bool, TokenBatch] = {}
    report.info["framing"] = {_bos_label(b): _framing(model, b) for b in config.bos}
    for bos in config.bos:
        batch = census_batch(model, config, bos, choice.text)
        batches[bos] = batch
        stats = stream_sink_stats(
            model,
            batch,
            eps=config.eps,
            secondary=config.runs("secondary"),
            value_norm=config.runs("value_norm"),
            targets=True,
            batch_size=config.batch_size,
            progress=prog(f"census, {_bos_label(bos)}"),
        )
        census += census_rows(stats, bos, config.eps)
        t_rows, t_layer = target_rows(stats, bos)
        head_target_rows, layer_target_rows = head_target_rows + t_rows, layer_target_rows + t_layer
        report.info.setdefault("sink_targets", {})[_bos_label(bos)] = target_info(model, stats, bos)
        if stats.layers.attention_notes():
            report.info["attention_notes"] = stats.layers.attention_notes()
        rates.append(rate_row(stats, bos, config.eps, float(batch.lengths.float().mean())))
        by_layer += layer_rows(stats, bos)
        if config.runs("secondary"):
            p, t, o = secondary_rows(stats, bos, model.tokenizer, config.top_k, config.min_count)
            pos_rows, tok_rows, overall_rows = pos_rows + p, tok_rows + t, overall_rows + o
        if config.runs("value_norm"):
            vn_rows += value_norm_rows(stats, bos)
        if stats.layers.window_notes():
            report.info["window_notes"] = stats.layers.window_notes()
    report.tables["census"] = pd.DataFrame(census)
    report.tables["sink_rates"] = pd.DataFrame(rates)
    report.tables["sink_rate_by_layer"] = pd.DataFrame(by_layer)
    report.tables["sink_targets"] = pd.DataFrame(head_target_rows)
    report.tables["sink_targets_by_layer"] = pd.DataFrame(layer_target_rows)
    report.info["n_sequences"] = {_bos_label(b): len(batches[b]) for b in config.bos}
    report.info["stimuli"] = "prompts" if config.prompts is not None else f"windows of the {choice.label}"
    if config.runs("secondary"):
        report.tables["secondary_positions"] = pd.DataFrame(pos_rows)
        report.tables["secondary_tokens"] = pd.DataFrame(tok_rows)
        report.tables["secondary_tokens_overall"] = pd.DataFrame(overall_rows)
    if config.runs("value_norm"):
        report.tables["value_norm"] = pd.DataFrame(vn_rows)
    return batches


def _is_encoder(model: LoadedModel) -> bool:
    return bool(getattr(model, "is_encoder", False)) or not all(layer_causal(model))


def _framing(model: LoadedModel, prepend_bos: bool) -> dict[str, Any]:
    return model_framing(model, prepend_bos)


class _Steps:
    """Progress over several passes of one stage: ``(batches done so far, passes x batches per pass)``."""

    def __init__(self, progress: Callable[[int, int], None] | None, n_passes: int) -> None:
        self.progress = progress
        self.n_passes = n_passes
        self.passes_done = -1

    def next_pass(self) -> Callable[[int, int], None] | None:
        self.passes_done += 1
        if self.progress is None:
            return None
        offset, report = self.passes_done, self.progress
        return lambda done, total: report(offset * total + done, self.n_passes * total)


def _run_content(model: LoadedModel, config: SinkConfig, report: SinksRun, prog: Callable[[str], Any], choice: TextChoice) -> None:
    prefix, suffix = frame_tokens(model, True) if _is_encoder(model) else ([model.bos_id] if model.bos_id is not None else [], [])
    if config.prompts is not None:
        body_batch = tokenize_prompts(
            model.tokenizer, list(config.prompts), prepend_bos=False, n_ctx=config.window - 1 - len(suffix), truncate=True, frame=([], [])
        )
        if bool((body_batch.lengths != body_batch.lengths[0]).any()):
            shortest = int(body_batch.lengths.min())
            body = body_batch.tokens[:, :shortest]
        else:
            body = body_batch.tokens
        if config.n_prompts is not None:
            body = body[: config.n_prompts]
    else:
        n = n_windows(model, config, choice.text)
        body = text_windows(model.tokenizer, choice.text, config.window - 1 - len(suffix), n, frame=([], []))
    rows = []
    skipped: dict[str, str] = {}
    first = prefix[0] if prefix else None
    variants = variant_batches(
        body,
        model.tokenizer,
        first,
        vocab_size=_vocab_size(model),
        seed=config.seed,
        suffix=suffix,
        skipped=skipped,
        avoid_special=_is_encoder(model),
    )
    if skipped:
        report.info["skipped_variants"] = skipped
    step = _Steps(prog("first-token variants"), len(variants))
    for name, batch in variants.items():
        stats = stream_sink_stats(model, batch, eps=config.eps, keys=(0, 1), batch_size=config.batch_size, progress=step.next_pass())
        a0, a1, rate = stats.alpha.mean(0), stats.alpha.mean(1), stats.alpha.rate(0)
        for layer in range(model.n_layers):
            for head in range(model.n_heads):
                rows.append(
                    {
                        "variant": name,
                        "layer": layer,
                        "head": head,
                        "alpha_first": float(a0[layer, head]),
                        "alpha_second": float(a1[layer, head]),
                        "sink_rate": float(rate[layer, head]),
                        "uniform_alpha": stats.alpha.uniform_mean(0, layer),
                        "uniform_alpha_second": stats.alpha.uniform_mean(1, layer),
                    }
                )
    table = pd.DataFrame(rows)
    table["variant"] = pd.Categorical(table["variant"], categories=[v for v in VARIANTS if v in set(table["variant"])], ordered=True)
    report.tables["content"] = table
    report.tables["content_verdicts"] = content_verdicts(table, config.eps)


def _removal_plan(model: LoadedModel, config: SinkConfig, report: SinksRun, bos: bool) -> list[tuple[str, dict[int, list[int]]]]:
    plan: list[tuple[str, dict[int, list[int]]]] = [("all heads", {layer: list(range(model.n_heads)) for layer in range(model.n_layers)})]
    if config.heads:
        chosen = list(dict.fromkeys(config.heads))
        label = "chosen heads"
    else:
        chosen = report.sink_heads(bos)
        label = "sink heads"
    if chosen:
        together: dict[int, list[int]] = {}
        for layer, head in chosen:
            together.setdefault(layer, []).append(head)
        plan.append((label, together))
        if len(chosen) > 1:
            for layer, head in chosen[: config.max_single]:
                plan.append((f"{layer}.{head}", {layer: [head]}))
        else:
            plan[-1] = (f"{chosen[0][0]}.{chosen[0][1]}", together)
    return plan


def _run_removal(
    model: LoadedModel, config: SinkConfig, report: SinksRun, batches: dict[bool, TokenBatch], prog: Callable[[str], Any]
) -> None:
    rows = []
    for bos in config.bos:
        batch = batches[bos]
        plan = _removal_plan(model, config, report, bos)
        step = _Steps(prog(f"sink removal, {_bos_label(bos)}"), 1 + len(plan))
        base, n_tok = mean_loss(model, batch, batch_size=config.batch_size, progress=step.next_pass())
        rows.append({"bos": bos, "removed": "none", "n_heads": 0, "heads": "", "loss": base, "delta_loss": 0.0, "n_tokens": n_tok})
        for label, heads in plan:
            loss, _ = mean_loss(model, batch, removal_hooks(heads), batch_size=config.batch_size, progress=step.next_pass())
            names = ",".join(f"{layer}.{h}" for layer, hs in sorted(heads.items()) for h in sorted(hs))
            rows.append(
                {
                    "bos": bos,
                    "removed": label,
                    "n_heads": sum(len(h) for h in heads.values()),
                    "heads": names if label != "all heads" else "all",
                    "loss": loss,
                    "delta_loss": loss - base,
                    "n_tokens": n_tok,
                }
            )
    report.tables["removal"] = pd.DataFrame(rows)


def _run_windowed(model: LoadedModel, config: SinkConfig, report: SinksRun, prog: Callable[[str], Any], choice: TextChoice) -> None:
    rows = []
    for bos in config.bos:
        batch = long_batch(model, config, bos, choice.text)
        report.info.setdefault("n_long_sequences", {})[_bos_label(bos)] = len(batch)
        length = int(batch.tokens.shape[1])
        windows = config.attn_windows or default_attn_windows(length)
        step = _Steps(prog(f"windowed attention, {_bos_label(bos)}"), 1 + len(windows) * len(config.keep_first))
        full, n_tok = mean_loss(model, batch, batch_size=config.batch_size, progress=step.next_pass())
        rows.append(
            {
                "bos": bos,
                "window": length,
                "keep_first": 0,
                "full_attention": True,
                "loss": full,
                "delta_loss": 0.0,
                "seq_tokens": length,
                "n_tokens": n_tok,
            }
        )
        for w in windows:
            for k in config.keep_first:
                loss, _ = mean_loss(
                    model, batch, window_hooks(model.n_layers, w, k), batch_size=config.batch_size, progress=step.next_pass()
                )
                rows.append(
                    {
                        "bos": bos,
                        "window": w,
                        "keep_first": k,
                        "full_attention": False,
                        "loss": loss,
                        "delta_loss": loss - full,
                        "seq_tokens": length,
                        "n_tokens": n_tok,
                    }
                )
    report.tables["windowed"] = pd.DataFrame(rows)
