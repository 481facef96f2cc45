"""The one way to run the model with sites edited: "run from this site with this value".

A :class:`Site` is a hook point (TransformerLens naming) and a selection along its batch (dim 0),
position (dim 1) and head or slot (dim 2) axes.  A :class:`Patch` says what happens there: ``value`` is
written at the selection, ``add`` is added there, or ``setter(act, hook)`` returns the new activation
(or None: the activation stays, as a reader that keeps it).  Rows and heads given as two sequences
pair up (row ``rows[i]``, head ``heads[i]``): one change per row, each at its own head.  A ``(hook name, setter)`` pair, TransformerLens'
``fwd_hooks`` convention, is a :class:`Patch` of the whole hook point.  Every ablation, patch,
edge patch and kept stream in headlens goes through :func:`patched_forward` (or
:func:`patched_runner`, for a metric that drives the forward itself).

**The late start** (the fast path): a :class:`Start` holds the residual stream entering block
``L``, kept from an earlier forward on the same tokens under the same edits before ``L``.
TransformerBridge's ``start_at_layer`` still executes blocks ``0..L-1`` (it discards their
output), so it saves nothing; here the model's block list is cut to ``blocks[L:]`` for the
forward and a hook on ``blocks.L.hook_resid_pre`` swaps the stored stream in for the embeddings:
blocks before ``L`` never run.  The list is restored on exit, also after an exception; so is the
Hugging Face config's ``layer_types`` (cut alike), which models with sliding and full layers index
by the loop's position.  A patch of a block before ``L`` would never fire: it is refused
(:class:`ValueError`), never dropped.  :func:`check_start` tells whether continuing from given
blocks reproduces a full forward on a model; callers run every block when it does not.

**The early stop**: ``stop_after`` ends the forward right after that hook point
(:class:`~headlens.probes.engine_forward.StopForward`, attached after the patches, so they run first).
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from headlens.probes.engine_forward import stop_hook, stopping
from headlens.probes.hooks import HookFn, attached

__all__ = ["Site", "Patch", "Start", "PatchLike", "patched_forward", "patched_runner", "check_start", "resid_site"]

log = logging.getLogger(__name__)

Index = int | Sequence[int] | slice | None
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def _index(sel: Index) -> Any:
    if sel is None:
        return slice(None)
    return sel if isinstance(sel, (int, slice)) else list(sel)


@dataclass(frozen=True, kw_only=True)
class Site:
    """A hook point and the part of its activation ``[batch, pos, (head or slot), ...]`` a patch writes:
    ``rows`` along dim 0, ``positions`` along dim 1, ``heads`` along dim 2 (None: all)."""

    hook: str
    positions: Index = None
    heads: Index = None
    rows: Index = None

    @property
    def layer(self) -> int | None:
        """The block the hook point belongs to (None: before or after the blocks)."""
        m = _BLOCK.match(self.hook)
        return int(m.group(1)) if m else None

    def selection(self) -> tuple[Any, ...]:
        if self.heads is None:
            return (_index(self.rows), _index(self.positions))
        return (_index(self.rows), _index(self.positions), _index(self.heads))


def resid_site(layer: int) -> Site:
    """The residual stream entering block ``layer``."""
    return Site(hook=f"blocks.{layer}.hook_resid_pre")


@dataclass(frozen=True, kw_only=True)
class Patch:
    """At ``site``: ``value`` written at the site's selection, or ``add`` added there (either on the activation's device
    and dtype, cut to its positions), or ``setter(act, hook)`` returning the new activation (None: unchanged)."""

    site: Site
    value: Tensor | None = None
    add: Tensor | None = None
    setter: HookFn | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.value, self.add, self.setter)) != 1:
            raise ValueError(f"a patch of {self.site.hook} needs exactly one of value, add and setter")

    def hook(self) -> tuple[str, HookFn]:
        if self.setter is not None:
            return self.site.hook, self.setter
        value, add, sel = self.value, self.add is not None, self.site.selection()
        value = self.add if add else value
        assert value is not None  # exactly one of value, add and setter (__post_init__)

        def write(act: Tensor, hook: Any = None) -> Tensor:
            act = act.clone()
            v = value.to(device=act.device, dtype=act.dtype)
            if self.site.positions is None and v.dim() > 1 and v.shape[1] > act.shape[1]:
                v = v[:, : act.shape[1]]
            if add:
                act[sel] += v
            else:
                act[sel] = v
            return act

        return self.site.hook, write


#: A :class:`Patch`, or TransformerLens' ``(hook name, setter)``: a setter of the whole hook point.
PatchLike = Patch | tuple[str, HookFn]


@dataclass(frozen=True, kw_only=True)
class Start:
    """The residual stream ``resid`` entering block ``layer``: the forward runs blocks ``layer..`` from it."""

    layer: int
    resid: Float[Tensor, "batch pos d_model"]

    def hook(self) -> tuple[str, HookFn]:
        resid = self.resid

        def inject(act: Tensor, hook: Any = None) -> Tensor:
            return resid.to(device=act.device, dtype=act.dtype)

        return resid_site(self.layer).hook, inject


def _hooks(patches: Sequence[PatchLike], start: Start | None) -> list[tuple[str, HookFn]]:
    hooks = [p.hook() if isinstance(p, Patch) else p for p in patches]
    if start is None:
        return hooks
    early = [name for name, _ in hooks if (layer := Site(hook=name).layer) is None or layer < start.layer]
    early = [name for name in early if not name.startswith(("ln_final", "unembed"))]
    if early:
        raise ValueError(f"patches of {early[:3]} come before block {start.layer}, where the forward starts: they would never run")
    return [start.hook(), *hooks]


def patched_forward(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    patches: Sequence[PatchLike] = (),
    *,
    start: Start | None = None,
    stop_after: str | None = None,
    return_type: str | None = "logits",
    **kwargs: Any,
) -> Any:
    """One forward of ``tokens`` with ``patches`` in place: from ``start`` (its block on; ``tokens`` then only set the
    shape), ending right after hook point ``stop_after`` (returns None) or with the bridge's ``return_type`` output.
    ``attention_mask`` (0/1 ``[batch, pos]``) goes to the bridge on its device as integers; other ``kwargs`` as they are."""
    hooks = _hooks(patches, start)
    if kwargs.get("attention_mask") is not None:
        kwargs["attention_mask"] = kwargs["attention_mask"].to(device=model.device, dtype=torch.long)
    if stop_after is not None:
        hooks.append((stop_after, stop_hook))
        return_type = None
    first = 0 if start is None else start.layer
    with stopping() if stop_after is not None else nullcontext(), _from_layer(model, first), attached(model.bridge, hooks):
        return model.bridge(tokens.to(model.device), return_type=return_type, **kwargs)


def patched_runner(model: Any, patches: Sequence[PatchLike] = (), *, start: Start | None = None) -> Callable[..., Any]:
    """``run(tokens, **kwargs)``: :func:`patched_forward` with these patches and start (the logits), for a metric
    that calls the forward itself (:func:`headlens.analyses.measure.metrics.model_values`)."""

    def run(tokens: Tensor, **kwargs: Any) -> Any:
        return_type = kwargs.pop("return_type", "logits")
        return patched_forward(model, tokens, patches, start=start, return_type=return_type, **kwargs)

    return run


def check_start(model: Any, tokens: Int[Tensor, "batch pos"], layers: int | Sequence[int], *, atol: float = 1e-5, **kwargs: Any) -> bool:
    """True when continuing from each block in ``layers`` reproduces a full forward's logits
    (``kwargs``, e.g. ``attention_mask``, go to every forward).  Every block a caller will start
    from must be checked: a model that picks each layer's mask by its position in the loop
    (sliding and full layers alternating) goes wrong at some cuts and not at others.  ``tokens``
    should be the longest input the caller runs (a window longer than the sliding one shows it)."""
    layers = [layers] if isinstance(layers, int) else sorted(set(layers))
    store: dict[int, Tensor] = {}

    def keep(layer: int) -> HookFn:
        def fn(act: Tensor, hook: Any = None) -> None:
            store[layer] = act.detach().clone()

        return fn

    try:
        with torch.inference_mode():
            full = patched_forward(model, tokens, [(resid_site(layer).hook, keep(layer)) for layer in layers], **kwargs)
            scale = max(1.0, float(full.abs().max()))
            for layer in layers:
                part = patched_forward(model, tokens, start=Start(layer=layer, resid=store[layer]), **kwargs)
                if not (part.shape == full.shape and float((part - full).abs().max()) <= atol * scale):
                    log.info("a forward continued from block %d does not reproduce the full forward: the whole model runs instead", layer)
                    return False
    except (NotImplementedError, RuntimeError, ValueError, KeyError) as exc:
        log.info("cannot continue a forward from a later block (%s: %s): the whole model runs instead", type(exc).__name__, exc)
        return False
    return True


def _block_list(model: Any) -> torch.nn.ModuleList:
    blocks = getattr(model.bridge, "blocks", None)
    if not isinstance(blocks, torch.nn.ModuleList) or len(blocks) != model.n_layers:
        raise NotImplementedError("this model has no standard 'blocks' list")
    return blocks


@contextmanager
def _from_layer(model: Any, layer: int) -> Iterator[None]:
    """Inside the block, the model's forward runs blocks ``layer..n_layers-1`` only."""
    if layer == 0:
        yield
        return
    blocks = _block_list(model)
    saved = blocks._modules
    kept = list(saved.values())[layer:]
    blocks._modules = OrderedDict((str(i), m) for i, m in enumerate(kept))
    try:
        with _layer_types_from(model, layer, len(saved)):
            yield
    finally:
        blocks._modules = saved


@contextmanager
def _layer_types_from(model: Any, layer: int, n_layers: int) -> Iterator[None]:
    """A model that picks each layer's mask by its place in the loop (``config.layer_types[i]``:
    sliding and full layers) sees the cut list's types inside the block."""
    config: Any = getattr(getattr(model.bridge, "original_model", None), "config", None)
    types = getattr(config, "layer_types", None)
    if not (isinstance(types, list) and len(types) == n_layers):
        yield
        return
    config.layer_types = types[layer:]
    try:
        yield
    finally:
        config.layer_types = types
