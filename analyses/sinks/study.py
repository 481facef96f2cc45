"""Attention-sink investigations: which heads sink, onto what, position or content, does the
sink carry anything, and what breaks without it.

``run_sinks(model, SinkConfig(...))`` returns a :class:`SinkReport` whose ``tables`` are the
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

Definitions:

* **Sink alpha** (Gu et al. 2024): ``alpha[l,h] = mean over queries i of A[i, 0]`` per
  sequence; a (sequence, layer, head) sinks when ``alpha > eps``; the **sink rate** is the
  fraction of (sequence, layer, head) that sink.  Stimuli: ``window`` tokens (64 in Gu et al.)
  cut from the project's evaluation text, with and without a prepended BOS (the BOS counts
  toward the window), up to ``n_prompts`` sequences (Gu et al. used about 100).
* **Uniform baseline**: the same numbers for a head that gives ``1/(i+1)`` to every key
  (alpha = ``H_T / T``, 0.074 at T = 64).
* A head **is a sink head** when its alpha averaged over sequences exceeds ``eps``.
* Secondary sinks, value-norm shares and sink targets: :mod:`headlens.analyses.sinks.stream`.
* **Encoders** (BERT): every sequence is ``[CLS] text [SEP]`` (``window`` tokens in all;
  ``bos=True`` means the model's framing, :meth:`LoadedModel.frame`), every statistic is
  bidirectional (uniform baseline ``1/n``, alpha over every query), and the sink is reported on
  ``[CLS]`` (position 0), ``[SEP]`` and punctuation separately (``sink_targets``, as Clark et
  al. 2019 did for BERT).  Sink removal and windowed attention measure next-token loss, which an
  encoder does not predict: they are skipped there, with the reason in ``info["skipped"]``.
  First-token variants the tokenizer cannot express are skipped too (``info["skipped_variants"]``).
* Sink removal and windowed attention: :mod:`headlens.analyses.sinks.intervene`.
* **Seed measurement** (:func:`seed_measurement`): for one text, per head, the last token's
  attention to the first token against ``1/n`` (what a uniform head would give), strongest first.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from headlens.analyses.sinks.content import VARIANTS, content_verdicts, variant_batches
from headlens.analyses.sinks.intervene import mean_loss, removal_hooks, window_hooks
from headlens.analyses.sinks.stream import TARGET_GROUPS, StreamStats, batch_attention_mask, layer_causal, run_to_last_pattern, stream_sink_stats
from headlens.analyses.stimuli import eval_text, text_windows
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.prompts import TokenBatch, tokenize_prompts

__all__ = [
    "ANALYSES",
    "SinkConfig",
    "SinkReport",
    "run_sinks",
    "seed_measurement",
    "census_batch",
    "long_batch",
    "default_attn_windows",
    "seed_tables",
    "DEFAULT_MAX_PROMPTS",
]

#: The parts of the investigation, in the order they run.
ANALYSES: tuple[str, ...] = ("census", "content", "secondary", "value_norm", "removal", "windowed")

#: Gu et al. used about 100 sequences; the evaluation text holds 90 windows of 64 GPT-2 tokens.
DEFAULT_MAX_PROMPTS = 100

#: ``progress(stage, done, total)``: ``stage`` names the pass ("census, BOS", ...).
StageProgress = Callable[[str, int, int], None]


def _bos_label(bos: bool) -> str:
    return "BOS" if bos else "no BOS"


@dataclass(frozen=True, kw_only=True)
class SinkConfig:
    """What to measure.  Checks that need no model run on construction (:class:`InputError`).

    ``n_prompts``: how many sequences (default: every window the evaluation text holds, at
    most :data:`DEFAULT_MAX_PROMPTS`; all of ``prompts`` when given).
    ``bos``: the prepend-BOS settings to run, e.g. ``(False, True)``.  ``prompts``: your own
    texts instead of the evaluation text (each cut to ``window`` tokens).  ``heads``: heads whose
    sink is removed (together and one by one); default: the sink heads the census finds (at most
    ``max_single`` of them one by one, strongest first).  ``attn_windows``: window sizes for
    windowed attention (default :func:`default_attn_windows`); ``long_tokens`` (default
    ``min(n_ctx, 1024)``) and ``n_long``: length and number of the long evaluation sequences.
    ``keep_first``: how many first tokens windowed attention keeps (0 = none; always run).
    ``skip``: names from :data:`ANALYSES` not to run (the census always runs).
    """

    eps: float = 0.3
    window: int = 64
    n_prompts: int | None = None
    bos: tuple[bool, ...] = (False, True)
    prompts: tuple[str, ...] | None = None
    heads: tuple[tuple[int, int], ...] | None = None
    max_single: int = 8
    keep_first: tuple[int, ...] = (0, 1, 4)
    attn_windows: tuple[int, ...] | None = None
    long_tokens: int | None = None
    n_long: int = 2
    top_k: int = 5
    min_count: int = 3
    batch_size: int = 8
    seed: int = 0
    skip: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < float(self.eps) < 1 or math.isnan(self.eps):
            raise InputError(f"--eps must be strictly between 0 and 1, got {self.eps}", eps=self.eps)
        _positive("--window", self.window, minimum=2)
        if self.n_prompts is not None:
            _positive("--n-prompts", self.n_prompts)
        if not self.bos or any(not isinstance(b, bool) for b in self.bos):
            raise InputError("bos must name at least one setting: True (prepend BOS) and/or False", bos=self.bos)
        object.__setattr__(self, "bos", tuple(dict.fromkeys(self.bos)))
        for k in self.keep_first:
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise InputError(f"--keep-first k must be a non-negative number of tokens, got {k}", keep_first=k)
        object.__setattr__(self, "keep_first", tuple(sorted({0, *self.keep_first})))
        for w in self.attn_windows or ():
            _positive("--attn-windows", w)
        if self.attn_windows is not None:
            object.__setattr__(self, "attn_windows", tuple(sorted(set(self.attn_windows))))
        if self.long_tokens is not None:
            _positive("--long-tokens", self.long_tokens, minimum=2)
        for name in ("n_long", "top_k", "min_count", "batch_size", "max_single"):
            _positive(f"--{name.replace('_', '-')}", getattr(self, name))
        unknown = [s for s in self.skip if s not in ANALYSES or s == "census"]
        if unknown:
            raise InputError(f"cannot skip {', '.join(unknown)}: choose from {', '.join(ANALYSES[1:])}", skip=self.skip)
        if self.prompts is not None and not self.prompts:
            raise InputError("no prompt given")

    def runs(self, name: str) -> bool:
        return name not in self.skip


def _positive(flag: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{flag} must be an integer of at least {minimum}, got {value}", value=value)


def default_attn_windows(long_tokens: int) -> tuple[int, ...]:
    """8, 32, 128, 512, ... up to half the long sequence (at least one size)."""
    sizes = []
    w = 8
    while w <= long_tokens // 2:
        sizes.append(w)
        w *= 4
    return tuple(sizes) or (max(1, long_tokens // 2),)


@dataclass
class SinkReport:
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


# ----------------------------------------------------------------------------- stimuli


def _vocab_size(model: LoadedModel) -> int:
    return min(len(model.tokenizer), int(getattr(model.bridge.cfg, "d_vocab", len(model.tokenizer))))


def _frame(model: LoadedModel, prepend_bos: bool) -> tuple[list[int], list[int]]:
    from headlens.analyses.heads.census import model_frame

    return model_frame(model, prepend_bos)


def _tokens_batch(tokens: torch.Tensor, prepend_bos: bool, frame: tuple[list[int], list[int]] | None = None) -> TokenBatch:
    n, width = tokens.shape
    kwargs: dict[str, Any] = {"tokens": tokens, "lengths": torch.full((n,), width, dtype=torch.long), "strings": [[] for _ in range(n)], "prepend_bos": prepend_bos, "pad_id": 0}
    if frame is not None and "n_prefix" in {f.name for f in dataclasses.fields(TokenBatch)}:
        kwargs.update(n_prefix=len(frame[0]), n_suffix=len(frame[1]))
    return TokenBatch(**kwargs)


def _tokenize(model: LoadedModel, prompts: Sequence[str], prepend_bos: bool, n_ctx: int, truncate: bool) -> TokenBatch:
    """Prompts wrapped in the model's framing (``[BOS] text``, ``[CLS] text [SEP]``), at most ``n_ctx`` tokens each."""
    frame = _frame(model, prepend_bos)
    if "frame" in inspect.signature(tokenize_prompts).parameters:
        return tokenize_prompts(model.tokenizer, list(prompts), prepend_bos=prepend_bos, n_ctx=n_ctx, truncate=truncate, frame=frame)
    if frame[1]:
        raise InputError("this version of probes.prompts cannot wrap prompts in [CLS] ... [SEP]; run with --no-bos")
    return tokenize_prompts(model.tokenizer, list(prompts), prepend_bos=prepend_bos, n_ctx=n_ctx, truncate=truncate)


