"""A GPT-2-shaped checkpoint whose attention heads are set by hand: ground truth for head detectors.

``build_planted_checkpoint`` writes a Hugging Face folder (``GPT2LMHeadModel`` weights, the real
GPT-2 tokenizer and ``planted.json``) for a 2-layer, 4-head model in which every weight is chosen
by construction: five heads have known roles (``PLANTED_ROLES``) and the other three have none
(zero QK, so exactly uniform causal attention).  MLPs are exactly zero.

Residual stream
---------------
The residual stream is built from orthogonal *feature slots*, placed in the ``d_model``
coordinates by a random (seeded) orthonormal basis orthogonal to the all-ones vector.  Every
residual vector is therefore mean-zero and each LayerNorm (weight 1, bias 0) only rescales its
input by ``sqrt(d_model) / ||x||``.  Token and position embeddings have fixed norms (1 each) and
live in different slots, so that scale is the same at every position of layer 0; at layer 1 the
residual also holds head 0.0's unit-norm output, plus the small outputs of the other heads.

With ``F = 8`` position frequencies and ``k = d_model / 4 - 2F`` (48 at ``d_model = 256``):

* ``tok`` (k): the token's identity, a random unit Gaussian code per vocabulary entry.  The tied
  unembedding reads this slot, so writing a token's code here raises that token's logit.
  Codes of random tokens are nearly orthogonal (cosine ~ N(0, 1/k)).
* ``name_gender``, ``pronoun_gender`` (1 each): +/- for male/female names and pronouns (half of
  those tokens' embedding norm; their ``tok`` part shrinks so the norm stays 1).
* ``noun_number``, ``pronoun_number`` (1 each): likewise +/- for singular/plural nouns and the
  pronouns ``it``, ``its`` / ``they``, ``them``, ``their`` (number agreement).
* ``pos`` (2F): a rotation-style position code ``(cos w_f i, sin w_f i)``, geometric periods from
  2.5 to 2.75 ``n_ctx``.  Rotating every pair by ``-w_f`` maps the code of ``i`` onto ``i - 1``,
  and ``mean_f cos(w_f d)`` is a kernel peaked at ``d = 0``.
* ``first``, ``rest`` (1 each): a flag on position 0, and its complement on every other position
  (their sum is a constant feature; position embeddings keep one norm).
* ``prev`` (k): written by head 0.0: the previous token's code.
* ``junk`` (16): where heads whose output nothing reads write a small random function of the
  attended token (so ablating them is well defined and nearly harmless).

Heads (logit sizes, after GPT-2's ``1/sqrt(d_head)``, are in ``_Scales``):

* 0.0 previous-token: Q = rotated ``pos``, K = ``pos``; logits follow the kernel at
  ``d = i - 1 - j`` (margin 12 over every other key).  OV copies ``tok`` into ``prev``.
* 0.1 sink: Q = ``first + rest`` (a constant), K = ``first``: +12 on position 0.
* 0.2 duplicate-token: Q = K = ``tok`` (+60 for the same token) and a negative position kernel at
  ``d = i - j`` that holds the query's own position 4 logits under an earlier copy.
  With no earlier copy, the head stays on the query's own position.
* 1.0 induction, by K-composition with 0.0: Q = ``tok``, K = ``prev`` (+30 for a match), and a
  penalty of 10 on position 0, whose ``prev`` holds its own token (0.0 can only attend to itself
  there).  OV copies the attended ``tok`` into ``tok`` (norm 3), raising that token's logit.
* 1.1 referent: Q = ``pronoun_gender``, K = ``name_gender`` (and Q = ``pronoun_number``, K =
  ``noun_number`` in a second head dimension): a pronoun puts +12 on earlier names (nouns) that
  agree with it and -12 on those that do not; any other query has a zero query (uniform attention).
  The default word lists are those of :mod:`headlens.analyses.stimuli.referent`, so every sentence of the
  referent stimulus set is resolvable.
* 0.3, 1.2, 1.3: zero QK; OV writes to ``junk``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from headlens.analyses.stimuli.referent import FEMALE_NAMES, MALE_NAMES, NOUNS

__all__ = [
    "BOS_ID",
    "N_HEAD",
    "N_LAYER",
    "PLANTED_ROLES",
    "VOCAB_SIZE",
    "PlantedSpec",
    "build_planted_checkpoint",
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

_N_FREQ = 8  # rotation frequencies of the position code (2 residual dims each)
_N_JUNK = 16  # dims of the slot that unread head outputs go to
_MIN_TOKEN_DIMS = 32  # below this, random token codes are too far from orthogonal
_MIN_KERNEL_GAP = 0.05  # position kernels flatter than this cannot single out one offset
_GROUPS = ("male_names", "female_names", "male_pronouns", "female_pronouns",
           "singular_nouns", "plural_nouns", "singular_pronouns", "plural_pronouns")  # fmt: skip

_DEFAULT_MALE_NAMES = MALE_NAMES
_DEFAULT_FEMALE_NAMES = FEMALE_NAMES
_DEFAULT_SINGULAR_NOUNS = tuple(sing for pairs in NOUNS.values() for sing, _ in pairs)
_DEFAULT_PLURAL_NOUNS = tuple(plur for pairs in NOUNS.values() for _, plur in pairs)


@dataclass(frozen=True)
class _Scales:
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


_SCALES = _Scales()


def _frequencies(n_ctx: int) -> torch.Tensor:
    """Angular frequencies of the position code: geometric periods 2.5 .. 2.75 * n_ctx."""
    periods = torch.logspace(math.log10(2.5), math.log10(2.75 * n_ctx), _N_FREQ, dtype=torch.float64)
    return 2 * math.pi / periods


def _kernel_gaps(n_ctx: int) -> tuple[float, float]:
    """How far the kernel ``mean_f cos(w_f d)`` stands above its other values at ``d = 0``.

    Returns ``(prev_gap, self_gap)``: ``1 - max k(d)`` over the offsets head 0.0 competes with
    (``d = -1`` and ``1 .. n_ctx - 2``), and over those head 0.2's self term competes with
    (``1 .. n_ctx - 1``).
    """
    freqs = _frequencies(n_ctx)

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
        if min(_kernel_gaps(self.n_ctx)) < _MIN_KERNEL_GAP:
            raise ValueError(f"PlantedSpec.n_ctx={self.n_ctx} is too long for the {_N_FREQ}-frequency position code")
        smallest = N_HEAD * (_MIN_TOKEN_DIMS + 2 * _N_FREQ)
        if self.d_model % N_HEAD != 0 or self.d_model < smallest:
            raise ValueError(
                f"PlantedSpec.d_model must be a multiple of {N_HEAD} and at least {smallest}, got {self.d_model}"
            )
        seen: dict[str, str] = {}
        for name in _GROUPS:
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


@dataclass(frozen=True)
class _Layout:
    """Positions of the feature slots among the feature coordinates (before the random basis)."""

    token_dims: int
    slots: dict[str, slice] = field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: PlantedSpec) -> _Layout:
        k = spec.d_model // N_HEAD - 2 * _N_FREQ
        sizes = {"tok": k, "name_gender": 1, "pronoun_gender": 1, "noun_number": 1, "pronoun_number": 1,
                 "pos": 2 * _N_FREQ,
                 "first": 1, "rest": 1, "prev": k, "junk": _N_JUNK}  # fmt: skip
        slots, cursor = {}, 0
        for name, size in sizes.items():
            slots[name] = slice(cursor, cursor + size)
            cursor += size
        if cursor > spec.d_model - 1:  # all-ones is reserved (LayerNorm removes it)
            raise ValueError(f"d_model={spec.d_model} leaves no room for the {cursor} planted features")
        return cls(token_dims=k, slots=slots)

    @property
    def n_features(self) -> int:
        return max(s.stop for s in self.slots.values())

    def __getitem__(self, name: str) -> slice:
        return self.slots[name]


class _HeadMaps:
    """Per-head Q, K, V, O maps in feature coordinates, filled in by the head builders.

    For head ``h``: ``q = ln(x) @ q_map`` with ``q_map`` of shape ``[n_features, d_head]`` (likewise
    ``k``, ``v``), and the head's output is ``z @ o_map`` with ``o_map`` ``[d_head, n_features]``.
    """

    def __init__(self, n_features: int, d_head: int) -> None:
        self.d_head = d_head
        self.maps: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        for layer in range(N_LAYER):
            for head in range(N_HEAD):
                self.maps[layer, head] = {
                    "q": torch.zeros(n_features, d_head, dtype=torch.float64),
                    "k": torch.zeros(n_features, d_head, dtype=torch.float64),
                    "v": torch.zeros(n_features, d_head, dtype=torch.float64),
                    "o": torch.zeros(d_head, n_features, dtype=torch.float64),
                }

    def __getitem__(self, layer_head: tuple[int, int]) -> dict[str, torch.Tensor]:
        return self.maps[layer_head]

    def qk_weight(self, logit_per_unit: float, ln_gain: float) -> float:
        """Q and K weight so that two unit features (scaled by ``ln_gain`` in the LayerNorm)
        multiply to ``logit_per_unit`` attention logits."""
        return math.sqrt(logit_per_unit * math.sqrt(self.d_head)) / ln_gain


def _rotation(angle: float) -> torch.Tensor:
    """``[[cos, -sin], [sin, cos]]``: as a right factor, ``row @ R(w)`` rotates ``row`` by ``-w``."""
    c, s = math.cos(angle), math.sin(angle)
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def _eye(n: int) -> torch.Tensor:
    return torch.eye(n, dtype=torch.float64)


def _token_ids(tokenizer: Any, spec: PlantedSpec) -> dict[str, list[int]]:
    """Token ids of the name and pronoun groups; raise if a word is not exactly one GPT-2 token."""
    ids: dict[str, list[int]] = {}
    bad: list[str] = []
    for name in _GROUPS:
        ids[name] = []
        for word in getattr(spec, name):
            encoded = tokenizer.encode(word)
            if len(encoded) != 1:
                bad.append(f"{name}: {word!r} is {len(encoded)} tokens")
            else:
                ids[name].append(int(encoded[0]))
    if bad:
        raise ValueError("names and pronouns must each be one GPT-2 token: " + "; ".join(bad))
    return ids


def _embeddings(
    spec: PlantedSpec, lay: _Layout, group_ids: dict[str, list[int]], gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token and position embeddings in feature coordinates: ``[vocab, F]`` and ``[n_ctx, F]``."""
    sc = _SCALES
    codes = torch.randn(VOCAB_SIZE, lay.token_dims, generator=gen, dtype=torch.float64)
    codes /= codes.norm(dim=1, keepdim=True)
    tok = torch.zeros(VOCAB_SIZE, lay.n_features, dtype=torch.float64)
    tok[:, lay["tok"]] = codes * sc.token_norm
    shrink = math.sqrt(1.0 - sc.gender_share**2)
    for name, slot, sign in (("male_names", "name_gender", 1.0), ("female_names", "name_gender", -1.0),
                             ("male_pronouns", "pronoun_gender", 1.0),
                             ("female_pronouns", "pronoun_gender", -1.0),
                             ("singular_nouns", "noun_number", 1.0), ("plural_nouns", "noun_number", -1.0),
                             ("singular_pronouns", "pronoun_number", 1.0),
                             ("plural_pronouns", "pronoun_number", -1.0)):  # fmt: skip
        rows = torch.tensor(group_ids[name])
        tok[rows, lay["tok"]] *= shrink
        tok[rows, lay[slot].start] = sign * sc.gender_share * sc.token_norm

    angles = torch.arange(spec.n_ctx, dtype=torch.float64)[:, None] * _frequencies(spec.n_ctx)[None, :]
    rot_amp = sc.position_norm * math.sqrt((1.0 - sc.flag_share) / _N_FREQ)  # per (cos, sin) pair
    flag_amp = sc.position_norm * math.sqrt(sc.flag_share)
    pos = torch.zeros(spec.n_ctx, lay.n_features, dtype=torch.float64)
    pos[:, lay["pos"].start : lay["pos"].stop : 2] = rot_amp * torch.cos(angles)
    pos[:, lay["pos"].start + 1 : lay["pos"].stop : 2] = rot_amp * torch.sin(angles)
    pos[0, lay["first"].start] = flag_amp
    pos[1:, lay["rest"].start] = flag_amp
    return tok, pos


