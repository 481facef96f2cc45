"""Seeded random token sequences, each repeated twice.

On the second copy a model can only predict well by copying what followed the
same token in the first copy, which is what induction heads (and the
previous-token heads feeding them) do.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from headlens.probes.errors import StimulusError

__all__ = ["random_repeated_tokens"]


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StimulusError(f"{name} must be a positive integer, got {value!r}")
    return value


def random_repeated_tokens(
    n: int,
    T: int,
    seed: int,
    vocab_size: int,
    exclude: Iterable[int] = (),
    *,
    distinct: bool = False,
) -> torch.Tensor:
    """Return a ``LongTensor [n, 2*T]``: ``n`` sequences of ``T`` token ids drawn
    uniformly (with replacement) from ``range(vocab_size)`` minus ``exclude``
    (e.g. GPT-2's BOS/EOS id 50256), each followed by an exact copy of itself.

    With ``distinct=True`` the ``T`` tokens of each sequence are all different (drawn
    without replacement), so every second-copy position has exactly one earlier
    occurrence of its token: the setting in which duplicate-token and induction scores
    are unambiguous.

    Deterministic for a given ``seed`` (a private ``torch.Generator``; the
    global RNG is untouched).  No BOS is prepended: callers add it if wanted.
    """
    n = _positive_int(n, "n")
    T = _positive_int(T, "T")
    vocab_size = _positive_int(vocab_size, "vocab_size")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise StimulusError(f"seed must be an integer, got {seed!r}")
    excluded = set()
    for token in exclude if exclude is not None else ():
        if isinstance(token, bool) or not isinstance(token, int):
            raise StimulusError(f"exclude must hold integer token ids, got {token!r}")
        excluded.add(token)
    keep = torch.ones(vocab_size, dtype=torch.bool)
    keep[[t for t in excluded if 0 <= t < vocab_size]] = False
    allowed = torch.arange(vocab_size)[keep]
    if allowed.numel() == 0:
        raise StimulusError(f"every id in range({vocab_size}) is excluded; nothing left to draw")
    generator = torch.Generator().manual_seed(seed)
    if distinct:
        if T > allowed.numel():
            raise StimulusError(f"cannot draw {T} distinct tokens from {allowed.numel()} allowed ids")
        picks = _randperm_prefixes(n, allowed.numel(), T, seed)
        if picks is None:
            picks = torch.stack([torch.randperm(allowed.numel(), generator=generator)[:T] for _ in range(n)])
    else:
        picks = torch.randint(0, allowed.numel(), (n, T), generator=generator)
    first = allowed[picks]
    return torch.cat([first, first], dim=1)


def _twister(seed: int) -> np.random.MT19937:
    """numpy's Mersenne Twister in the state ``torch.Generator().manual_seed(seed)`` starts from
    (``init_genrand(seed)``, the next draw twists first)."""
    key = [seed]
    for j in range(1, 624):
        key.append((1812433253 * (key[-1] ^ (key[-1] >> 30)) + j) & 0xFFFFFFFF)
    bits = np.random.MT19937()
    bits.state = {"bit_generator": "MT19937", "state": {"key": np.array(key, dtype=np.uint32), "pos": 624}}
    return bits


def _randperm_prefixes(n: int, size: int, T: int, seed: int) -> Int[Tensor, "prompt T"] | None:
    """``torch.stack([torch.randperm(size, generator=g)[:T] for _ in range(n)])`` for
    ``g = torch.Generator().manual_seed(seed)``, exactly, without building the permutations.

    torch's CPU ``randperm`` is a Fisher-Yates shuffle drawing ``size - 1`` 32-bit words of the
    generator's Mersenne Twister (swap ``i`` with ``i + word_i % (size - i)``), and only its first
    ``T`` swaps decide the first ``T`` entries.  The words come from numpy's MT19937 in the same
    state (each prompt's first ``T`` kept, the rest of its ``size - 1`` skipped without being
    stored), and the ``T`` swaps of every prompt are replayed at once (:func:`_replay_swaps`).
    The first prompt is checked against ``torch.randperm`` itself; None (the caller draws with
    torch) when it differs or ``seed`` is outside ``[0, 2**32)``, so the result never depends on
    this path.
    """
    if not (0 <= seed < 2**32) or size < 2 or size >= 2**32 // 20:
        return None
    bits = _twister(seed)
    kept = min(T, size - 1)  # T == size: no swap at the last step (word 0: i with i)
    words = np.zeros((n, T), dtype=np.int64)
    for row in words:
        row[:kept] = bits.random_raw(kept)
        bits.random_raw(size - 1 - kept, output=False)
    span = np.arange(T)
    out = _replay_swaps(span + words % (size - span))  # step i swaps positions i and jump[:, i]
    check = torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:T]
    if not torch.equal(check, torch.from_numpy(out[0])):
        return None
    return torch.from_numpy(out)


def _replay_swaps(jump: np.ndarray) -> np.ndarray:
    """The first ``T`` entries of ``arange`` after the swaps ``(i, jump[:, i])``, ``i = 0 .. T-1``,
    of every row at once.  Only the positions the swaps touch matter (``0 .. T-1`` and ``jump``):
    each (row, position) gets one slot holding its value, then the ``T`` steps swap slots for
    every row together.  Position ``i`` is final after step ``i`` (later steps touch later
    positions only)."""
    m, T = jump.shape
    bound = int(jump.max()) + 1 if jump.size else T
    touched = np.concatenate([np.broadcast_to(np.arange(T), (m, T)), jump], axis=1)  # [m, 2T]
    keys, slot = np.unique(np.arange(m)[:, None] * bound + touched, return_inverse=True)
    slot = slot.reshape(m, 2 * T)
    value = keys % bound  # each slot starts as its own position
    here, there = slot[:, :T], slot[:, T:]
    for i in range(T):
        a, b = here[:, i], there[:, i]
        held = value[a]
        value[a] = value[b]
        value[b] = held
    return value[here]
