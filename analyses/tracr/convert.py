"""A compiled tracr model as a GPT-2 checkpoint that computes the same function (loaded by headlens' normal path).

tracr's transformer has no LayerNorm, heads of one padded width, ReLU MLPs and a residual stream of named
one-hot / numerical directions.  The GPT-2 written here keeps every weight and neutralises the norms:

* **Width.**  ``d_model = n_heads * d_head`` with ``d_head >= key_size``: tracr's ``D`` residual directions
  come first, then ``one`` (1 at every token, read only by the unembedding), then ``sink`` (always 0), then
  zero padding.  A head's q/k/v columns beyond tracr's key size are zero.
* **Norms.**  Every LayerNorm (``ln_1``, ``ln_2``, ``ln_f``) has ``eps = 2**48`` and weight ``2**24``, bias 0:
  ``LN(x) = (x - mean(x)) * 2**24 / sqrt(var(x) + 2**48)``.  In float32, ``var + 2**48`` rounds to ``2**48``
  whenever ``var < 2**23`` (the ulp of ``2**48`` is ``2**24``), so the scale is exactly 1 (two powers of two);
  where the kernel adds in float64 the scale is ``1 - var/2**49`` (below 1e-8 for var < 1e7).  The mean is
  removed exactly by the readers: each matrix that reads the normed stream (q/k/v, MLP input, unembedding)
  has its ``sink`` row set to minus the sum of its other rows, so ``W^T 1 = 0`` and ``W^T (x - m 1) = W^T x``
  (nothing writes ``sink``, so ``x_sink = 0``).  What is left is float32 rounding of ``x - m`` (relative
  2**-24 of the largest residual entry).
* **Attention scale.**  GPT-2 divides by ``sqrt(d_head)``, tracr by ``sqrt(key_size)``: W_Q is multiplied by
  ``sqrt(d_head / key_size)``.
* **Unembedding.**  Categorical outputs: the output value's direction, and ``-100`` on ``one`` for every word
  that is not an output (so the argmax ranges over the output values as tracr's does, ties to the first).
  Numerical outputs: word ``v`` gets ``v`` on the output direction and ``-v**2/2`` on ``one``: the argmax is
  the value nearest to the model's number.  That term reaches the logits only along ``embed -> logits`` (the
  embedding writes ``one``), an edge tracr's program does not have: :func:`readout_edges` names it as a true edge
  of a numerical program's checkpoint (zeroed, the output is wrong on most positions); a categorical readout
  needs no edge (zeroed, only the ``-100`` of the non-output words goes, and the argmax stays).
* **Words.**  A word-level tokenizer: output words first (in tracr's output order), then the input words,
  ``BOS`` (tracr's compiler_bos), ``PAD`` and ``UNK``.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch

from headlens.analyses.tracr.compile import Compiled

__all__ = ["LN_EPS", "LN_WEIGHT", "ONE", "Layout", "layout_of", "readout_edges", "word_of", "write_checkpoint"]

LN_EPS = float(2**48)
LN_WEIGHT = float(2**24)
NOT_OUTPUT = -100.0  # logit offset (on `one`) of words that are not output values
BOS, PAD, UNK = "BOS", "PAD", "UNK"
#: Label of the residual direction the embedding sets to 1 at every token, read only by the unembedding.
ONE = "headlens:one"


def word_of(value: Any, *, numerical: bool = False) -> str:
    """The word a value is written as: ``str`` of categorical values, a short fraction for numerical ones."""
    if not numerical:
        return str(value)
    frac = Fraction(float(value)).limit_denominator(1000)
    if abs(float(frac) - float(value)) < 1e-9:
        return str(frac.numerator) if frac.denominator == 1 else f"{frac.numerator}/{frac.denominator}"
    return f"{float(value):.6g}"


class Layout:
    """Where tracr's residual directions, ``one`` and ``sink`` sit in the GPT-2 residual, and the vocabulary."""

    def __init__(self, compiled: Compiled) -> None:
        c = compiled
        self.D = len(c.residual)
        self.one, self.sink = self.D, self.D + 1
        self.n_heads = c.n_heads
        self.d_head = max(c.key_size, math.ceil((self.D + 2) / c.n_heads))
        self.d_model = self.n_heads * self.d_head
        numerical = not c.categorical
        self.output_words = [word_of(v, numerical=numerical) for v in c.output_values]
        inputs = [BOS if v == c.bos else PAD if v == c.pad else word_of(v) for v in c.token_values]
        words = list(dict.fromkeys([*self.output_words, *inputs, UNK]))
        self.vocab = {w: i for i, w in enumerate(words)}
        self.input_words = inputs  # in tracr's encoding order

    def labels(self, residual: list[str]) -> list[str]:
        """Label of every GPT-2 residual dimension."""
        pad = [f"pad:{i}" for i in range(self.d_model - self.D - 2)]
        return [*residual, ONE, "headlens:sink", *pad]


def layout_of(compiled: Compiled) -> Layout:
    return Layout(compiled)


def readout_edges(compiled: Compiled) -> list[dict[str, Any]]:
    """The edges the unembedding written here adds to the compiled ones and needs for the output: ``embed -> logits``
    via :data:`ONE` for a numerical output (``-v**2/2`` per value word; without it the argmax is the largest value
    whenever the number is positive), none for a categorical one (``one`` carries only the ``-100`` of the words
    that are not outputs; the output words are 1 on the value's direction and 0 else, so the argmax stays)."""
    if compiled.categorical:
        return []
    why = ("the numerical readout: word v's logit is v * (output) - v**2/2, the -v**2/2 read off `one`, which only the "
           "embedding writes; zeroed, the argmax is the largest value wherever the output is positive")  # fmt: skip
    return [{"sender": "embed", "receiver": "logits", "input": "logits", "via": [ONE], "origin": "readout", "needed": why}]