def _head_maps(spec: PlantedSpec, lay: _Layout, gen: torch.Generator) -> _HeadMaps:
    """The QK and OV circuits of all eight heads, in feature coordinates."""
    sc = _SCALES
    k, dh = lay.token_dims, spec.d_model // N_HEAD
    heads = _HeadMaps(lay.n_features, dh)
    freqs = _frequencies(spec.n_ctx)
    prev_gap, self_gap = _kernel_gaps(spec.n_ctx)
    rot_power = sc.position_norm**2 * (1.0 - sc.flag_share)  # ||pos slot||^2, all pairs together
    flag_power = sc.position_norm**2 * sc.flag_share
    # LayerNorm gains: the residual norm is fixed by construction at layer 0, and is dominated by
    # token + position + head 0.0's output at layer 1.
    d_root = math.sqrt(spec.d_model)
    ln0 = d_root / math.hypot(sc.token_norm, sc.position_norm)
    ln1 = d_root / math.sqrt(sc.token_norm**2 + sc.position_norm**2 + sc.prev_norm**2)
    tok, pos, first, rest = lay["tok"], lay["pos"], lay["first"].start, lay["rest"].start

    def read_token(m: dict[str, torch.Tensor], ln_gain: float) -> None:
        """V = the attended token's code, at unit norm, in head dims ``:k``."""
        m["v"][tok, :k] = _eye(k) / (ln_gain * sc.token_norm)

    def junk_ov(m: dict[str, torch.Tensor], ln_gain: float) -> None:
        """A small random OV circuit: the attended token's code -> the junk slot."""
        read_token(m, ln_gain)
        noise = torch.randn(k, _N_JUNK, generator=gen, dtype=torch.float64)
        m["o"][:k, lay["junk"]] = noise * sc.junk_norm / math.sqrt(_N_JUNK)

    # 0.0 previous-token: q = R(-w) p_i, k = p_j, so q . k follows the kernel at i - 1 - j.
    m = heads[0, 0]
    w = heads.qk_weight(sc.prev_margin / prev_gap / rot_power, ln0)
    for f in range(_N_FREQ):
        rows, cols = slice(pos.start + 2 * f, pos.start + 2 * f + 2), slice(2 * f, 2 * f + 2)
        m["q"][rows, cols] = w * _rotation(freqs[f].item())
        m["k"][rows, cols] = w * _eye(2)
    read_token(m, ln0)
    m["o"][:k, lay["prev"]] = _eye(k) * sc.prev_norm

    # 0.1 sink: q = first + rest (the same at every position), k = first.
    m = heads[0, 1]
    w = heads.qk_weight(sc.sink_logit / flag_power, ln0)
    m["q"][first, 0] = m["q"][rest, 0] = m["k"][first, 0] = w
    junk_ov(m, ln0)

    # 0.2 duplicate-token: token match, minus the position kernel at i - j (own position).
    m = heads[0, 2]
    w = heads.qk_weight(sc.dup_token / sc.token_norm**2, ln0)
    m["q"][tok, :k] = m["k"][tok, :k] = w * _eye(k)
    w = heads.qk_weight(sc.dup_self_margin / self_gap / rot_power, ln0)
    m["q"][pos, k : k + 2 * _N_FREQ] = w * _eye(2 * _N_FREQ)
    m["k"][pos, k : k + 2 * _N_FREQ] = -w * _eye(2 * _N_FREQ)
    junk_ov(m, ln0)

    junk_ov(heads[0, 3], ln0)

    # 1.0 induction: q = current token code, k = previous token code (K-composition with 0.0),
    # minus a penalty on position 0; OV copies the attended token's code into ``tok``.
    m = heads[1, 0]
    w = heads.qk_weight(sc.induction_token / (sc.token_norm * sc.prev_norm), ln1)
    m["q"][tok, :k] = w * _eye(k)
    m["k"][lay["prev"], :k] = w * _eye(k)
    w = heads.qk_weight(sc.induction_first_penalty / flag_power, ln1)
    m["q"][first, k] = m["q"][rest, k] = w
    m["k"][first, k] = -w
    read_token(m, ln1)
    m["o"][:k, tok] = _eye(k) * sc.induction_copy

    # 1.1 referent: q = pronoun gender, k = name gender.
    m = heads[1, 1]
    w = heads.qk_weight(sc.referent_logit / (sc.gender_share * sc.token_norm) ** 2, ln1)
    m["q"][lay["pronoun_gender"].start, 0] = w
    m["k"][lay["name_gender"].start, 0] = w
    m["q"][lay["pronoun_number"].start, 1] = w
    m["k"][lay["noun_number"].start, 1] = w
    junk_ov(m, ln1)

    junk_ov(heads[1, 2], ln1)
    junk_ov(heads[1, 3], ln1)
    return heads


