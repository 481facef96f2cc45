"""The converted checkpoint against the RASP program's own evaluation, on every input of a stated set.

The input set is every sequence over the program's vocabulary of length 1..``max_seq_len`` (or a given
list).  The RASP side is tracr's evaluator (:func:`tracr.rasp.rasp.evaluate`): on the whole sequence for
``semantics="exact"`` programs, on each prefix ``x[:i+1]`` (its last output) for ``"prefix"`` ones.  The
model side is the checkpoint loaded by :func:`headlens.probes.loading.load_model` (the path every command
takes), BOS prepended, argmax word at each position.  A RASP output of ``None`` (an aggregate that selects
nothing, e.g. position 0 of a shift) has no word: those positions are counted, never compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from headlens.analyses.tracr.convert import word_of
from headlens.analyses.tracr.programs import ProgramSpec, all_inputs, rasp_outputs

__all__ = ["Agreement", "all_inputs", "rasp_words", "model_words", "check_agreement"]


@dataclass(kw_only=True)
class Agreement:
    n_inputs: int
    n_positions: int  # compared
    n_undefined: int  # RASP said None
    n_disagree: int
    examples: list[dict[str, Any]] = field(default_factory=list)  # first few disagreements

    @property
    def agrees(self) -> bool:
        return self.n_disagree == 0 and self.n_positions > 0

    def describe(self) -> dict[str, Any]:
        return {"n_inputs": self.n_inputs, "n_positions": self.n_positions, "n_undefined": self.n_undefined,
                "n_disagree": self.n_disagree, "agrees": self.agrees, "examples": self.examples}  # fmt: skip


def rasp_words(program: Any, spec: ProgramSpec, xs: Sequence[Any], *, numerical: bool) -> list[str | None]:
    """The RASP program's output words on ``xs`` (None where RASP gives None)."""
    values = rasp_outputs(program, spec, tuple(xs))
    return [None if v is None else word_of(v, numerical=numerical) for v in values]


def model_words(model: Any, inputs: Sequence[Sequence[Any]]) -> list[list[str]]:
    """The loaded checkpoint's argmax word at every input position (BOS prepended), batched by length."""
    tok = model.tokenizer
    out: dict[int, list[str]] = {}
    by_len: dict[int, list[int]] = {}
    for i, x in enumerate(inputs):
        by_len.setdefault(len(x), []).append(i)
    for _, idx in sorted(by_len.items()):
        rows = [[int(model.bos_id), *tok.convert_tokens_to_ids([str(v) for v in inputs[i]])] for i in idx]
        with torch.no_grad():
            logits = model.bridge(torch.tensor(rows, device=model.device))
        pred = logits.argmax(-1)[:, 1:].tolist()
        for i, p in zip(idx, pred, strict=True):
            out[i] = tok.convert_ids_to_tokens(p)
    return [out[i] for i in range(len(inputs))]


def check_agreement(
    model: Any, program: Any, spec: ProgramSpec, *, numerical: bool, inputs: Sequence[Sequence[Any]] | None = None
) -> Agreement:
    """Compare the model and the RASP program on every position of every input."""
    xs = all_inputs(spec) if inputs is None else [tuple(x) for x in inputs]
    got = model_words(model, xs)
    n_pos = n_undef = n_bad = 0
    examples: list[dict[str, Any]] = []
    for x, words in zip(xs, got, strict=True):
        want = rasp_words(program, spec, x, numerical=numerical)
        for i, (w, g) in enumerate(zip(want, words, strict=True)):
            if w is None:
                n_undef += 1
                continue
            n_pos += 1
            if w != g:
                n_bad += 1
                if len(examples) < 5:
                    examples.append({"input": [str(v) for v in x], "position": i, "rasp": w, "model": g})
    return Agreement(n_inputs=len(xs), n_positions=n_pos, n_undefined=n_undef, n_disagree=n_bad, examples=examples)
