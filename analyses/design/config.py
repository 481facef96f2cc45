"""The settings of the design studies (KV cache, GQA what-if, projection knockouts), defined once.

Each field carries its type, default, help text and range (:func:`headlens.probes.settings.setting`):
the study signatures of :mod:`headlens.reports.api.design` repeat them and the click options of
``headlens kv``, ``gqa`` and ``projections`` are generated from them.  Light (``--help`` reads it);
:mod:`~headlens.analyses.design.kv`, :mod:`~headlens.analyses.design.gqa` and
:mod:`~headlens.analyses.design.projections` re-export these classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlens.probes.errors import InputError
from headlens.probes.settings import check_range, setting

__all__ = ["BYTES", "GROUPINGS", "KINDS", "KVConfig", "GQAConfig", "ProjectionConfig", "KnockoutRoles"]

#: Bytes per cached value by dtype name.
BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "int8": 1}
#: How KV heads are grouped for pooling: neighbours, or the least scatter of keys and values.
GROUPINGS: tuple[str, ...] = ("adjacent", "similar")
#: Projection knockouts: which projection is replaced by the key projection.
KINDS: tuple[str, ...] = ("q=k", "v=k", "q=k=v")


@dataclass(frozen=True, kw_only=True)
class KVConfig:
    """``batch`` sequences of ``context`` tokens (default: the model's context), ``cache_dtype`` (default: the model's dtype)."""

    batch: int = setting(1, help="Sequences held in the cache at once.", minimum=1)
    context: int | None = setting(None, help="Tokens per sequence (default: the model's context).", minimum=1)
    cache_dtype: str | None = setting(
        None, help="Dtype of the cached keys and values (default: the model's --dtype).", choices=tuple(BYTES)
    )

    def __post_init__(self) -> None:
        check_range(self, "batch")
        check_range(self, "context")


@dataclass(frozen=True, kw_only=True)
class GQAConfig:
    """``group_sizes`` (default: every divisor > 1 of the KV heads), ``groupings``, forward ``batch_size``."""

    group_sizes: tuple[int, ...] | None = setting(
        None, help="KV heads pooled into one, comma-separated (default: every divisor > 1 of the KV heads, up to MQA)."
    )
    groupings: tuple[str, ...] = setting(
        GROUPINGS,
        help="adjacent (heads 0-1, 2-3, ...), similar (least scatter of keys and values on the text), or both.",
        choices=GROUPINGS,
        flag="--grouping",
    )
    batch_size: int = setting(8, help="Windows per forward.", minimum=1)
    cache_dtype: str | None = setting(
        None, help="Dtype of the cached keys and values in the KV table (default: the model's dtype).", choices=tuple(BYTES), cli=False
    )

    def __post_init__(self) -> None:
        check_range(self, "batch_size")
        for g in self.group_sizes or ():
            if isinstance(g, bool) or not isinstance(g, int) or g < 2:
                raise InputError(
                    f"group size {g!r}: the rule is g > 1 (a group pools g KV heads into one;"
                    " g = 1 is the model itself, always measured as the baseline)",
                    group=g,
                )


@dataclass(frozen=True, kw_only=True)
class ProjectionConfig:
    """``kinds`` to run, ``layers`` (default all), ``per_head`` knockouts too, forward ``batch_size``;
    ``prefix_reuse``: a knockout of layer L runs blocks L.. from the intact pass's residual, its
    loss and its census alike (off: full forwards; the same numbers, to float rounding)."""

    kinds: tuple[str, ...] = setting(
        KINDS, help="Knockouts: q=k (queries from the key projection), v=k (values from it), q=k=v.", choices=KINDS
    )
    layers: tuple[int, ...] | None = setting(None, help="Only these layers, e.g. 0,3 (default: all).")
    per_head: bool = setting(False, help="Also knock out each head alone (loss only).")
    batch_size: int = setting(8, help="Windows per forward.", minimum=1)
    prefix_reuse: bool = setting(True, help="Run a knockout of layer L from the intact pass's residual (off: full forwards).", cli=False)


@dataclass(frozen=True, kw_only=True)
class KnockoutRoles:
    """Whether :func:`headlens.reports.api.design.projections` also runs the census under each
    knockout, and on how many prompts (its manifest records the census's own config)."""

    roles: bool = setting(True, help="Skip the census under each knockout.", flag="--no-roles")
    n_prompts: int = setting(32, help="Census prompts per stimulus set under each knockout.", minimum=2)

    def __post_init__(self) -> None:
        check_range(self, "n_prompts")