def _planted_weights(spec: PlantedSpec, group_ids: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """Every parameter of the planted model, under its Hugging Face GPT-2 name (float64)."""
    lay = _Layout.for_spec(spec)
    d, dh = spec.d_model, spec.d_model // N_HEAD
    gen = torch.Generator().manual_seed(spec.seed)

    # Random orthonormal basis of the mean-zero subspace; feature f is the direction basis[:, f].
    raw = torch.randn(d, d, generator=gen, dtype=torch.float64)
    raw[:, 0] = 1.0
    basis = torch.linalg.qr(raw)[0][:, 1 : 1 + lay.n_features]

    tok, pos = _embeddings(spec, lay, group_ids, gen)
    heads = _head_maps(spec, lay, gen)

    def zeros(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.float64)

    params = {
        "transformer.wte.weight": tok @ basis.T,
        "transformer.wpe.weight": pos @ basis.T,
        "transformer.ln_f.weight": torch.full((d,), _SCALES.unembed_gain, dtype=torch.float64),
        "transformer.ln_f.bias": zeros(d),
    }
    for layer in range(N_LAYER):
        c_attn, c_proj = zeros(d, 3 * d), zeros(d, d)  # Conv1D layout: x @ W, columns q | k | v
        for head in range(N_HEAD):
            m = heads[layer, head]
            for i, name in enumerate(("q", "k", "v")):
                c_attn[:, i * d + head * dh : i * d + (head + 1) * dh] = basis @ m[name]
            c_proj[head * dh : (head + 1) * dh, :] = m["o"] @ basis.T
        prefix = f"transformer.h.{layer}."
        params |= {
            prefix + "ln_1.weight": torch.ones(d, dtype=torch.float64),
            prefix + "ln_1.bias": zeros(d),
            prefix + "attn.c_attn.weight": c_attn,
            prefix + "attn.c_attn.bias": zeros(3 * d),
            prefix + "attn.c_proj.weight": c_proj,
            prefix + "attn.c_proj.bias": zeros(d),
            prefix + "ln_2.weight": torch.ones(d, dtype=torch.float64),
            prefix + "ln_2.bias": zeros(d),
            prefix + "mlp.c_fc.weight": zeros(d, 4 * d),
            prefix + "mlp.c_fc.bias": zeros(4 * d),
            prefix + "mlp.c_proj.weight": zeros(4 * d, d),
            prefix + "mlp.c_proj.bias": zeros(d),
        }
    return params


def _design_summary(spec: PlantedSpec, group_ids: dict[str, list[int]]) -> dict[str, Any]:
    """The construction's constants, for ``planted.json``."""
    lay = _Layout.for_spec(spec)
    prev_gap, self_gap = _kernel_gaps(spec.n_ctx)
    return {
        "scales": asdict(_SCALES),
        "token_code_dims": lay.token_dims,
        "position_periods": (2 * math.pi / _frequencies(spec.n_ctx)).tolist(),
        "prev_kernel_gap": prev_gap,
        "self_kernel_gap": self_gap,
        "feature_slots": {name: [s.start, s.stop] for name, s in lay.slots.items()},
        "token_ids": group_ids,
        "bos_token_id": BOS_ID,
    }


def build_planted_checkpoint(folder: str | Path, spec: PlantedSpec | None = None) -> Path:
    """Write the planted model to ``folder`` (created if needed) and return it as a ``Path``.

    The folder holds ``GPT2LMHeadModel.save_pretrained`` output (tied embeddings), the real GPT-2
    tokenizer, and ``planted.json`` = ``{"spec": asdict(spec), "roles": PLANTED_ROLES,
    "design": ...}``.  The weights are a deterministic function of ``spec``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    spec = PlantedSpec() if spec is None else spec
    if not isinstance(spec, PlantedSpec):
        raise TypeError(f"spec must be a PlantedSpec, got {type(spec).__name__}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} exists and is not a directory")

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = load_offline_gpt2_tokenizer(tmp)
    if len(tokenizer) != VOCAB_SIZE:
        raise RuntimeError(f"expected the {VOCAB_SIZE}-entry GPT-2 tokenizer, got {len(tokenizer)} entries")
    group_ids = _token_ids(tokenizer, spec)
    params = _planted_weights(spec, group_ids)

    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=spec.n_ctx,
        n_embd=spec.d_model,
        n_layer=N_LAYER,
        n_head=N_HEAD,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        scale_attn_weights=True,
        tie_word_embeddings=True,
        bos_token_id=BOS_ID,
        eos_token_id=BOS_ID,
    )
    model = GPT2LMHeadModel(config).eval()
    state = model.state_dict()
    unset = sorted(name for name, _ in model.named_parameters() if name not in params)
    if unset:  # every parameter is set by hand; a changed transformers layout would land here
        raise RuntimeError(f"the planted construction does not cover parameters {unset}")
    with torch.no_grad():
        for name, value in params.items():
            if name not in state or tuple(state[name].shape) != tuple(value.shape):
                raise RuntimeError(f"unexpected GPT-2 parameter layout at {name}")
            state[name].copy_(value.to(state[name].dtype))
    model.tie_weights()

    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' progress bar
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    meta = {"spec": asdict(spec), "roles": dict(PLANTED_ROLES), "design": _design_summary(spec, group_ids)}
    (folder / "planted.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder
