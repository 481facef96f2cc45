"""Hook names and hooks of the edge graph: the senders' outputs, the readers' inputs, the flags.

Readers are the bridge's split-input hook points (``blocks.L.attn.hook_{q,k,v}_input``,
``[batch, pos, slot, d_model]``, one residual copy per head or key-value head, read before the
layer norm) and ``blocks.L.hook_mlp_in``; both fire only while the bridge's
``use_split_qkv_input`` / ``use_hook_mlp_in`` flags are on.  :func:`edge_flags` turns them on
for a ``with`` block and restores the caller's flags on exit (an exception included); on the
adapters whose attention runs inside Hugging Face (GPT-Neo, OPT, GPT-J) the same split inputs
come from hooks of our own (:mod:`headlens.analyses.circuits.split`).
:func:`check_edge_model` refuses, in one line, a model on which a reader does not read the
residual sum of the writers (post-norm blocks; encoders).

Senders' outputs of one batch are kept as one tensor ``[batch, sender, pos, d_model]`` in
sender order (:mod:`headlens.analyses.circuits.graph`): ``blocks.0.hook_resid_pre`` (the
embeddings), each head's ``z @ W_O`` and each ``hook_mlp_out``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from headlens.analyses.circuits.graph import EdgeGraph
from headlens.analyses.circuits.split import own_split_inputs
from headlens.analyses.circuits.writes import head_sum_norms, stream_writes
from headlens.probes.errors import UnsupportedModelError
from headlens.probes.hooks import HookFn, attached
from headlens.probes.loading import LoadedModel
from headlens.probes.reader_rows import reader_hook

log = logging.getLogger(__name__)

__all__ = [
    "edge_flags",
    "check_edge_model",
    "additivity_hooks",
    "check_additivity",
    "refuse_encoder",
    "sender_capture",
    "head_out_weights",
    "EMBED_HOOK",
    "ADDITIVITY_RTOL",
    "ADDITIVITY_EPS_FACTOR",
]

EMBED_HOOK = "blocks.0.hook_resid_pre"
#: Largest position-varying remainder of ``hook_attn_out - sum_h z_h W_O[h]`` (relative to its
#: norm) for which a head's ``z @ W_O`` is taken as its residual write (float32 measures ~3e-7).
ADDITIVITY_RTOL = 1e-3
#: In lower precision the bound is this many machine epsilons of the model's dtype when that is
#: larger (bfloat16 rounds the same sums to ~2e-3; a norm after the head sum misses by O(0.1-1)).
ADDITIVITY_EPS_FACTOR = 4.0
_FLAGS = ("use_split_qkv_input", "use_hook_mlp_in")
ENCODER_REFUSAL = "edge scores need a causal decoder whose blocks add each head's output to the residual stream; encoders are not supported"


@contextmanager
def edge_flags(model: LoadedModel) -> Iterator[None]:
    """The split q/k/v inputs and ``hook_mlp_in`` switched on for the block; the caller's flags restored after.

    On adapters whose attention runs inside Hugging Face (no split input of the bridge's own:
    GPT-Neo, OPT, GPT-J) the same readers come from :func:`~headlens.analyses.circuits.split.own_split_inputs`."""
    bridge = model.bridge
    cfg = bridge.cfg
    saved = {f: bool(getattr(cfg, f, False)) for f in _FLAGS}
    saved_attn_in = bool(getattr(cfg, "use_attn_in", False))
    with ExitStack() as stack:
        try:
            if model.is_encoder:
                raise UnsupportedModelError(ENCODER_REFUSAL, model=model.name)
            if saved_attn_in:
                bridge.set_use_attn_in(False)
            if not saved["use_hook_mlp_in"]:
                bridge.set_use_hook_mlp_in(True)
            native = True
            try:
                if not saved["use_split_qkv_input"]:
                    bridge.set_use_split_qkv_input(True)
            except (NotImplementedError, ValueError) as exc:
                native = False
                log.info("no split q/k/v input in the bridge (%s); splitting with our own hooks", str(exc).split(".")[0])
            if not native:
                stack.enter_context(own_split_inputs(model, probe_tokens(model)))
            yield
        finally:
            stack.close()
            if bool(getattr(cfg, "use_split_qkv_input", False)) != saved["use_split_qkv_input"]:
                bridge.set_use_split_qkv_input(saved["use_split_qkv_input"])
            if bool(getattr(cfg, "use_hook_mlp_in", False)) != saved["use_hook_mlp_in"]:
                bridge.set_use_hook_mlp_in(saved["use_hook_mlp_in"])
            if saved_attn_in and not bool(getattr(cfg, "use_attn_in", False)):
                bridge.set_use_attn_in(True)


def probe_tokens(model: LoadedModel) -> Tensor:
    """A short input ``[1, pos]`` for the checks: within the context (a tracr model's is max_seq_len + 1) and the vocabulary."""
    n_tokens = min(8, int(model.n_ctx))
    return torch.arange(3, 3 + n_tokens, device=model.device)[None, :] % max(2, int(model.bridge.cfg.d_vocab))


def head_out_weights(model: LoadedModel) -> Float[Tensor, "layer head d_head d_model"]:
    """``W_O`` of every layer, per head (detached)."""
    return model.bridge.W_O.detach()


def sender_capture(
    model: LoadedModel,
    graph: EdgeGraph,
    store: dict[str, Tensor],
    *,
    dtype: torch.dtype = torch.float32,
    window: tuple[int, int] | None = None,
) -> list:
    """Hooks filling ``store["out"]`` ``[batch, sender, pos, d_model]`` with the senders' outputs of a forward.

    ``window=(lo, hi)``: only senders ``lo .. hi-1`` (in sender order), stored at ``0 .. hi-lo-1``."""
    n_l, n_h = model.n_layers, model.n_heads
    lo, hi = window or (0, len(graph.senders()))
    w_o = head_out_weights(model)

    def alloc(x: Tensor) -> Tensor:
        if "out" not in store or store["out"].shape[0] != x.shape[0] or store["out"].shape[2] != x.shape[1]:
            store["out"] = torch.zeros(x.shape[0], hi - lo, x.shape[1], x.shape[-1], dtype=dtype, device=x.device)
        return store["out"]

    def embed(x: Tensor, hook: Any = None) -> None:
        out = alloc(x)
        if lo == 0:
            out[:, 0] = x.detach().to(dtype)

    def heads(layer: int) -> HookFn:
        first = 1 + layer * (n_h + 1)
        a, b = max(first, lo), min(first + n_h, hi)

        def fn(z: Tensor, hook: Any = None) -> None:
            zs = z.detach()[:, :, a - first : b - first].to(dtype)
            w = w_o[layer, a - first : b - first].to(device=z.device, dtype=dtype)
            store["out"][:, a - lo : b - lo] = torch.einsum("bphe,hem->bhpm", zs, w)

        return fn

    def mlp(layer: int) -> HookFn:
        idx = 1 + layer * (n_h + 1) + n_h

        def fn(x: Tensor, hook: Any = None) -> None:
            store["out"][:, idx - lo] = x.detach().to(dtype)

        return fn

    hooks: list = [(EMBED_HOOK, embed)]  # always: it allocates the store
    for layer in range(n_l):
        first = 1 + layer * (n_h + 1)
        if max(first, lo) < min(first + n_h, hi):
            hooks.append((f"blocks.{layer}.attn.hook_z", heads(layer)))
        if lo <= first + n_h < hi:
            hooks.append((f"blocks.{layer}.hook_mlp_out", mlp(layer)))
    return hooks


def check_edge_model(model: LoadedModel, graph: EdgeGraph) -> None:
    """Refuse (one line, :class:`UnsupportedModelError`) a model whose readers do not read the sum of the writers.

    Run inside :func:`edge_flags`.  On a short input (:func:`probe_tokens`): each reader's input must equal the
    sum of the senders before it plus a position-independent constant (the biases), to
    :data:`ADDITIVITY_RTOL` of its norm (:data:`ADDITIVITY_EPS_FACTOR` epsilons of a lower-precision dtype).
    A caller that runs a capture forward of its own can check there instead (:func:`additivity_hooks`,
    :func:`check_additivity`): the same rule, without this forward."""
    refuse_encoder(model)
    store: dict[str, Tensor] = {}
    seen: dict[tuple[int, str], Tensor] = {}
    hooks = sender_capture(model, graph, store) + additivity_hooks(model, graph, seen)
    with torch.inference_mode(), attached(model.bridge, hooks):
        model.bridge(probe_tokens(model), return_type=None)
    check_additivity(model, graph, store["out"], seen)


def refuse_encoder(model: LoadedModel) -> None:
    if model.is_encoder:
        raise UnsupportedModelError(ENCODER_REFUSAL, model=model.name)


def additivity_hooks(model: LoadedModel, graph: EdgeGraph, seen: dict[tuple[int, str], Tensor], *, row: int = 0) -> list:
    """Hooks keeping batch row ``row`` of every reader's input in ``seen`` (for :func:`check_additivity`)."""
    n_l = model.n_layers

    def keep(layer: int, which: str) -> HookFn:
        def fn(x: Tensor, hook: Any = None) -> None:
            seen[(layer, which)] = x.detach()[row : row + 1].float()

        return fn

    return [(reader_hook(lr, w, n_l), keep(lr, w)) for (lr, w) in graph.blocks]


def check_additivity(
    model: LoadedModel,
    graph: EdgeGraph,
    out: Float[Tensor, "batch sender pos d_model"],
    seen: dict[tuple[int, str], Tensor],
    *,
    row: int = 0,
) -> None:
    """The rule of :func:`check_edge_model` on one forward's senders' outputs ``out`` (row ``row`` of it) and the
    readers' inputs ``seen`` of the same row (:func:`additivity_hooks`)."""
    n_l = model.n_layers
    norms = head_sum_norms(model)
    out = out[row : row + 1].float()
    dtype = next(iter(model.bridge.parameters())).dtype
    tol = max(ADDITIVITY_RTOL, ADDITIVITY_EPS_FACTOR * torch.finfo(dtype).eps) if dtype.is_floating_point else ADDITIVITY_RTOL
    for (layer, which), (_first, _slots, n_send) in graph.blocks.items():
        if (layer, which) not in seen:  # the adapter never runs the hook (Bloom's hook_mlp_in, MPT's fused q input)
            raise UnsupportedModelError(
                f"edge scores need each reader's input, but the bridge never runs {reader_hook(layer, which, n_l)} on this model",
                model=model.name,
            )
        x = seen[(layer, which)].to(out.device)
        total = stream_writes(graph, norms, out, n_send)  # [batch, pos, d_model]
        if x.dim() == 4:
            rest = x - total[:, :, None, :]
        else:
            rest = x - total
        rest = rest - rest.mean(dim=1, keepdim=True)
        rel = float(rest.norm() / x.norm().clamp_min(1e-30))
        if rel > tol:
            name = reader_hook(layer, which, n_l)
            raise UnsupportedModelError(
                f"edge scores need each reader to read the sum of the writers before it, but {name} differs from that sum by "
                f"{rel:.2g} of its norm on this model (a norm or scale after the head sum, or post-norm blocks)",
                model=model.name,
            )
