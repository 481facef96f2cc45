"""A head's attention on a prompt, in a notebook: :func:`attention_view` -> :class:`AttentionView`.

The view runs the model through :func:`headlens.probes.capture.capture` (the prompt framed by
:meth:`~headlens.probes.loading.LoadedModel.frame`: ``[BOS] text`` on a decoder, ``[CLS] text [SEP]``
on an encoder) and keeps the patterns of the layers and heads asked for.  In a notebook it shows
the report page's attention component (hover or focus a token to see where it attends, click to
pin; a head picker for a layer, a layer picker for several), self-contained and offline;
``save(path)`` writes the same as a standalone page, ``plot()`` draws the patterns as a Figure.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

from headlens.probes.capture import capture, tokenize_for
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import InputError
from headlens.probes.loading import LoadedModel, check_layers_heads
from headlens.probes.outputs import check_out_file, write_text
from headlens.reports.api.models import as_loaded
from headlens.reports.render.attention_view_plots import plot_pattern, plot_patterns
from headlens.reports.render.page import attention_component
from headlens.reports.render.page.attention_component import embedded_bytes, fragment_html, standalone_html, view_data

log = logging.getLogger(__name__)

__all__ = ["AttentionView", "attention_view"]


def _span(word: str, values: Sequence[int]) -> str:
    """``"layer 1"``, ``"heads 0-3"``, ``"layers 0,2"``."""
    v = list(values)
    if len(v) == 1:
        return f"{word} {v[0]}"
    return f"{word}s " + (f"{v[0]}-{v[-1]}" if v == list(range(v[0], v[-1] + 1)) else ",".join(map(str, v)))


@dataclass(frozen=True, kw_only=True, eq=False)
class AttentionView:
    """The attention of some heads on one prompt.

    ``patterns[i, j]`` is the ``[query, key]`` pattern (float32, CPU) of head ``heads[j]`` in layer
    ``layers[i]``; ``tokens`` are the prompt's tokens with the model's framing (``[BOS]``, or
    ``[CLS]``/``[SEP]``).  ``info`` is what reproduces it (model, framing, dtype, device).
    """

    prompt: str
    tokens: list[str]
    patterns: torch.Tensor
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    causal: bool
    info: dict[str, Any] = field(default_factory=dict)

    def pattern(self, layer: int, head: int) -> torch.Tensor:
        """``[query, key]`` of head ``layer.head`` (model indices; one of this view's)."""
        if layer not in self.layers or head not in self.heads:
            raise InputError(
                f"head {layer}.{head} is not in this view ({_span('layer', self.layers)}, {_span('head', self.heads)})",
                layer=layer,
                head=head,
            )
        return self.patterns[self.layers.index(layer), self.heads.index(head)]

    def _data(self) -> dict[str, Any]:
        suffix = int(self.info.get("framing", {}).get("n_suffix", 0))
        data = view_data(
            self.tokens,
            self.patterns.numpy(),
            layers=self.layers,
            heads=self.heads,
            causal=self.causal,
            query=max(0, len(self.tokens) - 1 - suffix),  # the last token of the text, not [SEP]
            title=f"{self.info.get('model', 'model')}: {len(self.tokens)} tokens",
        )
        data["manifest"] = self.info  # what reproduces the numbers; the script does not read it
        return data

    def _repr_html_(self) -> str:
        """The interactive view (a fresh element id each time: several views live in one notebook)."""
        return fragment_html(self._data())

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """A standalone ``.html`` page of the view (opens offline); refuses an existing file unless ``overwrite``."""
        target = check_out_file(path, overwrite=overwrite)
        title = f"headlens attention: {self.info.get('model', 'model')}, {_span('layer', self.layers)}, {_span('head', self.heads)}"
        return write_text(target, standalone_html(self._data(), title=title))

    def plot(self, layer: int | None = None, head: int | None = None) -> Figure:
        """The pattern of head ``layer.head`` with token labels; without both, every head of the
        view in a grid (a row per layer), or those of ``layer`` or of ``head``."""
        if layer is not None and head is not None:
            model = self.info.get("model", "model")
            return plot_pattern(self.pattern(layer, head), self.tokens, title=f"{model}: head {layer}.{head}", causal=self.causal)
        layers = self.layers if layer is None else (layer,)
        heads = self.heads if head is None else (head,)
        for x, have, name in ((layer, self.layers, "layer"), (head, self.heads, "head")):
            if x is not None and x not in have:
                raise InputError(f"{name} {x} is not in this view ({_span(name, have)})", **{name: x})
        if len(layers) == 1 and len(heads) == 1:
            return self.plot(layers[0], heads[0])
        sub = self.patterns[[self.layers.index(x) for x in layers]][:, [self.heads.index(x) for x in heads]]
        return plot_patterns(
            sub, self.tokens, layers=layers, heads=heads, title=f"{self.info.get('model', 'model')}: {len(self.tokens)} tokens"
        )

    def __repr__(self) -> str:
        return (
            f"AttentionView(model={self.info.get('model')!r}, {len(self.tokens)} tokens, "
            f"{_span('layer', self.layers)} x {_span('head', self.heads)}, {'causal' if self.causal else 'bidirectional'})"
        )


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _loaded(model: Any) -> LoadedModel:
    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, (LoadedModel, str)) or not model:
        raise InputError(
            f"model must be a loaded model or a model name, folder or Hub id, got {type(model).__name__}", model=type(model).__name__
        )
    return as_loaded(model)


