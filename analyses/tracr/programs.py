"""The tracr programs headlens compiles, by name: each a builder from tracr's own library, its vocabulary and length.

tracr (DeepMind's RASP compiler, ``pip install headlens[circuits-bench]``) is imported only inside the
builders.  A headlens checkpoint is a GPT-2 decoder, so every program is compiled with causal attention;
tracr's library marks which of its programs keep their meaning under causal evaluation:

* ``frac_prevs``, ``shift``, ``detect_pattern``: causal by design; position ``i``'s output depends only on
  ``x[:i+1]``, so the causal model computes the program exactly.
* ``hist``, ``reverse``: written for bidirectional attention.  Compiled causally, position ``i`` computes the
  program on the prefix ``x[:i+1]`` (``hist``: the running count of ``x[i]``; ``reverse``: the last element
  of the reversed prefix, ``x[0]``, through tracr's whole length -> opposite index -> gather circuit).  Their
  ``semantics`` is ``"prefix"`` and the agreement check compares each position with the program on its prefix.
* ``shuffle_dyck`` (Dyck-1 balance, 6 layers: the largest): also ``"prefix"``; every aggregate at position ``i``
  reads values computed from ``x[:i+1]`` (running balances, their prefix mean, the length, position ``i``'s own).
* ``sort``: its causal compilation computes neither the program nor the program on prefixes (a key's target
  position counts smaller keys over all positions); :func:`headlens.analyses.tracr.build.build_tracr_model`
  refuses it with that reason after the agreement check fails (see docs/tracr.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headlens.probes.errors import InputError

__all__ = ["ProgramSpec", "PROGRAMS", "program_spec", "all_inputs", "rasp_outputs", "require_tracr"]


@dataclass(frozen=True, kw_only=True)
class ProgramSpec:
    """One compilable program: ``build()`` returns the RASP SOp (tracr imported inside it)."""

    name: str
    build: Callable[[], Any]
    vocab: tuple[Any, ...]
    max_seq_len: int
    #: "exact" (the causal model computes the program) or "prefix" (position i computes program(x[:i+1])[i]).
    semantics: str
    about: str
    #: tracr library functions the program is built from (their source is saved beside the checkpoint).
    library: tuple[str, ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "vocab": [str(v) for v in self.vocab], "max_seq_len": self.max_seq_len,
                "semantics": self.semantics, "about": self.about, "library": list(self.library)}  # fmt: skip


def _frac_prevs() -> Any:
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib.make_frac_prevs(rasp.tokens == "x")


def _hist() -> Any:
    from tracr.compiler import lib

    return lib.make_hist()


def _reverse() -> Any:
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib.make_reverse(rasp.tokens)


def _sort() -> Any:
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=8, min_key=1)


def _shift() -> Any:
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib.shift_by(1, rasp.tokens).named("shift")


def _detect_pattern() -> Any:
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib.detect_pattern(rasp.tokens, "abc").named("detect_pattern")


def _shuffle_dyck() -> Any:
    from tracr.compiler import lib

    return lib.make_shuffle_dyck(pairs=["()"])


PROGRAMS: dict[str, ProgramSpec] = {
    p.name: p
    for p in (
        ProgramSpec(name="frac_prevs", build=_frac_prevs, vocab=("a", "b", "x"), max_seq_len=5, semantics="exact",
                    about="fraction of the tokens so far that are 'x' (numerical output)", library=("make_frac_prevs",)),
        ProgramSpec(name="hist", build=_hist, vocab=("a", "b", "c"), max_seq_len=5, semantics="prefix",
                    about="how many times the current token occurs (causal: in the prefix so far)", library=("make_hist",)),
        ProgramSpec(name="reverse", build=_reverse, vocab=("a", "b", "c"), max_seq_len=5, semantics="prefix",
                    about="the sequence reversed (causal: the reversed prefix's last element, x[0])",
                    library=("make_length", "make_reverse")),
        ProgramSpec(name="sort", build=_sort, vocab=(1, 2, 3), max_seq_len=4, semantics="prefix",
                    about="the tokens sorted (not causal: refused)", library=("make_sort_unique", "make_sort")),
        ProgramSpec(name="shift", build=_shift, vocab=("a", "b", "c"), max_seq_len=5, semantics="exact",
                    about="the previous token (a previous-token head)", library=("shift_by",)),
        ProgramSpec(name="detect_pattern", build=_detect_pattern, vocab=("a", "b", "c"), max_seq_len=5, semantics="exact",
                    about="1 where the last three tokens are 'a b c'", library=("shift_by", "detect_pattern")),
        ProgramSpec(name="shuffle_dyck", build=_shuffle_dyck, vocab=("(", ")", "x"), max_seq_len=5, semantics="prefix",
                    about="1 where the parentheses are balanced (causal: in the prefix so far)",
                    library=("make_frac_prevs", "make_pair_balance", "make_length", "make_shuffle_dyck")),
    )
}  # fmt: skip


def require_tracr() -> None:
    """One-line :class:`InputError` naming the extra when tracr (and jax) are not installed."""
    try:
        import tracr  # noqa: F401
    except ImportError:
        raise InputError("compiling tracr programs needs tracr and jax: pip install 'headlens[circuits-bench]'") from None


def program_spec(program: str) -> ProgramSpec:
    """The :class:`ProgramSpec` named ``program``; one-line :class:`InputError` naming the choices otherwise."""
    if program not in PROGRAMS:
        raise InputError(f"program={program!r} is not a tracr program headlens builds; choose one of {', '.join(PROGRAMS)}")
    return PROGRAMS[program]


def all_inputs(spec: ProgramSpec, max_len: int | None = None) -> list[tuple[Any, ...]]:
    """Every sequence over ``spec.vocab`` of length 1..``max_len`` (default ``spec.max_seq_len``): the stated input set."""
    top = spec.max_seq_len if max_len is None else min(max_len, spec.max_seq_len)
    return [x for n in range(1, top + 1) for x in itertools.product(spec.vocab, repeat=n)]


def rasp_outputs(program: Any, spec: ProgramSpec, xs: tuple[Any, ...]) -> list[Any]:
    """The RASP program's outputs on ``xs``: on the whole sequence (exact semantics) or each prefix's last."""
    from tracr.rasp import rasp

    if spec.semantics == "exact":
        return list(rasp.evaluate(program, list(xs)))
    return [rasp.evaluate(program, list(xs[: i + 1]))[i] for i in range(len(xs))]
