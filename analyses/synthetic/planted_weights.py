"""The planted checkpoint's weights: the residual layout, embeddings and every head's QK and OV
maps, as a GPT-2 state dict (the construction is described in
:mod:`headlens.analyses.synthetic.planted`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from headlens.analyses.synthetic.planted_spec import (
    GROUPS,
    N_FREQ,
    N_HEAD,
    N_JUNK,
    N_LAYER,
    SCALES,
    VOCAB_SIZE,
    PlantedSpec,
    frequencies,
    kernel_gaps,
)

__all__ = ["Layout", "planted_weights", "token_ids"]


@dataclass(frozen=True)
class Layout:
    """Positions of the feature slots among the feature coordinates (before the random basis)."""

    token_dims: int
    slots: dict[str, slice] = field(default_factory=dict)

    @classmethod
    def for_spec(cls, spec: PlantedSpec) -> Layout:
        k = spec.d_model // N_HEAD - 2 * N_FREQ
        sizes = {"tok": k, "name_gender": 1, "pronoun_gender": 1, "noun_number": 1, "pronoun_number": 1,
                 "pos": 2 * N_FREQ,
                 "first": 1, "rest": 1, "prev": k, "junk": N_JUNK}  # fmt: skip
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


def token_ids(tokenizer: Any, spec: PlantedSpec) -> dict[str, list[int]]:
    """Token ids of the name and pronoun groups; raise if a word is not exactly one GPT-2 token."""
    ids: dict[str, list[int]] = {}
    bad: list[str] = []
    for name in GROUPS:
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


def _embeddings(spec: PlantedSpec, lay: Layout, group_ids: dict[str, list[int]], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Token and position embeddings in feature coordinates: ``[vocab, F]`` and ``[n_ctx, F]``."""
    sc = SCALES
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

    angles = torch.arange(spec.n_ctx, dtype=torch.float64)[:, None] * frequencies(spec.n_ctx)[None, :]
    rot_amp = sc.position_norm * math.sqrt((1.0 - sc.flag_share) / N_FREQ)  # per (cos, sin) pair
    flag_amp = sc.position_norm * math.sqrt(sc.flag_share)
    pos = torch.zeros(spec.n_ctx, lay.n_features, dtype=torch.float64)
    pos[:, lay["pos"].start : lay["pos"].stop : 2] = rot_amp * torch.cos(angles)
    pos[:, lay["pos"].start + 1 : lay["pos"].stop : 2] = rot_amp * torch.sin(angles)
    pos[0, lay["first"].start] = flag_amp
    pos[1:, lay["rest"].start] = flag_amp
    return tok, pos


def _head_maps(spec: PlantedSpec, lay: Layout, gen: torch.Generator) -> _HeadMaps:
    """The QK and OV circuits of all eight heads, in feature coordinates."""
    sc = SCALES
    k, dh = lay.token_dims, spec.d_model // N_HEAD
    heads = _HeadMaps(lay.n_features, dh)
    freqs = frequencies(spec.n_ctx)
    prev_gap, self_gap = kernel_gaps(spec.n_ctx)
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
        noise = torch.randn(k, N_JUNK, generator=gen, dtype=torch.float64)
        m["o"][:k, lay["junk"]] = noise * sc.junk_norm / math.sqrt(N_JUNK)

    # 0.0 previous-token: q = R(-w) p_i, k = p_j, so q . k follows the kernel at i - 1 - j.
    m = heads[0, 0]
    w = heads.qk_weight(sc.prev_margin / prev_gap / rot_power, ln0)
    for f in range(N_FREQ):
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
    m["q"][pos, k : k + 2 * N_FREQ] = w * _eye(2 * N_FREQ)
    m["k"][pos, k : k + 2 * N_FREQ] = -w * _eye(2 * N_FREQ)
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


def planted_weights(spec: PlantedSpec, group_ids: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """Every parameter of the planted model, under its Hugging Face GPT-2 name (float64)."""
    lay = Layout.for_spec(spec)
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
        "transformer.ln_f.weight": torch.full((d,), SCALES.unembed_gain, dtype=torch.float64),
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
