"""The reduction engine (:func:`headlens.probes.engine.reduce_pass`) against a plain Hugging Face forward.

The reference is ``transformers``' own eager attention (``output_attentions=True``) of the same
tiny checkpoint, with the batch's attention mask: nothing of headlens is used to build it.  The
engine's pattern rows (gathered block by block by a reducer) and two real reducers (the sink
detector's alpha and the excess attention received of the sink statistics) are checked on a
padded batch, eager and streaming (blocks of 5 queries), on causal (GPT-2, Llama with grouped
KV heads), sliding-window (Mistral, window 16 < the prompts' 24 tokens) and bidirectional
(BERT) attention.  The reference statistics are written out in loops below.
"""

from __future__ import annotations

import math

import pytest
import torch

from headlens.analyses.measure.attention_stats import alpha_sums
from headlens.analyses.sinks.reductions import excess_block
from headlens.probes.attention import attention_spec
from headlens.probes.engine import LayerView, Sums, add_sums, reduce_pass
from tests.helpers import assert_close

FAMILIES = ("gpt2", "llama", "mistral", "bert")
MODES = ("eager", "streaming")
#: queries per block on the streaming path: not a divisor of the prompt length, so the last block is short
BLOCK = 5
#: prompt lengths of the padded batch (the longest sets the width)
LENGTHS = (24, 17, 9)


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    width = max(LENGTHS)
    tokens = torch.randint(1000, min(vocab, 5000), (len(LENGTHS), width), generator=gen)
    mask = (torch.arange(width)[None, :] < torch.tensor(LENGTHS)[:, None]).long()
    return tokens * mask, mask


