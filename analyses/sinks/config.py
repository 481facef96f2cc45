"""What a sink investigation measures: :class:`SinkConfig` and the checks that need no model.

The checks that need the model (context length, framing tokens, chosen heads) run at the start
of :func:`headlens.analyses.sinks.study.run_sinks`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from headlens.probes.errors import InputError
from headlens.probes.head_lists import as_heads
from headlens.probes.settings import check_seed, seed_setting, setting

__all__ = ["ANALYSES", "SinkConfig", "LengthsConfig", "default_attn_windows", "DEFAULT_MAX_PROMPTS"]

log = logging.getLogger(__name__)

#: The parts of the investigation, in the order they run.
ANALYSES: tuple[str, ...] = ("census", "content", "secondary", "value_norm", "removal", "windowed")

#: Gu et al. used about 100 sequences; the evaluation text holds 90 windows of 64 GPT-2 tokens.
DEFAULT_MAX_PROMPTS = 100


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

    eps: float = setting(0.3, help="Sink threshold on alpha (Gu et al. 2024), strictly between 0 and 1.")
    window: int = setting(64, help="Tokens per census sequence, BOS (an encoder's [CLS] and [SEP]) included (Gu et al.: 64).")
    n_prompts: int | None = setting(
        None, help=f"Number of sequences (default: every window of the evaluation text, at most {DEFAULT_MAX_PROMPTS})."
    )
    bos: tuple[bool, ...] = setting(
        (False, True), help="Prepend BOS (encoders: wrap in [CLS] ... [SEP]): run both settings, only with, or only without."
    )
    prompts: tuple[str, ...] | None = setting(
        None, help="Your own texts instead of the evaluation text (each cut to window tokens).", split=False, cli=False
    )
    text: str | None = setting(
        None,
        help="The text the windows are cut from: the text itself, or heldout (the model's own held-out text) or builtin (the "
        "shipped text); default: the model's own held-out text when it carries one (the demo model), else the built-in text "
        "(headlens.analyses.measure.texts.choose_text, the rule ablate uses; the manifest records which and why).",
        cli=False,
    )
    heads: tuple[tuple[int, int], ...] | None = setting(
        None,
        help="Heads whose sink is removed, together and one by one, as LAYER.HEAD,... (default: the sink heads the census finds).",
    )
    max_single: int = setting(8, help="At most this many heads are also removed one by one (strongest sinks first).")
    keep_first: tuple[int, ...] = setting(
        (0, 1, 4), help="First tokens kept by windowed attention, comma-separated (0, none kept, always runs)."
    )
    attn_windows: tuple[int, ...] | None = setting(
        None, help="Window sizes for windowed attention, comma-separated (default: 8, 32, 128, 512, up to half of --long-tokens)."
    )
    long_tokens: int | None = setting(
        None, help="Length of the long sequences for windowed attention (default: the context, at most 1024)."
    )
    n_long: int = setting(2, help="Number of long sequences.")
    top_k: int = setting(5, help="Secondary sinks: the tokens listed per head, strongest first.", cli=False)
    min_count: int = setting(3, help="Secondary sinks: a token is scored when it occurs at least this often.", cli=False)
    batch_size: int = setting(8, help="Sequences per forward pass.")
    seed: int = seed_setting(0, help="Seed of the random first tokens (recorded in the manifest).")
    skip: tuple[str, ...] = setting((), help="Parts not to run, comma-separated: content, secondary, value_norm, removal, windowed.")

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.heads is not None:
            object.__setattr__(self, "heads", as_heads(self.heads, name="heads"))
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not 0 < float(self.eps) < 1 or math.isnan(self.eps):
            raise InputError(f"eps must be strictly between 0 and 1, got {self.eps}", eps=self.eps)
        _positive("window", self.window, minimum=2)
        if self.n_prompts is not None:
            _positive("n_prompts", self.n_prompts)
        if not self.bos or any(not isinstance(b, bool) for b in self.bos):
            raise InputError("bos must name at least one setting: True (prepend BOS) and/or False", bos=self.bos)
        object.__setattr__(self, "bos", tuple(dict.fromkeys(self.bos)))
        for k in self.keep_first:
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise InputError(f"keep_first must hold non-negative numbers of tokens, got {k}", keep_first=k)
        object.__setattr__(self, "keep_first", tuple(sorted({0, *self.keep_first})))
        for w in self.attn_windows or ():
            _positive("attn_windows", w)
        if self.attn_windows is not None:
            object.__setattr__(self, "attn_windows", tuple(sorted(set(self.attn_windows))))
        if self.long_tokens is not None:
            _positive("long_tokens", self.long_tokens, minimum=2)
        for name in ("n_long", "top_k", "min_count", "batch_size", "max_single"):
            _positive(name, getattr(self, name))
        unknown = [s for s in self.skip if s not in ANALYSES or s == "census"]
        if unknown:
            raise InputError(f"cannot skip {', '.join(unknown)}: choose from {', '.join(ANALYSES[1:])}", skip=self.skip)
        if self.prompts is not None and not self.prompts:
            raise InputError("no prompt given")
        if self.text is not None and not self.text.strip():
            raise InputError("text= is empty", text=self.text)

    def runs(self, name: str) -> bool:
        return name not in self.skip


@dataclass(frozen=True, kw_only=True)
class LengthsConfig:
    """Settings of the long-context sink study (:mod:`headlens.analyses.sinks.lengths`; all go into the manifest)."""

    lengths: tuple[int, ...] = setting(
        help="Only the long-context study: sink alpha, sink rate and first-token share per head at these sequence lengths, "
        "e.g. 256,1024,4096 (--n-long sequences each, cut from the evaluation text or the --prompts documents concatenated)."
    )
    eps: float = setting(0.3, help="Sink threshold on alpha (Gu et al. 2024), strictly between 0 and 1.")
    n_sequences: int = setting(1, help="Sequences per length.")
    prepend_bos: bool = setting(True, help="Prepend BOS (an encoder's [CLS] ... [SEP]) to each sequence.")
    attention: str = setting(
        "auto",
        help="With --lengths: eager reads the patterns, streaming recomputes them from q and k in query blocks inside "
        "the SDPA forward, auto streams when one layer's patterns exceed 2 GiB. The full study is eager.",
        choices=("auto", "eager", "streaming"),
    )
    query_block: int = setting(256, help="Queries per block on the streaming path.", minimum=1)


def _positive(name: str, value: Any, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an integer of at least {minimum}, got {value}", value=value)


def default_attn_windows(long_tokens: int) -> tuple[int, ...]:
    """8, 32, 128, 512, ... up to half the long sequence (at least one size)."""
    sizes = []
    w = 8
    while w <= long_tokens // 2:
        sizes.append(w)
        w *= 4
    return tuple(sizes) or (max(1, long_tokens // 2),)