def _available_windows(model: LoadedModel, window: int, prepend_bos: bool) -> int:
    n_text = len(model.tokenizer(eval_text(), add_special_tokens=False, verbose=False)["input_ids"])
    prefix, suffix = _frame(model, prepend_bos)
    return n_text // max(window - len(prefix) - len(suffix), 1)


def census_batch(model: LoadedModel, config: SinkConfig, prepend_bos: bool) -> TokenBatch:
    """The census sequences: ``config.prompts`` cut to ``window`` tokens, or evaluation-text windows.

    Without ``n_prompts`` limits, as many evaluation-text windows as the text holds for every
    BOS setting (the same count for each), at most ``n_prompts``.
    """
    if config.prompts is not None:
        batch = _tokenize(model, config.prompts, prepend_bos, config.window, True)
        return batch if config.n_prompts is None else batch.select(slice(0, config.n_prompts))
    n = _n_windows(model, config)
    frame = _frame(model, prepend_bos)
    tokens = text_windows(model.tokenizer, eval_text(), config.window, n, frame=frame)
    return _tokens_batch(tokens, prepend_bos, frame)


def _n_windows(model: LoadedModel, config: SinkConfig) -> int:
    """How many evaluation-text windows the census uses (the same for every BOS setting)."""
    n = min(_available_windows(model, config.window, b) for b in (*config.bos, False))
    if config.n_prompts is None:
        return min(n, DEFAULT_MAX_PROMPTS)
    if config.n_prompts > n:
        raise InputError(
            f"--n-prompts {config.n_prompts}: the evaluation text holds only {n} windows of {config.window} tokens; ask for at most {n}",
            n_prompts=config.n_prompts,
        )
    return config.n_prompts