def _hf_patterns(checkpoint, family: str, tokens: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Per layer ``[batch, head, q, k]``: Hugging Face's eager attention with the padding mask (float64)."""
    import transformers

    cls = transformers.AutoModel if family == "bert" else transformers.AutoModelForCausalLM
    hf = cls.from_pretrained(str(checkpoint), attn_implementation="eager").eval()
    with torch.no_grad():
        out = hf(input_ids=tokens, attention_mask=mask, output_attentions=True)
    return [a.double() for a in out.attentions]


class _Gather:
    """Reducer: the full pattern, rebuilt from the blocks (each block's rows written in place; blocks are disjoint)."""

    name = "gather"

    @staticmethod
    def partial(rows: torch.Tensor, ctx: int, q0: int) -> Sums:
        full = torch.zeros(rows.shape[0], rows.shape[1], ctx, rows.shape[3], dtype=rows.dtype)
        full[:, :, q0 : q0 + rows.shape[2]] = rows
        return {"pattern": full}

    @staticmethod
    def finish(sums: Sums, ctx: int) -> torch.Tensor:
        return sums["pattern"]


def _run(model, tokens, mask, reducers, mode):
    out: dict[int, dict] = {}
    ctxs: dict[int, LayerView] = {}

    def context(view: LayerView) -> int:
        ctxs[view.layer.layer] = view
        return tokens.shape[1]

    info = reduce_pass(
        model,
        tokens,
        mask,
        reducers,
        context=context,
        on_layer=lambda layer, o, ctx: out.__setitem__(layer, o),
        attention=mode,
        query_block=BLOCK,
    )
    return out, ctxs, info


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_engine_rows_equal_hugging_face_attention(family, mode, family_checkpoint, family_model):
    model = family_model(family)
    tokens, mask = _batch(int(model.bridge.cfg.d_vocab))
    ref = _hf_patterns(family_checkpoint(family), family, tokens, mask)
    out, views, info = _run(model, tokens, mask, [_Gather()], mode)
    assert info.attention == mode and sorted(out) == list(range(model.n_layers))
    assert info.widest_block == (BLOCK if mode == "streaming" else max(LENGTHS))
    spec = attention_spec(model)
    if family == "llama":
        assert spec.n_kv_heads < model.n_heads  # grouped KV heads: the engine repeats them
    if family == "mistral":
        assert all(la.window is not None and la.window < max(LENGTHS) for la in spec.layers)
    for layer in range(model.n_layers):
        assert views[layer].causal == (family != "bert")
        got = out[layer]["gather"]
        for b, n in enumerate(LENGTHS):  # real queries against real keys; padded keys get nothing
            assert_close(got[b, :, :n, :n], ref[layer][b, :, :n, :n], "float32", msg=f"{family} {mode} layer {layer} prompt {b}")
            assert float(got[b, :, :n, n:].abs().sum()) == 0.0


def _alpha_reference(P: torch.Tensor, n: int, window: int | None, causal: bool) -> torch.Tensor:
    """Gu et al. alpha of key 0, ``[head]``: mean of A[i, 0] over the real queries that see key 0."""
    qs = [i for i in range(n) if not causal or window is None or i < window]
    return torch.stack([P[h, qs, 0].sum() / len(qs) for h in range(P.shape[0])])


def _excess_reference(P: torch.Tensor, n: int, window: int | None, causal: bool) -> torch.Tensor:
    """``[head, k]``: sum over the real queries i that see key j of A[i, j] - (what a uniform head gives)."""
    out = torch.zeros(P.shape[0], P.shape[-1], dtype=torch.float64)
    for j in range(n):
        for i in range(n):
            if causal and (j > i or (window is not None and j <= i - window)):
                continue
            u = 1.0 / n if not causal else 1.0 / min(i + 1, window or math.inf)
            out[:, j] += P[:, i, j] - u
    return out


class _Stats:
    """Two real reducers in one: the sink alpha sums and the excess attention received."""

    name = "stats"

    @staticmethod
    def partial(rows: torch.Tensor, ctx: dict, q0: int) -> Sums:
        rows = rows.float()
        alpha = alpha_sums(rows, ctx["lengths"], q0, window=ctx["window"], causal=ctx["causal"])
        return {**alpha, "excess": excess_block(rows, ctx["lengths"], q0, window=ctx["window"], causal=ctx["causal"])}

    @staticmethod
    def finish(sums: Sums, ctx: dict) -> Sums:
        return sums


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_engine_reducers_equal_loops_over_hugging_face_attention(family, mode, family_checkpoint, family_model):
    model = family_model(family)
    tokens, mask = _batch(int(model.bridge.cfg.d_vocab))
    ref = _hf_patterns(family_checkpoint(family), family, tokens, mask)
    lengths = torch.tensor(LENGTHS)
    out: dict[int, Sums] = {}

    def context(view: LayerView) -> dict:
        return {"lengths": lengths, "window": view.layer.window if view.causal else None, "causal": view.causal}

    reduce_pass(
        model,
        tokens,
        mask,
        [_Stats()],
        context=context,
        on_layer=lambda layer, o, ctx: out.__setitem__(layer, o["stats"]),
        attention=mode,
        query_block=BLOCK,
    )
    for layer, la in enumerate(attention_spec(model).layers):
        causal = family != "bert"
        window = la.window if causal else None
        for b, n in enumerate(LENGTHS):
            P = ref[layer][b]
            alpha = out[layer]["score"][b] / out[layer]["count"][b]
            assert_close(alpha, _alpha_reference(P, n, window, causal), "float32", msg=f"alpha {family} {mode} layer {layer} prompt {b}")
            assert_close(
                out[layer]["excess"][b], _excess_reference(P, n, window, causal), "float32_loose", msg=f"excess {family} {mode} {layer} {b}"
            )


def test_add_sums_accumulates_in_float64():
    a = {"x": torch.tensor([1.0], dtype=torch.float32)}
    total = add_sums(add_sums(None, a), {"x": torch.tensor([1e-9], dtype=torch.float32)})
    assert total["x"].dtype == torch.float64 and float(total["x"]) == pytest.approx(1.0 + 1e-9, abs=1e-15)


def test_engine_ablation_zeroes_the_same_heads_eager_and_streaming(family_model):
    """``ablate`` acts on hook_z (eager) and on the attention function's output (streaming): layer 1's rows agree."""
    model = family_model("gpt2")
    tokens, mask = _batch(int(model.bridge.cfg.d_vocab))
    got = {}
    for mode in MODES:
        out: dict[int, torch.Tensor] = {}
        keep = lambda layer, o, ctx, out=out: out.__setitem__(layer, o["gather"])  # noqa: E731
        reduce_pass(model, tokens, mask, [_Gather()], context=lambda view: tokens.shape[1], on_layer=keep,
                    attention=mode, query_block=BLOCK, ablate={0: [0, 1]})  # fmt: skip
        got[mode] = out[1]
    plain, _, _ = _run(model, tokens, mask, [_Gather()], "eager")
    n = LENGTHS[0]
    assert_close(got["streaming"][0, :, :n, :n], got["eager"][0, :, :n, :n], "float32")
    assert float((got["eager"][0, :, :n, :n] - plain[1]["gather"][0, :, :n, :n]).abs().max()) > 1e-4  # the ablation moved layer 1
