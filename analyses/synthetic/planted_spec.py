"""What the planted checkpoint is built from: its shape, the planted roles, the construction's
sizes and :class:`PlantedSpec` (see :mod:`headlens.analyses.synthetic.planted` for the design).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from headlens.analyses.stimuli.referent_frames import FEMALE_NAMES, MALE_NAMES, NOUNS

__all__ = [
    "BOS_ID",
    "N_HEAD",
    "N_LAYER",
    "PLANTED_ROLES",
    "VOCAB_SIZE",
    "N_FREQ",
    "N_JUNK",
    "GROUPS",
    "Scales",
    "SCALES",
    "frequencies",
    "kernel_gaps",
    "PlantedSpec",
]

N_LAYER = 2
N_HEAD = 4
VOCAB_SIZE = 50257
BOS_ID = 50256  # <|endoftext|>

#: Head name ``"layer.head"`` -> role.  Heads not listed have no role.
PLANTED_ROLES: dict[str, str] = {
    "0.0": "previous_token",
    "0.1": "sink",
    "0.2": "duplicate_token",
    "1.0": "induction",
    "1.1": "referent",
}

N_FREQ = 8  # rotation frequencies of the position code (2 residual dims each)
N_JUNK = 16  # dims of the slot that unread head outputs go to
_MIN_TOKEN_DIMS = 32  # below this, random token codes are too far from orthogonal
_MIN_KERNEL_GAP = 0.05  # position kernels flatter than this cannot single out one offset
GROUPS = ("male_names", "female_names", "male_pronouns", "female_pronouns",
           "singular_nouns", "plural_nouns", "singular_pronouns", "plural_pronouns")  # fmt: skip

_DEFAULT_MALE_NAMES = MALE_NAMES
_DEFAULT_FEMALE_NAMES = FEMALE_NAMES
_DEFAULT_SINGULAR_NOUNS = tuple(sing for pairs in NOUNS.values() for sing, _ in pairs)
_DEFAULT_PLURAL_NOUNS = tuple(plur for pairs in NOUNS.values() for _, plur in pairs)


@dataclass(frozen=True)
class Scales:
    """Sizes of the construction: residual norms, and attention logits after ``1/sqrt(d_head)``."""

    token_norm: float = 1.0  # ||W_E[t]||
    position_norm: float = 1.0  # ||W_P[i]||
    flag_share: float = 0.2  # share of ||W_P[i]||^2 held by the first/rest flags
    gender_share: float = 0.5  # gender part / ||W_E[t]|| for names and pronouns
    prev_norm: float = 1.0  # norm of head 0.0's output (the previous token's code)
    junk_norm: float = 0.05  # typical norm of each unread head output
    prev_margin: float = 12.0  # head 0.0: logit(i - 1) - max logit(other key)
    sink_logit: float = 12.0  # head 0.1: logit(position 0) - logit(other key)
    dup_token: float = 60.0  # head 0.2: logit for an exact token match
    dup_self_margin: float = 4.0  # head 0.2: the query's own position, under an earlier copy
    induction_token: float = 30.0  # head 1.0: logit for an exact (current, previous) match
    induction_first_penalty: float = 10.0  # head 1.0: penalty on position 0
    induction_copy: float = 3.0  # head 1.0: norm of the token code written into ``tok``
    referent_logit: float = 12.0  # head 1.1: +same-gender name, -other-gender name
    unembed_gain: float = 1.0  # ln_f weight


SCALES = Scales()


def frequencies(n_ctx: int) -> torch.Tensor:
    """Angular frequencies of the position code: geometric periods 2.5 .. 2.75 * n_ctx."""
    periods = torch.logspace(math.log10(2.5), math.log10(2.75 * n_ctx), N_FREQ, dtype=torch.float64)
    return 2 * math.pi / periods


def kernel_gaps(n_ctx: int) -> tuple[float, float]:
    """How far the kernel ``mean_f cos(w_f d)`` stands above its other values at ``d = 0``.

    Returns ``(prev_gap, self_gap)``: ``1 - max k(d)`` over the offsets head 0.0 competes with
    (``d = -1`` and ``1 .. n_ctx - 2``), and over those head 0.2's self term competes with
    (``1 .. n_ctx - 1``).
    """
    freqs = frequencies(n_ctx)

    def gap(offsets: torch.Tensor) -> float:
        return 1.0 - torch.cos(offsets[:, None].double() * freqs).mean(1).max().item()

    prev = gap(torch.cat([torch.tensor([-1.0]), torch.arange(1.0, n_ctx - 1)]))
    return prev, gap(torch.arange(1.0, n_ctx))


@dataclass(frozen=True, kw_only=True)
class PlantedSpec:
    """What to build.  Serialisable with ``dataclasses.asdict`` (tuples become JSON lists).

    Every name and pronoun must be a single GPT-2 token, written with its leading space; that is
    checked against the tokenizer by :func:`build_planted_checkpoint`.  Lists are accepted and
    stored as tuples, so ``PlantedSpec(**json.load(f)["spec"])`` round-trips.
    """

    n_ctx: int = 256
    d_model: int = 256
    seed: int = 0
    male_names: tuple[str, ...] = _DEFAULT_MALE_NAMES
    female_names: tuple[str, ...] = _DEFAULT_FEMALE_NAMES
    male_pronouns: tuple[str, ...] = (" he", " him", " his")
    female_pronouns: tuple[str, ...] = (" she", " her")
    singular_nouns: tuple[str, ...] = _DEFAULT_SINGULAR_NOUNS
    plural_nouns: tuple[str, ...] = _DEFAULT_PLURAL_NOUNS
    singular_pronouns: tuple[str, ...] = (" it", " its")
    plural_pronouns: tuple[str, ...] = (" they", " them", " their")

    def __post_init__(self) -> None:
        for name in ("n_ctx", "d_model", "seed"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"PlantedSpec.{name} must be an int, got {value!r}")
        if self.seed < 0:
            raise ValueError(f"PlantedSpec.seed must be non-negative, got {self.seed}")
        if self.n_ctx < 8:
            raise ValueError(f"PlantedSpec.n_ctx must be at least 8, got {self.n_ctx}")
        if min(kernel_gaps(self.n_ctx)) < _MIN_KERNEL_GAP:
            raise ValueError(f"PlantedSpec.n_ctx={self.n_ctx} is too long for the {N_FREQ}-frequency position code")
        smallest = N_HEAD * (_MIN_TOKEN_DIMS + 2 * N_FREQ)
        if self.d_model % N_HEAD != 0 or self.d_model < smallest:
            raise ValueError(f"PlantedSpec.d_model must be a multiple of {N_HEAD} and at least {smallest}, got {self.d_model}")
        seen: dict[str, str] = {}
        for name in GROUPS:
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise TypeError(f"PlantedSpec.{name} must be a tuple of strings, got {value!r}")
            words = tuple(value)
            if not words:
                raise ValueError(f"PlantedSpec.{name} must not be empty")
            for word in words:
                if not isinstance(word, str) or not word.strip():
                    raise ValueError(f"PlantedSpec.{name} holds a blank or non-string entry: {word!r}")
                if word in seen:
                    raise ValueError(f"{word!r} is in both PlantedSpec.{seen[word]} and PlantedSpec.{name}")
                seen[word] = name
            object.__setattr__(self, name, words)