def long_batch(model: LoadedModel, config: SinkConfig, prepend_bos: bool) -> TokenBatch:
    """Long evaluation sequences for windowed attention: ``n_long`` windows of ``long_tokens``."""
    length = config.long_tokens or min(model.n_ctx, 1024)
    n = min(config.n_long, max(1, _available_windows(model, length, prepend_bos)))
    frame = _frame(model, prepend_bos)
    tokens = text_windows(model.tokenizer, eval_text(), length, n, frame=frame)
    return _tokens_batch(tokens, prepend_bos, frame)


def _check_against_model(model: LoadedModel, config: SinkConfig) -> None:
    if config.window > model.n_ctx:
        raise InputError(f"--window {config.window} is larger than the model's context of {model.n_ctx} tokens", window=config.window)
    if True in config.bos:
        prefix, suffix = _frame(model, True)  # an InputError when the tokenizer lacks them
        if config.window < len(prefix) + len(suffix) + 1:
            raise InputError(f"--window {config.window} leaves no text token beside {len(prefix) + len(suffix)} special tokens", window=config.window)
    if config.runs("windowed") and not _is_encoder(model):
        length = config.long_tokens or min(model.n_ctx, 1024)
        if length > model.n_ctx:
            raise InputError(f"--long-tokens {length} is larger than the model's context of {model.n_ctx} tokens", long_tokens=length)
        for w in config.attn_windows or ():
            if w > length:
                raise InputError(
                    f"--attn-windows {w} is larger than the context the windowed run uses ({length} tokens; set it with --long-tokens, at most {model.n_ctx})",
                    window=w,
                )
    if config.heads:
        check_layers_heads(model, None, config.heads)


# ----------------------------------------------------------------------------- tables


def _census_rows(stats: StreamStats, bos: bool, eps: float) -> list[dict[str, Any]]:
    mean, std, rate = stats.alpha_mean(0), stats.alpha_std(0), stats.alpha_rate(0)
    rows = []
    n_l, n_h = mean.shape
    for layer in range(n_l):
        uniform = stats.uniform_mean(0, layer)
        for head in range(n_h):
            a = float(mean[layer, head])
            rows.append(
                {
                    "bos": bos,
                    "layer": layer,
                    "head": head,
                    "alpha_mean": a,
                    "alpha_std": float(std[layer, head]),
                    "sink_rate": float(rate[layer, head]),
                    "uniform_alpha": uniform,
                    "alpha_over_uniform": a / uniform if uniform > 0 else float("nan"),
                    "is_sink": a > eps,
                }
            )
    return rows


