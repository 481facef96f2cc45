"""Context managers that change process-wide torch state for a block and put it back.

Library calls leave the caller's thread count and global random state as they found them:
where something must run with a fixed thread count (the demo recipe) or a seeded global
generator (weight initialisation inside ``transformers``, which takes no generator), it
does so inside one of these.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from headlens.probes.settings import check_seed

__all__ = ["torch_threads", "torch_seed", "keeps_torch_threads", "keeps_torch_rng"]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[int]:
    """Run the block with ``torch.set_num_threads(n)`` (``None``: as it is); restore the count after.

    Yields the thread count in force inside the block (record it where results depend on it).
    """
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def keeps_torch_threads(fn: F) -> F:
    """Decorator: whatever thread count ``fn`` sets, the caller's is restored when it returns."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with torch_threads(None):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def keeps_torch_rng(fn: F) -> F:
    """Decorator: the state of torch's global CPU generator is restored when ``fn`` returns
    (``fn`` may seed it with ``torch.default_generator.manual_seed``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = torch.random.get_rng_state()
        try:
            return fn(*args, **kwargs)
        finally:
            torch.random.set_rng_state(state)

    return wrapper  # type: ignore[return-value]


@contextmanager
def torch_seed(seed: int) -> Iterator[None]:
    """Seed torch's global CPU generator with ``seed`` for the block; restore its state after.

    Only the CPU generator is touched (``torch.manual_seed`` would also seed, or queue a seed
    for, every CUDA device): what is drawn inside on the CPU is exactly what
    ``torch.manual_seed(seed)`` would give, and the caller's random stream goes on unchanged.
    """
    seed = check_seed(seed)
    state = torch.random.get_rng_state()
    torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
