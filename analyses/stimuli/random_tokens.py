"""Seeded random token sequences, each repeated twice.

On the second copy a model can only predict well by copying what followed the
same token in the first copy, which is what induction heads (and the
previous-token heads feeding them) do.
"""

from __future__ import annotations

from typing import Iterable

import torch

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
    allowed = torch.tensor(
        [i for i in range(vocab_size) if i not in excluded], dtype=torch.long
    )
    if allowed.numel() == 0:
        raise StimulusError(f"every id in range({vocab_size}) is excluded; nothing left to draw")
    generator = torch.Generator().manual_seed(seed)
    if distinct:
        if T > allowed.numel():
            raise StimulusError(f"cannot draw {T} distinct tokens from {allowed.numel()} allowed ids")
        picks = torch.stack([torch.randperm(allowed.numel(), generator=generator)[:T] for _ in range(n)])
    else:
        picks = torch.randint(0, allowed.numel(), (n, T), generator=generator)
    first = allowed[picks]
    return torch.cat([first, first], dim=1)
