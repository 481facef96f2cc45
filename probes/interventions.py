"""Edits of pre-softmax attention scores that take effect on every supported family, or are refused.

``with score_edits(model, {layer: edit, ...}): ...`` runs ``edit(scores) -> scores`` on the
masked pre-softmax scores ``[batch, head, q, k]`` of each listed layer: after the scale, the
logit softcap and the causal / sliding-window / padding mask, before the softmax.  An edit
typically sets entries to ``-inf`` (the key disappears and the softmax renormalises over the
others); it must leave every query at least one finite key.  The pattern that follows
(``hook_pattern``) is the edited one on every backend.

How the edit gets into the computation depends on the layer (:func:`headlens.probes.attention.attention_spec`):

* **native** layers (the bridge computes attention itself: GPT-2, Llama, Qwen2, Mistral,
  Gemma, Gemma2, GPT-NeoX, and every family of issue 48: Gemma 3, Qwen 3, OLMo 2, Phi, Phi-3,
  StableLM, Granite, Cohere, SmolLM3, GPT-BigCode, Falcon, Bloom and MPT with their ALiBi bias
  inside the scores, Qwen2-MoE, OLMoE): a hook on ``blocks.{L}.attn.hook_attn_scores``.
* **interface** layers (the bridge hands attention to a Hugging Face module that picks its
  attention function through ``ALL_ATTENTION_FUNCTIONS``: OPT, GPT-J, BERT's
  ``BertSelfAttention``): headlens registers
  its own attention function with ``transformers.AttentionInterface`` (with the eager mask
  builder in ``AttentionMaskInterface``), once, on first use, and switches
  ``config._attn_implementation`` to it for the duration of the ``with`` block.  The function
  does what the family's eager attention does (``scaling``, ``softcap``, the additive
  ``attention_mask``, grouped-query heads via ``module.num_key_value_groups``, dropout only in
  training; scores in float32 where the family's eager code upcasts them, GPT-J) plus the
  edit, and returns the edited weights.  While the switch holds, every layer of the model
  runs through it; layers without an edit compute plain eager attention.
* **method** layers (GPT-Neo, whose ``GPTNeoSelfAttention._attn`` computes attention): a
  per-instance replacement of ``_attn`` that does what Hugging Face's does plus the edit.

Anything else raises :class:`~headlens.probes.errors.InterventionError` naming the family and layer.

**The guard.**  Before a kind of layer (backend, attention class, window) is first edited,
:func:`check_score_edits` runs a short probe input three times: unedited; through the backend
with an edit that changes nothing (the output must match, so headlens' copy of the family's
attention is faithful, and the backend must have been entered); and with one key masked,
each query's own position for every query ``>= 1``, in every head of that layer (the output
must move; the diagonal is never masked by the model or by the sink and window edits, so an
enclosing ``score_edits`` block cannot hide the change).  The verdict is
cached in ``model.extra``; a failed one raises ``InterventionError`` then and on every later
edit of that kind: an edit that would not take effect is refused, never a silent zero.

Everything is restored on exit, normal or by exception: the hooks headlens added, the
``_attn_implementation`` of every config it switched, the ``_attn`` replacements.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor

from headlens.probes import hf_attention
from headlens.probes.attention import attention_core, attention_spec
from headlens.probes.edit_functions import ACTIVE, ATTENTION_IMPLEMENTATION, Edit, LayerState, edited, interface_attention, neo_attn
from headlens.probes.errors import InputError, InterventionError
from headlens.probes.hooks import attached

__all__ = [
    "Edit",
    "score_edits",
    "check_score_edits",
    "edit_backends",
    "mask_keys",
    "ATTENTION_IMPLEMENTATION",
]

log = logging.getLogger(__name__)

#: ``model.extra`` key of the guard's verdicts: ``{kind: None (edits take effect) or the reason they do not}``.
_PROBE_KEY = "score_edit_probe"

_MISSING = object()

#: Attention classes whose ``_attn`` method headlens replaces (the class must not override ``forward``).
_METHOD_CLASSES = frozenset({"GPTNeoSelfAttention"})


# ----------------------------------------------------------------------------- backends


def _family(model: Any) -> str:
    return attention_spec(model).family


def _module(model: Any, layer: int) -> Any:
    """The Hugging Face module that computes the layer's attention (BERT: ``BertSelfAttention`` inside ``BertAttention``)."""
    return attention_core(model.bridge.blocks[layer].attn.original_component)


_interface_classes: dict[type, bool] = {}


def _uses_interface(module: Any) -> bool:
    """True when the module's ``forward`` picks its attention function from ``ALL_ATTENTION_FUNCTIONS`` by its config."""
    cls = type(module)
    if cls not in _interface_classes:
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError) as exc:
            log.debug("no source for %s.forward (%s): assuming it does not use the attention interface", cls.__qualname__, exc)
            source = ""
        _interface_classes[cls] = "ALL_ATTENTION_FUNCTIONS" in source and "_attn_implementation" in source and hasattr(module, "config")
    return _interface_classes[cls]