def _zero_sum_rows(w: np.ndarray, sink: int) -> np.ndarray:
    """Set row ``sink`` of a [d_model, out] reader to minus the sum of the others: the reader ignores the mean."""
    w = w.copy()
    w[sink] = 0.0
    w[sink] = -w.sum(axis=0)
    return w


def _state_dict(c: Compiled, lay: Layout) -> dict[str, np.ndarray]:
    D, d, H, hd, K = lay.D, lay.d_model, lay.n_heads, lay.d_head, c.key_size
    p = c.params
    sd: dict[str, np.ndarray] = {}
    wte = np.zeros((len(lay.vocab), d))
    wte[:, lay.one] = 1.0
    for i, w in enumerate(lay.input_words):
        wte[lay.vocab[w], :D] = c.token_embed[i]
    sd["transformer.wte.weight"] = wte
    wpe = np.zeros((c.spec.max_seq_len + 1, d))
    wpe[:, :D] = c.pos_embed
    sd["transformer.wpe.weight"] = wpe
    q_scale = math.sqrt(hd / K)
    for layer in range(c.n_layers):
        pre = f"transformer.h.{layer}"
        attn = f"transformer/layer_{layer}/attn"
        qkv = np.zeros((d, 3 * d))
        proj = np.zeros((d, d))
        if f"{attn}/query/w" in p:
            for h in range(H):
                cols = slice(h * K, (h + 1) * K)
                qkv[:D, h * hd : h * hd + K] = p[f"{attn}/query/w"][:, cols] * q_scale
                qkv[:D, d + h * hd : d + h * hd + K] = p[f"{attn}/key/w"][:, cols]
                qkv[:D, 2 * d + h * hd : 2 * d + h * hd + K] = p[f"{attn}/value/w"][:, cols]
                proj[h * hd : h * hd + K, :D] = p[f"{attn}/linear/w"][cols, :]
        sd[f"{pre}.attn.c_attn.weight"] = _zero_sum_rows(qkv, lay.sink)
        sd[f"{pre}.attn.c_attn.bias"] = np.zeros(3 * d)
        sd[f"{pre}.attn.c_proj.weight"] = proj
        sd[f"{pre}.attn.c_proj.bias"] = np.zeros(d)
        mlp = f"transformer/layer_{layer}/mlp"
        fc = np.zeros((d, c.mlp_hidden))
        out = np.zeros((c.mlp_hidden, d))
        if f"{mlp}/linear_1/w" in p:
            fc[:D] = p[f"{mlp}/linear_1/w"]
            out[:, :D] = p[f"{mlp}/linear_2/w"]
        sd[f"{pre}.mlp.c_fc.weight"] = _zero_sum_rows(fc, lay.sink)
        sd[f"{pre}.mlp.c_fc.bias"] = np.zeros(c.mlp_hidden)
        sd[f"{pre}.mlp.c_proj.weight"] = out
        sd[f"{pre}.mlp.c_proj.bias"] = np.zeros(d)
        for ln in ("ln_1", "ln_2"):
            sd[f"{pre}.{ln}.weight"] = np.full(d, LN_WEIGHT)
            sd[f"{pre}.{ln}.bias"] = np.zeros(d)
    sd["transformer.ln_f.weight"] = np.full(d, LN_WEIGHT)
    sd["transformer.ln_f.bias"] = np.zeros(d)
    head = np.zeros((len(lay.vocab), d))
    head[:, lay.one] = NOT_OUTPUT
    for word, value, dim in zip(lay.output_words, c.output_values, _output_dims(c), strict=True):
        row = lay.vocab[word]
        head[row, lay.one] = 0.0
        if c.categorical:
            head[row, dim] = 1.0
        else:
            head[row, dim] = float(value)
            head[row, lay.one] = -(float(value) ** 2) / 2
    sd["lm_head.weight"] = _zero_sum_rows(head.T, lay.sink).T
    return sd


def _output_dims(c: Compiled) -> list[int]:
    return c.output_dims if c.categorical else c.output_dims * len(c.output_values)


def write_checkpoint(compiled: Compiled, out: Path) -> Layout:
    """Write the GPT-2 checkpoint (config, safetensors weights, word-level tokenizer) into ``out``."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    lay = Layout(compiled)
    c = compiled
    config = GPT2Config(
        vocab_size=len(lay.vocab), n_positions=c.spec.max_seq_len + 1, n_embd=lay.d_model, n_layer=c.n_layers,
        n_head=lay.n_heads, n_inner=c.mlp_hidden, activation_function="relu", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, layer_norm_epsilon=LN_EPS, tie_word_embeddings=False, bos_token_id=lay.vocab[BOS],
        eos_token_id=lay.vocab[BOS], pad_token_id=lay.vocab[PAD],
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    state = {k: torch.tensor(v, dtype=torch.float32) for k, v in _state_dict(c, lay).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith(".attn.bias") and not m.endswith("masked_bias")]
    assert not missing and not unexpected, (missing, unexpected)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok = Tokenizer(WordLevel(vocab=lay.vocab, unk_token=UNK))
    tok.pre_tokenizer = WhitespaceSplit()  # type: ignore[assignment]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=BOS, pad_token=PAD, unk_token=UNK)
    fast.save_pretrained(out)
    (out / "residual_labels.json").write_text(json.dumps(lay.labels(c.residual), indent=1) + "\n")
    return lay