def _rate_row(stats: StreamStats, bos: bool, eps: float, width: float) -> dict[str, Any]:
    mean, rate = stats.alpha_mean(0), stats.alpha_rate(0)
    return {
        "bos": bos,
        "eps": eps,
        "n_sequences": stats.n_samples,
        "tokens_per_sequence": width,
        "sink_rate": float(rate.mean()),
        "uniform_sink_rate": stats.uniform_rate(0),
        "mean_alpha": float(mean.mean()),
        "uniform_alpha": stats.uniform_mean(0),
        "n_sink_heads": int((mean > eps).sum()),
        "n_heads": int(mean.numel()),
    }


def _layer_rows(stats: StreamStats, bos: bool) -> list[dict[str, Any]]:
    mean, rate = stats.alpha_mean(0), stats.alpha_rate(0)
    return [
        {
            "bos": bos,
            "layer": layer,
            "sink_rate": float(rate[layer].mean()),
            "mean_alpha": float(mean[layer].mean()),
            "max_alpha": float(mean[layer].max()),
            "uniform_sink_rate": stats.uniform_rate(0, layer),
            "uniform_alpha": stats.uniform_mean(0, layer),
        }
        for layer in range(mean.shape[0])
    ]


def _secondary_tables(stats: StreamStats, bos: bool, tokenizer: Any, top_k: int, min_count: int) -> tuple[list[dict], list[dict], list[dict]]:
    pos_rows, tok_rows, overall_rows = [], [], []
    n_l, n_h, width = stats.pos_excess.shape
    for layer in range(n_l):
        pos_q = stats.pos_queries_layer[layer]
        for head in range(n_h):
            for j in range(width):
                if pos_q[j] > 0:
                    pos_rows.append({"bos": bos, "layer": layer, "head": head, "position": j, "excess": float(stats.pos_excess[layer, head, j] / pos_q[j]), "n_queries": int(pos_q[j])})
    ok = (stats.tok_count >= min_count) & (stats.tok_queries > 0)
    if not bool(ok.any()):
        return pos_rows, tok_rows, overall_rows
    idx = ok.nonzero().flatten()
    per = stats.tok_excess[:, :, idx] / stats.tok_queries_layer[:, idx][:, None, :]  # [L, H, U']
    ids = stats.token_ids[idx]
    strings = {int(t): tokenizer.decode([int(t)]) for t in ids}
    in_top = torch.zeros(len(idx), dtype=torch.long)
    k = min(top_k, len(idx))
    for layer in range(n_l):
        for head in range(n_h):
            vals, order = per[layer, head].topk(k)
            in_top[order] += 1
            for rank, (v, o) in enumerate(zip(vals.tolist(), order.tolist()), start=1):
                t = int(ids[o])
                tok_rows.append({"bos": bos, "layer": layer, "head": head, "rank": rank, "token": strings[t], "token_id": t, "occurrences": int(stats.tok_count[idx[o]]), "excess": v})
    overall = per.mean(dim=(0, 1))
    for o in overall.argsort(descending=True)[: max(top_k * 4, 20)].tolist():
        t = int(ids[o])
        overall_rows.append({"bos": bos, "token": strings[t], "token_id": t, "occurrences": int(stats.tok_count[idx[o]]), "mean_excess": float(overall[o]), "max_excess": float(per[:, :, o].max()), "heads_in_top_k": int(in_top[o])})
    return pos_rows, tok_rows, overall_rows