def _uses_attn_method(module: Any) -> bool:
    cls = type(module)
    return cls.__name__ in _METHOD_CLASSES and callable(getattr(module, "_attn", None))


def _backend(model: Any, layer: int) -> str:
    """``native``, ``interface`` or ``method`` for one layer, or :class:`InterventionError`."""
    spec = attention_spec(model)
    if spec.layers[layer].native:
        return "native"
    module = _module(model, layer)
    if _uses_attn_method(module):
        return "method"
    if _uses_interface(module):
        return "interface"
    raise InterventionError(
        f"score edits on {spec.family}: layer {layer} ({type(module).__name__}) computes attention inside Hugging Face code"
        " that headlens can neither hook nor replace, so an edit would not take effect",
        family=spec.family,
        layer=layer,
    )


def edit_backends(model: Any, layers: Any = None) -> dict[int, str]:
    """Layer -> the backend that carries its edits (every layer by default); raises for a layer none can carry."""
    layers = range(model.n_layers) if layers is None else layers
    return {int(layer): _backend(model, int(layer)) for layer in layers}


def _check_edits(model: Any, edits: Mapping[int, Edit]) -> dict[int, Edit]:
    out: dict[int, Edit] = {}
    for layer, edit in edits.items():
        if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) or not 0 <= int(layer) < model.n_layers:
            raise InputError(f"score edit for layer {layer!r}: the model has layers 0..{model.n_layers - 1}", layer=layer)
        if not callable(edit):
            raise InputError(f"score edit for layer {layer}: not a function of the scores", layer=layer)
        out[int(layer)] = edit
    return out


# ----------------------------------------------------------------------------- the context manager


@contextmanager
def _active_states(states: dict[int, LayerState]) -> Iterator[None]:
    """Entries of :data:`ACTIVE` for the duration; a nested block's entries shadow the outer ones, which come back."""
    saved = {key: ACTIVE.get(key) for key in states}
    try:
        for key, state in states.items():
            outer = saved[key]
            if outer is not None and outer.edit is not None and state.edit is not None:
                first, second = outer.edit, state.edit
                state.edit = lambda s, a=first, b=second: b(a(s))  # nested blocks compose: outer edit first
            elif outer is not None and state.edit is None:
                state.edit = outer.edit
            ACTIVE[key] = state
        yield
    finally:
        for key, outer in saved.items():
            if outer is None:
                ACTIVE.pop(key, None)
            else:
                ACTIVE[key] = outer


@contextmanager
def _method_replaced(module: Any) -> Iterator[None]:
    """``module._attn`` replaced by headlens' on this instance (unless an outer block already did), then put back."""
    current = module.__dict__.get("_attn", _MISSING)
    if getattr(current, "headlens", False):
        yield
        return
    module._attn = neo_attn(module)
    try:
        yield
    finally:
        if current is _MISSING:
            module.__dict__.pop("_attn", None)
        else:
            module._attn = current


def _hook(edit: Edit, family: str, layer: int) -> Callable[..., Tensor]:
    def hook(scores: Tensor, hook: Any = None) -> Tensor:
        return edited(edit, scores, family, layer)

    return hook


@contextmanager
def _applied(model: Any, edits: Mapping[int, Edit | None], states: dict[int, LayerState] | None = None) -> Iterator[None]:
    """The edits in place, without the guard.  ``None`` runs a layer through its backend unedited.

    ``states`` (layer -> state), when given, receives the per-layer state of the interface
    and method backends (their call counts tell whether the backend was entered).
    """
    family = _family(model)
    backends = edit_backends(model, edits)
    hooks = [
        (f"blocks.{layer}.attn.hook_attn_scores", _hook(edit, family, layer))
        for layer, edit in edits.items()
        if backends[layer] == "native" and edit is not None
    ]
    with ExitStack() as stack:
        stack.enter_context(attached(model.bridge, hooks))
        active: dict[int, LayerState] = {}
        configs: dict[int, Any] = {}
        for layer, backend in backends.items():
            if backend == "native":
                continue
            module = _module(model, layer)
            state = LayerState(family=family, layer=layer, edit=edits[layer])
            active[id(module)] = state
            if states is not None:
                states[layer] = state
            if backend == "interface":
                top = model.bridge.original_model.config
                configs.setdefault(id(top), top)
                configs.setdefault(id(module.config), module.config)
        stack.enter_context(_active_states(active))
        if configs:
            hf_attention.register(ATTENTION_IMPLEMENTATION, interface_attention, "eager_mask")
            stack.enter_context(hf_attention.switched(list(configs.values()), ATTENTION_IMPLEMENTATION))
        for layer, backend in backends.items():
            if backend == "method":
                stack.enter_context(_method_replaced(_module(model, layer)))
        yield


