"""Separate q, k and v inputs per head for attention that runs inside Hugging Face (GPT-Neo, OPT, GPT-J).

The bridge's split-input flag (``use_split_qkv_input``) forks the residual stream into one copy
per head for the q, k and v projections, but only on the adapters that run attention
themselves; GPT-Neo, OPT and GPT-J hand the normalised block input to the Hugging Face
attention module, which projects it once for all heads.  :func:`own_split_inputs` gives those
models the same readers, with hooks of its own that it removes on exit:

* a forward pre-hook on the block's input norm (``ln1``) keeps the block's residual input ``x``;
* a forward hook on each of the q, k and v projections (the ``nn.Linear`` inside the bridge's
  ``attn.q``/``attn.k``/``attn.v``) replaces the projection's output: ``x`` is copied once per
  head (``[batch, pos, head, d_model]``), passed through the attention's own
  ``hook_{q,k,v}_input`` hook point (so forward hooks patch each head's copy and backward hooks
  read its gradient, exactly as on the natively split adapters), normalised copy by copy with
  the block's own norm module and projected with that head's rows of the projection's weight
  and bias;
* on a parallel block without a second norm (GPT-J: attention and MLP both read ``ln_1(x)``)
  a forward pre-hook on the MLP gives it ``ln_1(hook_mlp_in(x))``, its own copy of ``x``
  through the block's ``hook_mlp_in`` hook point.

With no hook changing a copy, every projection's output equals the model's own; on entry one
short forward compares them (and the MLP's input on GPT-J) and refuses, in one line, a model on
which they differ (a projection that does not read its block's input norm, e.g. OPT-350m's
post-norm blocks).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from headlens.probes.errors import UnsupportedModelError
from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["own_split_inputs", "SPLIT_RTOL", "SPLIT_EPS_FACTOR"]

#: Largest difference (relative to the output's norm) between a split projection without
#: patches and the model's own projection in float32 (measured ~1e-7); in lower precision
#: :data:`SPLIT_EPS_FACTOR` times the dtype's machine epsilon when that is larger (rounding
#: of the same sums in another order).  A projection reading something else misses by O(1).
SPLIT_RTOL = 1e-4
SPLIT_EPS_FACTOR = 4.0


@dataclass
class _State:
    """The block inputs of the forward under way and, while verifying, the largest misfit."""

    resid: dict[int, Tensor] = field(default_factory=dict)
    verify: bool = False
    misfit: dict[str, float] = field(default_factory=dict)

    def record(self, name: str, ours: Tensor, theirs: Tensor) -> None:
        if self.verify:
            rel = float((ours.float() - theirs.float()).norm() / theirs.float().norm().clamp_min(1e-30))
            self.misfit[name] = max(rel, self.misfit.get(name, 0.0))


def _refuse(model: LoadedModel, why: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"edge scores need a separate q/k/v input per head, and {why}", model=model.name)


def _block_input(args: tuple, kwargs: dict) -> Tensor | None:
    if args and isinstance(args[0], Tensor):
        return args[0]
    x = kwargs.get("hidden_states", kwargs.get("input"))
    return x if isinstance(x, Tensor) else None


def _keep_input(state: _State, layer: int) -> Any:
    def fn(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = _block_input(args, kwargs)
        if x is not None:
            state.resid[layer] = x

    return fn


def _split_projection(state: _State, layer: int, which: str, point: nn.Module, norm: nn.Module, slots: int) -> Any:
    name = f"blocks.{layer}.attn.{which}"

    def fn(module: nn.Linear, args: tuple, output: Tensor) -> Tensor:
        x = state.resid.get(layer)
        if x is None or x.shape[:-1] != output.shape[:-1]:
            raise RuntimeError(f"{name}: the block input of this forward was not captured")
        b, p, d = x.shape
        forked = point(x[:, :, None, :].expand(b, p, slots, d).contiguous())  # [b, p, slot, d_model]: the readers
        normed = norm(forked.reshape(b * p * slots, d)).reshape(b, p, slots, d)
        w = module.weight.view(slots, -1, d)  # [slot, d_head, d_model]
        out = torch.einsum("bpsd,sed->bpse", normed.to(w.dtype), w)
        if module.bias is not None:
            out = out + module.bias.view(slots, -1)
        out = out.reshape(b, p, -1).to(output.dtype)
        state.record(name, out.detach(), output.detach())
        return out

    return fn


def _split_mlp(state: _State, layer: int, point: nn.Module, norm: nn.Module) -> Any:
    name = f"blocks.{layer}.mlp"

    def fn(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        x = state.resid.get(layer)
        theirs = _block_input(args, kwargs)
        if x is None or theirs is None:
            raise RuntimeError(f"{name}: the block input of this forward was not captured")
        ours = norm(point(x)).to(theirs.dtype)
        state.record(name, ours.detach(), theirs.detach())
        if args and isinstance(args[0], Tensor):
            return (ours, *args[1:]), kwargs
        key = "hidden_states" if "hidden_states" in kwargs else "input"
        return args, {**kwargs, key: ours}

    return fn


def _linear(model: LoadedModel, attn: Any, which: str) -> nn.Linear:
    sub = getattr(attn, which, None)
    lin = getattr(sub, "original_component", None)
    if not isinstance(lin, nn.Linear):
        raise _refuse(model, f"this model's attention has no separate {which} projection to split (found {type(lin).__name__})")
    return lin


@contextmanager
def own_split_inputs(model: LoadedModel, tokens: Tensor) -> Iterator[None]:
    """The q/k/v readers of every head (and GPT-J's MLP reader) built by hooks of our own (module doc).

    ``tokens`` ``[1, pos]``: the short input of the entry check."""
    bridge = model.bridge
    n_h = model.n_heads
    n_kv = model.n_kv_heads
    parallel = bool(getattr(bridge.cfg, "parallel_attn_mlp", False))
    state = _State()
    handles: list[Any] = []
    try:
        for layer, block in enumerate(bridge.blocks):
            subs = getattr(block, "submodules", None) or {}
            ln1, attn = subs.get("ln1"), subs.get("attn")
            norm = getattr(ln1, "original_component", None)
            if ln1 is None or attn is None or not isinstance(norm, nn.Module):
                raise _refuse(model, f"block {layer} has no input norm before its attention to split the input at")
            handles.append(ln1.register_forward_pre_hook(_keep_input(state, layer), with_kwargs=True))
            for which, slots in (("q", n_h), ("k", n_kv), ("v", n_kv)):
                lin = _linear(model, attn, which)
                point = getattr(attn, f"hook_{which}_input", None)
                if point is None or lin.weight.shape[0] % slots:
                    raise _refuse(model, f"blocks.{layer}.attn has no hook_{which}_input for {slots} heads")
                handles.append(lin.register_forward_hook(_split_projection(state, layer, which, point, norm, slots)))
            if parallel and subs.get("ln2") is None:  # GPT-J: the MLP reads the attention's normalised input
                mlp = subs.get("mlp")
                if mlp is None:
                    raise _refuse(model, f"block {layer} has no MLP bridge to give its own input")
                handles.append(mlp.register_forward_pre_hook(_split_mlp(state, layer, block.hook_mlp_in, norm), with_kwargs=True))
        state.verify = True
        with torch.inference_mode():
            bridge(tokens.to(model.device), return_type=None)
        state.verify = False
        state.resid.clear()
        dtype = next(iter(model.bridge.parameters())).dtype
        tol = max(SPLIT_RTOL, SPLIT_EPS_FACTOR * torch.finfo(dtype).eps) if dtype.is_floating_point else SPLIT_RTOL
        bad = {k: v for k, v in state.misfit.items() if v > tol}
        if len(state.misfit) < 3 * model.n_layers:
            raise _refuse(model, f"only {len(state.misfit)} of its {3 * model.n_layers} q/k/v projections ran in a forward")
        if bad:
            name, rel = max(bad.items(), key=lambda kv: kv[1])
            raise _refuse(
                model,
                f"{name} does not read its block's input norm on this model (a per-head copy through that norm differs from "
                f"the model's own by {rel:.2g} of its norm: post-norm blocks?)",
            )
        log.info("edge readers: q/k/v inputs split by headlens' own hooks (%d hooks)", len(handles))
        yield
    finally:
        for h in handles:
            h.remove()
        state.resid.clear()
