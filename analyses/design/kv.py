"""KV-cache bytes of a model and of what-if variants (MQA, GQA with g groups, heads pruned by a mask).

Per layer the cache holds a key and a value vector per KV head per cached token:
``2 x kv_heads x head_dim x tokens x bytes``; summed over layers that is the familiar
``2 x layers x kv_heads x head_dim x tokens x bytes`` when every layer is alike.  KV heads are
counted, not query heads (exact for grouped-query families), and a sliding-window layer caches
at most ``window`` tokens.  A pruned model needs a KV head only while some query head still
reads it (on grouped-query models a KV head goes when all its query heads are removed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from headlens.analyses.design.config import BYTES, KVConfig
from headlens.probes.attention import attention_spec
from headlens.probes.errors import InputError

__all__ = ["KVConfig", "KVRun", "KV_COLUMNS", "BYTES", "check_kv", "run_kv", "kv_cache_table", "group_sizes", "layer_kv_heads"]

log = logging.getLogger(__name__)


KV_COLUMNS = ["variant", "kv_heads", "kv_heads_total", "bytes_per_token", "tokens", "batch", "bytes", "saved", "formula"]


@dataclass(kw_only=True)
class KVRun:
    """The KV cache of a model and its variants (:func:`run_kv`): ``table`` and the config it was sized with."""

    table: pd.DataFrame  # KV_COLUMNS, one row per variant
    config: KVConfig = field(default_factory=KVConfig)


def group_sizes(n: int) -> list[int]:
    """Group sizes ``g > 1`` that divide ``n`` KV heads: 2, 4, ... up to ``n`` (MQA)."""
    return [g for g in range(2, n + 1) if n % g == 0]


def check_kv(model: Any, config: KVConfig) -> None:
    """Refuse a KV-cache question that has no answer: an encoder (it caches nothing at inference)
    or a ``context`` longer than the model's."""
    if getattr(model, "is_encoder", False):
        raise InputError(
            f"{getattr(model, 'name', 'the model')} is a bidirectional encoder: it keeps no KV cache at inference (every token is "
            "encoded in one pass, nothing is generated token by token), so there is no cache to size"
        )
    n_ctx = int(model.n_ctx)
    if config.context is not None and config.context > n_ctx:
        raise InputError(f"context={config.context} is longer than the model's context of {n_ctx} tokens", context=config.context)


def layer_kv_heads(model: Any, *, pool: int = 1, removed: tuple[tuple[int, int], ...] = ()) -> list[int]:
    """KV heads each layer keeps after pooling ``pool`` KV heads into one and removing query heads ``removed``."""
    spec = attention_spec(model)
    out = []
    gone = set(removed)
    for la in spec.layers:
        if la.n_kv_heads % pool:
            raise InputError(f"group size {pool} does not divide the {la.n_kv_heads} KV heads of layer {la.layer}", group=pool)
        readers: dict[int, int] = {}
        for h in range(la.n_heads):
            if (la.layer, h) not in gone:
                kv = la.kv_head(h) // pool
                readers[kv] = readers.get(kv, 0) + 1
        out.append(len(readers))
    return out


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def _row(model: Any, name: str, heads: list[int], *, nbytes: int, batch: int, context: int, own: float | None) -> dict[str, Any]:
    spec = attention_spec(model)
    per_token = sum(2 * h * la.d_head * nbytes for h, la in zip(heads, spec.layers, strict=True))
    tokens = [min(context, la.window) if la.window else context for la in spec.layers]
    total = sum(2 * h * la.d_head * t * nbytes for h, la, t in zip(heads, spec.layers, tokens, strict=True)) * batch
    d = {la.d_head for la in spec.layers}
    alike = len(set(heads)) == 1 and len(d) == 1 and len(set(tokens)) == 1
    if alike:
        formula = (
            f"2 x {len(heads)} layers x {heads[0]} kv_heads x {d.pop()} head_dim x {batch * tokens[0]} tokens x {nbytes} bytes"
            f" = {_fmt_bytes(total)}"
        )
    else:
        formula = (
            f"sum over layers of 2 x kv_heads x head_dim x tokens x {nbytes} bytes (kv_heads {heads}, tokens {tokens} per layer)"
            f" x {batch} seq = {_fmt_bytes(total)}"
        )
    return {
        "variant": name,
        "kv_heads": ",".join(str(h) for h in heads) if len(set(heads)) > 1 else str(heads[0]),
        "kv_heads_total": int(sum(heads)),
        "bytes_per_token": int(per_token),
        "tokens": context,
        "batch": batch,
        "bytes": int(total),
        "saved": float("nan") if own is None else 1.0 - total / own if own else 0.0,
        "formula": formula,
    }


def kv_cache_table(model: Any, config: KVConfig | None = None, *, removed: tuple[tuple[int, int], ...] | None = None) -> pd.DataFrame:
    """One row per variant (the model's own attention, GQA with each group size, MQA, the pruned model):
    KV heads per layer, bytes per token, bytes for ``batch x context`` tokens, the fraction saved and the formula."""
    config = config or KVConfig()
    if config.context is not None and config.context < 1:
        raise InputError(f"context={config.context}: must be at least 1 (None: the model's context)", context=config.context)
    if config.batch < 1:
        raise InputError(f"batch={config.batch}: must be at least 1", batch=config.batch)
    context = int(model.n_ctx) if config.context is None else config.context
    dtype = config.cache_dtype or str(model.dtype).removeprefix("torch.")
    if dtype not in BYTES:
        raise InputError(f"unknown cache dtype {dtype!r}: choose from {', '.join(BYTES)}", dtype=dtype)
    nbytes = BYTES[dtype]
    spec = attention_spec(model)
    n_kv = spec.n_kv_heads
    kind = "MQA" if n_kv == 1 else ("MHA" if n_kv == spec.layers[0].n_heads else "GQA")
    kw = {"nbytes": nbytes, "batch": config.batch, "context": context}
    own_row = _row(model, f"own ({kind}, {n_kv} KV heads)", layer_kv_heads(model), own=None, **kw)
    own = own_row["bytes"]
    own_row["saved"] = 0.0
    rows = [own_row]
    for g in group_sizes(n_kv):
        name = "MQA (1 KV head)" if g == n_kv else f"GQA g={g} ({n_kv // g} KV heads)"
        rows.append(_row(model, name, layer_kv_heads(model, pool=g), own=own, **kw))
    if removed is not None:
        rows.append(_row(model, f"pruned ({len(removed)} heads removed)", layer_kv_heads(model, removed=removed), own=own, **kw))
    log.debug("kv cache table: %d variants, %s, %d bytes per value", len(rows), dtype, nbytes)
    return pd.DataFrame(rows, columns=KV_COLUMNS)


def run_kv(model: Any, config: KVConfig | None = None, *, removed: tuple[tuple[int, int], ...] | None = None) -> KVRun:
    """:func:`kv_cache_table` with the config it ran with."""
    config = config or KVConfig()
    return KVRun(table=kv_cache_table(model, config, removed=removed), config=config)
