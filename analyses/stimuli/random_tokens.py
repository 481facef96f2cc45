"""Seeded random token sequences, each repeated twice.

On the second copy a model can only predict well by copying what followed the
same token in the first copy, which is what induction heads (and the
previous-token heads feeding them) do.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from headlens.probes.errors import StimulusError

__all__ = ["random_repeated_tokens"]

#: Prompts whose Mersenne Twister draws are generated at once (``rows x (size - 1)`` 32-bit words).
_CHUNK = 64


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
    allowed = torch.tensor([i for i in range(vocab_size) if i not in excluded], dtype=torch.long)
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


def _randperm_prefixes(n: int, size: int, T: int, seed: int) -> torch.Tensor | None:
    """``torch.stack([torch.randperm(size, generator=g)[:T] for _ in range(n)])`` for
    ``g = torch.Generator().manual_seed(seed)``, exactly, without building the permutations.

    torch's CPU ``randperm`` is a Fisher-Yates shuffle drawing ``size - 1`` 32-bit words of the
    generator's Mersenne Twister (swap ``i`` with ``i + word_i % (size - i)``), and only its first
    ``T`` swaps decide the first ``T`` entries.  The words come from numpy's MT19937 in the same
    state, the ``T`` swaps are replayed for a chunk of prompts at once (a prompt's swapped
    positions kept in a small table).  The first prompt is checked against ``torch.randperm``
    itself; None (the caller draws with torch) when it differs or ``seed`` is outside
    ``[0, 2**32)``, so the result never depends on this path.
    """
    if not (0 <= seed < 2**32) or size < 2 or size >= 2**32 // 20:
        return None
    bits = _twister(seed)
    out = np.empty((n, T), dtype=np.int64)
    span = np.arange(T)
    for start in range(0, n, _CHUNK):
        m = min(_CHUNK, n - start)
        words = np.zeros((m, T), dtype=np.int64)  # T == size: no swap at the last step (0: i with i)
        words[:, : size - 1] = bits.random_raw((m, size - 1))[:, :T]
        jump = span + words % (size - span)  # [m, T]: step i swaps positions i and jump[:, i]
        out[start : start + m] = _replay_swaps(jump)
    check = torch.randperm(size, generator=torch.Generator().manual_seed(seed))[:T]
    if not torch.equal(check, torch.from_numpy(out[0])):
        return None
    return torch.from_numpy(out)


def _replay_swaps(jump: np.ndarray) -> np.ndarray:
    """The first ``T`` entries after swaps ``(i, jump[:, i])``, ``i = 0 .. T-1``, of ``arange``
    per row.  Position ``i`` is final after step ``i``; a later position holds the value its
    last swap put there (the table), else its own index."""
    m, T = jump.shape
    where = np.empty((m, T), dtype=np.int64)  # position written at step k
    held = np.empty((m, T), dtype=np.int64)  # the value it got
    out = np.empty((m, T), dtype=np.int64)
    rows = np.arange(m)

    def value_at(pos: np.ndarray, steps: int) -> np.ndarray:
        if steps == 0:
            return pos
        hit = where[:, :steps] == pos[:, None]
        last = steps - 1 - hit[:, ::-1].argmax(1)
        return np.where(hit.any(1), held[rows, last], pos)

    for i in range(T):
        j = jump[:, i]
        mine = value_at(np.full(m, i), i)
        out[:, i] = value_at(j, i)
        where[:, i], held[:, i] = j, mine
    return out