# ----------------------------------------------------------------------------- the guard


def _kind(model: Any, layer: int, backend: str) -> str:
    spec = attention_spec(model).layers[layer]
    return f"{backend}:{type(_module(model, layer)).__name__}:window={spec.window}"


def _probe_tokens(model: Any) -> Tensor:
    vocab = int(getattr(model.bridge.cfg, "d_vocab", 0) or len(model.tokenizer))
    ids = (torch.arange(1, 9) * 997 + 13) % vocab
    return ids[None, :].to(model.device)


def _own_key_edit(scores: Tensor) -> Tensor:
    """Each query at position ``>= 1`` loses its own key, in every head."""
    q, k = scores.shape[-2], scores.shape[-1]
    pos = torch.arange(k - q, k, device=scores.device)
    own = (torch.arange(k, device=scores.device)[None, :] == pos[:, None]) & (pos[:, None] >= 1)
    return scores.masked_fill(own, -math.inf)


def _probe(model: Any, layer: int, backend: str) -> str | None:
    """None when an edit of ``layer`` through ``backend`` takes effect and an empty edit changes nothing; else why not."""
    tokens = _probe_tokens(model)

    states: dict[int, LayerState] = {}

    def logits(edit: Edit) -> Tensor:
        with _applied(model, {layer: edit}, states):
            return model.bridge(tokens, return_type="logits").float()

    with torch.inference_mode(), warnings.catch_warnings():
        # the bridge warns when a post-hoc hook's edit is discarded: that is what the probe detects
        warnings.simplefilter("ignore", UserWarning)
        base = model.bridge(tokens, return_type="logits").float()
        same = logits(lambda s: s)
        entered = layer in states and states[layer].calls > 0
        moved = logits(_own_key_edit)
    if backend != "native" and not entered:
        return f"Hugging Face never called headlens' attention ({backend} backend)"
    scale = max(1.0, float(base.abs().max()))
    tol = (1e-4 if model.dtype == torch.float32 else 3e-2) * scale
    if not torch.isfinite(same).all() or float((same - base).abs().max()) > tol:
        worst = float((same - base).abs().max())
        return f"headlens' copy of the attention does not reproduce the model's output (max logit difference {worst:.3g})"
    if not torch.isfinite(moved).all():
        return "masking one key gave non-finite logits"
    if torch.equal(moved, base):
        return "masking one key in every head left the output unchanged (the edit is discarded)"
    return None


def check_score_edits(model: Any, layers: Any = None) -> dict[int, str]:
    """Raise :class:`InterventionError` unless edits of ``layers`` (default: every layer) take effect; return their backends.

    Each kind of layer is probed once per model (see the module docstring); the verdicts
    are cached in ``model.extra["score_edit_probe"]``.
    """
    family = _family(model)
    backends = edit_backends(model, layers)
    verdicts: dict[str, str | None] = model.extra.setdefault(_PROBE_KEY, {})
    first_of_kind: dict[str, int] = {}  # the probe runs on the first layer of each kind
    for layer in range(model.n_layers):
        try:
            first_of_kind.setdefault(_kind(model, layer, _backend(model, layer)), layer)
        except InterventionError:
            continue
    for layer, backend in backends.items():
        kind = _kind(model, layer, backend)
        probe_layer = first_of_kind.get(kind, layer)
        if kind not in verdicts:
            verdicts[kind] = _probe(model, probe_layer, backend)
            log.debug("score edits on %s, %s (probed on layer %d): %s", family, kind, probe_layer, verdicts[kind] or "take effect")
        if verdicts[kind] is not None:
            raise InterventionError(
                f"score edits on {family}: refused for layer {layer}: {verdicts[kind]} (probe on layer {probe_layer}, {kind})",
                family=family,
                layer=layer,
            )
    return backends


@contextmanager
def score_edits(model: Any, edits: Mapping[int, Edit]) -> Iterator[None]:
    """Apply ``edits`` (``{layer: edit(scores) -> scores}``) to the masked pre-softmax scores inside the ``with`` block.

    Refused with :class:`InterventionError` (before anything changes) when a layer's edit
    could not take effect on this model; everything is restored on exit.
    """
    edits = _check_edits(model, edits)
    check_score_edits(model, edits)
    with _applied(model, edits):
        yield


def mask_keys(allowed: Callable[[int, int, torch.device], Tensor]) -> Edit:
    """An edit that sets scores to ``-inf`` where ``allowed(n_q, n_k, device)`` (``[q, k]`` or ``[head, q, k]`` bool) is False."""

    def edit(scores: Tensor) -> Tensor:
        ok = allowed(scores.shape[-2], scores.shape[-1], scores.device)
        return scores.masked_fill(~ok, -math.inf)

    return edit