def _target_rows(stats: StreamStats, bos: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``sink_targets`` (per head) and ``sink_targets_by_layer`` rows for one BOS setting.

    ``sink_on``: the group whose share exceeds its uniform baseline the most (``none`` when no
    group's does); groups that are absent (no suffix on a decoder) are NaN and never chosen."""
    share = {g: stats.target_mean(g) for g in TARGET_GROUPS}  # [layer, head]
    uniform = {g: stats.target_uniform(g) for g in TARGET_GROUPS}  # [layer]

    def where(excess: dict[str, float]) -> str:
        measured = {g: e for g, e in excess.items() if e == e}
        if not measured:
            return "none"
        best = max(measured, key=lambda g: measured[g])
        return best if measured[best] > 0 else "none"

    head_rows, layer_rows = [], []
    n_l, n_h = share["first"].shape
    for layer in range(n_l):
        for head in range(n_h):
            row: dict[str, Any] = {"bos": bos, "layer": layer, "head": head}
            for g in TARGET_GROUPS:
                row[g] = float(share[g][layer, head])
                row[f"{g}_uniform"] = float(uniform[g][layer])
            row["sink_on"] = where({g: row[g] - row[f"{g}_uniform"] for g in TARGET_GROUPS})
            head_rows.append(row)
        lrow: dict[str, Any] = {"bos": bos, "layer": layer}
        for g in TARGET_GROUPS:
            col = share[g][layer]
            measured = bool(torch.isfinite(col).all())
            lrow[f"{g}_mean"] = float(col.mean()) if measured else float("nan")
            lrow[f"{g}_max"] = float(col.max()) if measured else float("nan")
            lrow[f"{g}_max_head"] = int(col.argmax()) if measured else -1
            lrow[f"{g}_uniform"] = float(uniform[g][layer])
        lrow["sink_on"] = where({g: lrow[f"{g}_mean"] - lrow[f"{g}_uniform"] for g in TARGET_GROUPS})
        layer_rows.append(lrow)
    return head_rows, layer_rows


def _target_info(model: LoadedModel, stats: StreamStats, bos: bool) -> dict[str, Any]:
    """What the three groups were for one BOS setting: token strings, keys per sequence."""
    prefix, suffix = _frame(model, bos)
    conv = model.tokenizer.convert_ids_to_tokens
    n = max(stats.n_samples, 1)
    keys = stats.target_keys.tolist() if stats.target_keys is not None else [0.0] * len(TARGET_GROUPS)
    punct = stats.punctuation.tolist() if stats.punctuation is not None else []
    return {
        "first": conv(prefix[0]) if prefix else "the first text token",
        "suffix": [conv(t) for t in suffix],
        "punctuation": [model.tokenizer.decode([t]).strip() for t in punct],
        "keys_per_sequence": {g: keys[i] / n for i, g in enumerate(TARGET_GROUPS)},
    }


def _value_norm_rows(stats: StreamStats, bos: bool) -> list[dict[str, Any]]:
    rows = []
    n_l, n_h = stats.vn_share_sum.shape
    s = max(stats.vn_other_count, 1.0)
    for layer in range(n_l):
        q = max(float(stats.vn_queries_layer[layer]), 1.0)
        for head in range(n_h):
            attn = float(stats.vn_attn_sum[layer, head]) / q
            share = float(stats.vn_share_sum[layer, head]) / q
            sink_norm = float(stats.vn_sink_norm_sum[layer, head]) / s
            other = float(stats.vn_other_norm_sum[layer, head]) / s
            rows.append(
                {
                    "bos": bos,
                    "layer": layer,
                    "head": head,
                    "attn_share": attn,
                    "value_norm_share": share,
                    "share_ratio": share / attn if attn > 0 else float("nan"),
                    "sink_value_norm": sink_norm,
                    "other_value_norm": other,
                    "norm_ratio": sink_norm / other if other > 0 else float("nan"),
                }
            )
    return rows


# ----------------------------------------------------------------------------- the run


def run_sinks(
    model: LoadedModel,
    config: SinkConfig | None = None,
    *,
    progress: StageProgress | None = None,
) -> SinkReport:
    """Run every analysis ``config`` asks for and return the tables.

    ``progress(stage, done, total)`` is called after each batch of each pass.
    """
    config = config or SinkConfig()
    _check_against_model(model, config)
    report = SinkReport(config=config)
    report.info = {"n_layers": model.n_layers, "n_heads": model.n_heads, "n_ctx": model.n_ctx}

    def prog(stage: str) -> Callable[[int, int], None] | None:
        if progress is None:
            return None
        return lambda done, total: progress(stage, done, total)

    census, rates, by_layer, pos_rows, tok_rows, overall_rows, vn_rows = [], [], [], [], [], [], []
    target_rows, target_layer_rows = [], []
    batches: dict[bool, TokenBatch] = {}
    report.info["framing"] = {_bos_label(b): _framing(model, b) for b in config.bos}
    for bos in config.bos:
        batch = census_batch(model, config, bos)
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
        census += _census_rows(stats, bos, config.eps)
        t_rows, t_layer = _target_rows(stats, bos)
        target_rows, target_layer_rows = target_rows + t_rows, target_layer_rows + t_layer
        report.info.setdefault("sink_targets", {})[_bos_label(bos)] = _target_info(model, stats, bos)
        if stats.attention_notes():
            report.info["attention_notes"] = stats.attention_notes()
        rates.append(_rate_row(stats, bos, config.eps, float(batch.lengths.float().mean())))
        by_layer += _layer_rows(stats, bos)
        if config.runs("secondary"):
            p, t, o = _secondary_tables(stats, bos, model.tokenizer, config.top_k, config.min_count)
            pos_rows, tok_rows, overall_rows = pos_rows + p, tok_rows + t, overall_rows + o
        if config.runs("value_norm"):
            vn_rows += _value_norm_rows(stats, bos)
        if stats.window_notes():
            report.info["window_notes"] = stats.window_notes()
    report.tables["census"] = pd.DataFrame(census)
    report.tables["sink_rates"] = pd.DataFrame(rates)
    report.tables["sink_rate_by_layer"] = pd.DataFrame(by_layer)
    report.tables["sink_targets"] = pd.DataFrame(target_rows)
    report.tables["sink_targets_by_layer"] = pd.DataFrame(target_layer_rows)
    report.info["n_sequences"] = {_bos_label(b): len(batches[b]) for b in config.bos}
    report.info["stimuli"] = "prompts" if config.prompts is not None else "evaluation text windows"
    if config.runs("secondary"):
        report.tables["secondary_positions"] = pd.DataFrame(pos_rows)
        report.tables["secondary_tokens"] = pd.DataFrame(tok_rows)
        report.tables["secondary_tokens_overall"] = pd.DataFrame(overall_rows)
    if config.runs("value_norm"):
        report.tables["value_norm"] = pd.DataFrame(vn_rows)
    if config.runs("content"):
        _run_content(model, config, report, prog)
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
        _run_windowed(model, config, report, prog)
    return report


def _is_encoder(model: LoadedModel) -> bool:
    return bool(getattr(model, "is_encoder", False)) or not all(layer_causal(model))


def _framing(model: LoadedModel, prepend_bos: bool) -> dict[str, Any]:
    from headlens.analyses.heads.census import model_framing

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


def _run_content(model: LoadedModel, config: SinkConfig, report: SinkReport, prog: Callable[[str], Any]) -> None:
    prefix, suffix = _frame(model, True) if _is_encoder(model) else ([model.bos_id] if model.bos_id is not None else [], [])
    if config.prompts is not None:
        body_batch = tokenize_prompts(model.tokenizer, list(config.prompts), prepend_bos=False, n_ctx=config.window - 1 - len(suffix), truncate=True)
        if bool((body_batch.lengths != body_batch.lengths[0]).any()):
            shortest = int(body_batch.lengths.min())
            body = body_batch.tokens[:, :shortest]
        else:
            body = body_batch.tokens
        if config.n_prompts is not None:
            body = body[: config.n_prompts]
    else:
        n = _n_windows(model, config)
        body = text_windows(model.tokenizer, eval_text(), config.window - 1 - len(suffix), n, prepend_bos=False)
    rows = []
    skipped: dict[str, str] = {}
    first = prefix[0] if prefix else None
    variants = variant_batches(body, model.tokenizer, first, vocab_size=_vocab_size(model), seed=config.seed, suffix=suffix, skipped=skipped, avoid_special=_is_encoder(model))
    if skipped:
        report.info["skipped_variants"] = skipped
    step = _Steps(prog("first-token variants"), len(variants))
    for name, batch in variants.items():
        stats = stream_sink_stats(model, batch, eps=config.eps, keys=(0, 1), batch_size=config.batch_size, progress=step.next_pass())
        a0, a1, rate = stats.alpha_mean(0), stats.alpha_mean(1), stats.alpha_rate(0)
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
                        "uniform_alpha": stats.uniform_mean(0, layer),
                        "uniform_alpha_second": stats.uniform_mean(1, layer),
                    }
                )
    table = pd.DataFrame(rows)
    table["variant"] = pd.Categorical(table["variant"], categories=[v for v in VARIANTS if v in set(table["variant"])], ordered=True)
    report.tables["content"] = table
    report.tables["content_verdicts"] = content_verdicts(table, config.eps)