def _indices(value: Any, name: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, int) else list(value) if isinstance(value, (list, tuple, range)) else None
    if items is None or not items or any(isinstance(x, bool) or not isinstance(x, int) for x in items):
        raise InputError(f"{name} must be an int or a list of ints, got {value!r}", **{name: value})
    return tuple(items)


def attention_view(
    model: LoadedModel | str,
    prompt: str,
    *,
    layer: int | Sequence[int] | None = None,
    head: int | None = None,
    prepend_bos: bool | None = None,
    truncate: bool = False,
) -> AttentionView:
    """Where each token of ``prompt`` attends, for one head, a layer or several layers.

    ``layer``: one layer, a list of layers, or None for all; ``head``: one head (in each layer
    chosen) or None for all.  ``layer=1, head=2`` is one head; ``layer=1`` a layer with a head
    picker; a list of layers (or none) adds a layer picker.  ``prepend_bos`` (default True) frames
    the prompt as every command does: ``[BOS] text`` on a decoder, ``[CLS] text [SEP]`` on an
    encoder; False: the text alone.  ``truncate`` cuts a prompt longer than the model's context.
    ``model`` is a loaded model or a name (``"demo"``, ``"minilm"``), folder or Hub id.
    """
    if not isinstance(prompt, str) or not prompt:
        raise InputError("prompt must be a non-empty string", prompt=prompt)
    layers = _indices(layer, "layer")
    if head is not None and (isinstance(head, bool) or not isinstance(head, int)):
        raise InputError(f"head must be an int, got {head!r}", head=head)
    loaded = _loaded(model)
    bos = True if prepend_bos is None else bool(prepend_bos)
    if head is not None:
        chosen = check_layers_heads(loaded, None, tuple((x, head) for x in (layers or range(loaded.n_layers))))
    else:
        chosen = check_layers_heads(loaded, layers, None)
    batch = tokenize_for(loaded, [prompt], prepend_bos=bos, truncate=truncate)
    heads = tuple(next(iter(chosen.values())))  # the same heads in every layer
    n = int(batch.lengths[0])
    size = embedded_bytes(len(chosen), len(heads), n, causal=not loaded.is_encoder)
    if size > attention_component.MAX_VIEW_BYTES:
        raise InputError(
            f"{len(chosen)} layers x {len(heads)} heads on {n} tokens are {_size(size)} of weights, more than one view holds "
            f"({_size(attention_component.MAX_VIEW_BYTES)}): pick layer= (and head=), or a shorter prompt",
            layer=layer,
            head=head,
        )
    pairs = tuple((x, h) for x in chosen for h in heads)
    cap = capture(loaded, batch, CaptureConfig(what=("pattern",), heads=pairs, prepend_bos=bos, batch_size=1))
    patterns = torch.stack([cap.get(x, "pattern")[0, :, :n, :n].float() for x in chosen]).cpu()
    info = {
        "model": loaded.name,
        "path": loaded.path,
        "prompt": prompt,
        "prepend_bos": bos,
        "framing": batch.framing,
        "framing_tokens": loaded.framing(bos),
        "layers": list(chosen),
        "heads": list(heads),
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "device": str(loaded.device),
    }
    return AttentionView(
        prompt=prompt,
        tokens=list(batch.strings[0]),
        patterns=patterns,
        layers=tuple(chosen),
        heads=heads,
        causal=not loaded.is_encoder,
        info=info,
    )