def _removal_plan(model: LoadedModel, config: SinkConfig, report: SinkReport, bos: bool) -> list[tuple[str, dict[int, list[int]]]]:
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


def _run_removal(model: LoadedModel, config: SinkConfig, report: SinkReport, batches: dict[bool, TokenBatch], prog: Callable[[str], Any]) -> None:
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
            rows.append({"bos": bos, "removed": label, "n_heads": sum(len(h) for h in heads.values()), "heads": names if label != "all heads" else "all", "loss": loss, "delta_loss": loss - base, "n_tokens": n_tok})
    report.tables["removal"] = pd.DataFrame(rows)


def _run_windowed(model: LoadedModel, config: SinkConfig, report: SinkReport, prog: Callable[[str], Any]) -> None:
    rows = []
    for bos in config.bos:
        batch = long_batch(model, config, bos)
        length = int(batch.tokens.shape[1])
        windows = config.attn_windows or default_attn_windows(length)
        step = _Steps(prog(f"windowed attention, {_bos_label(bos)}"), 1 + len(windows) * len(config.keep_first))
        full, n_tok = mean_loss(model, batch, batch_size=config.batch_size, progress=step.next_pass())
        rows.append({"bos": bos, "window": length, "keep_first": 0, "full_attention": True, "loss": full, "delta_loss": 0.0, "seq_tokens": length, "n_tokens": n_tok})
        for w in windows:
            for k in config.keep_first:
                loss, _ = mean_loss(model, batch, window_hooks(model.n_layers, w, k), batch_size=config.batch_size, progress=step.next_pass())
                rows.append({"bos": bos, "window": w, "keep_first": k, "full_attention": False, "loss": loss, "delta_loss": loss - full, "seq_tokens": length, "n_tokens": n_tok})
    report.tables["windowed"] = pd.DataFrame(rows)


# ----------------------------------------------------------------------------- seed measurement


def seed_measurement(model: LoadedModel, text: str, *, prepend_bos: bool = True) -> pd.DataFrame:
    """Per head: the last token's attention to the first token, against ``1/n``; strongest first.

    The measurement quoted in the project's seed text ("one GPT-2 small head puts 61% of the last
    token's attention on the first token where a uniform head would give about 16%": 1/6, with
    a BOS before the five words).
    """
    batch = _tokenize(model, [text], prepend_bos, model.n_ctx, False)
    n = int(batch.lengths[0])
    # the last token: the last text token on an encoder (its [SEP] comes after)
    last = n - 1 - len(_frame(model, prepend_bos)[1])
    if n < 2 or last < 1:
        raise InputError(f"--text {text!r} is {n} token(s); the measurement needs at least 2 (a first and a last token)", text=text)
    last_to_first = torch.zeros(model.n_layers, model.n_heads)

    def hook(layer: int) -> Callable[..., None]:
        def fn(pattern: torch.Tensor, hook: Any = None) -> None:
            last_to_first[layer] = pattern[0, :, last, 0].detach().float().cpu()

        return fn

    with torch.inference_mode():
        run_to_last_pattern(model, batch.tokens, [(f"blocks.{layer}.attn.hook_pattern", hook(layer)) for layer in range(model.n_layers)], attention_mask=batch_attention_mask(batch))
    rows = [
        {
            "bos": prepend_bos,
            "layer": layer,
            "head": head,
            "n_tokens": n,
            "first_token": batch.strings[0][0],
            "last_token": batch.strings[0][last],
            "attn_last_to_first": float(last_to_first[layer, head]),
            "uniform": 1.0 / n,
            "ratio": float(last_to_first[layer, head]) * n,
        }
        for layer in range(model.n_layers)
        for head in range(model.n_heads)
    ]
    table = pd.DataFrame(rows).sort_values(["attn_last_to_first", "layer", "head"], ascending=[False, True, True], kind="stable")
    return table.reset_index(drop=True)


def seed_tables(model: LoadedModel, text: str, bos: Sequence[bool]) -> pd.DataFrame:
    """:func:`seed_measurement` for each BOS setting, stacked (BOS first)."""
    return pd.concat([seed_measurement(model, text, prepend_bos=b) for b in sorted(set(bos), reverse=True)], ignore_index=True)
