"""BERT-family encoders through tokenization, capture, verify and score edits.

On the real all-MiniLM-L6-v2 (6 layers x 12 heads, BertForMaskedLM with a new MLM head):
prompts are framed ``[CLS] text [SEP]`` exactly as the tokenizer frames them, captured
patterns equal a plain Hugging Face eager forward, ``verify`` redoes bidirectional attention
with the padding mask, and the manifest says how prompts were framed.  A tiny RoBERTa built
from its config checks the other encoder family the bridge wraps.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from headlens.analyses.heads.verify import VERIFY_WHAT, verify_attention, verify_capture
from headlens.probes.attention import attention_spec
from headlens.probes.capture import capture, tokenize_for
from headlens.probes.config import CaptureConfig
from headlens.probes.interventions import check_score_edits
from headlens.reports.cli.main import cli

SENTENCES = [
    "The bank raised its rates.",
    "Down by the river bank, the water was calm and clear.",
    "Hi",
    "Tokenization isn't trivial.",
]


def _hf_attentions(model_cls, folder, ids: torch.Tensor, mask: torch.Tensor):
    hf = model_cls.from_pretrained(str(folder), attn_implementation="eager").eval()
    with torch.inference_mode():
        return hf(input_ids=ids, attention_mask=mask, output_attentions=True).attentions


# ----------------------------------------------------------------------------- framing


def test_encoder_prompts_are_framed_as_the_tokenizer_frames_them(minilm_model):
    model = minilm_model
    tok = model.tokenizer
    batch = tokenize_for(model, SENTENCES, prepend_bos=True)
    assert batch.framing == {"n_prefix": 1, "n_suffix": 1}
    for i, text in enumerate(SENTENCES):
        n = int(batch.lengths[i])
        assert batch.tokens[i, :n].tolist() == tok(text)["input_ids"]  # [CLS] ... [SEP]
        assert batch.strings[i][0] == "[CLS]" and batch.strings[i][-1] == "[SEP]"
        assert batch.text_mask[i].sum() == n - 2
    assert int(batch.pad_id) == tok.pad_token_id
    bare = tokenize_for(model, SENTENCES, prepend_bos=False)
    assert bare.framing == {"n_prefix": 0, "n_suffix": 0}
    for i, text in enumerate(SENTENCES):
        assert bare.tokens[i, : int(bare.lengths[i])].tolist() == tok(text, add_special_tokens=False)["input_ids"]


def test_truncation_keeps_the_suffix(minilm_model):
    batch = tokenize_for(minilm_model, [" ".join(["word"] * 40)], prepend_bos=True, truncate=True, n_ctx=8)
    assert batch.strings[0] == ["[CLS]"] + ["word"] * 6 + ["[SEP]"]


def test_decoder_framing_is_unchanged(family_model):
    model = family_model("gpt2")
    tok = model.tokenizer
    batch = tokenize_for(model, SENTENCES, prepend_bos=True)
    assert batch.framing == {"n_prefix": 1, "n_suffix": 0}
    for i, text in enumerate(SENTENCES):
        assert batch.tokens[i, : int(batch.lengths[i])].tolist() == [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
    assert model.framing(True) == {"prefix": ["<|endoftext|>"], "suffix": [], "prefix_ids": [tok.bos_token_id], "suffix_ids": []}


# ----------------------------------------------------------------------------- attention


def test_minilm_patterns_equal_plain_hugging_face(minilm_model, minilm_dir):
    """Captured patterns = AutoModel eager output_attentions on the tokenizer's own ids, to 1e-6."""
    from transformers import AutoModel

    enc = minilm_model.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    ref = _hf_attentions(AutoModel, minilm_dir, enc["input_ids"], enc["attention_mask"])
    cap = capture(minilm_model, SENTENCES, CaptureConfig(what=("pattern",)))
    assert torch.equal(cap.batch.tokens, enc["input_ids"])
    for i, n in enumerate(cap.batch.lengths.tolist()):
        for layer in range(minilm_model.n_layers):
            got = cap.get(layer, "pattern")[i, :, :n]
            assert float((got - ref[layer][i, :, :n]).abs().max()) <= 1e-6, f"layer {layer} prompt {i}"
            assert float(got[:, :, n:].abs().max()) == 0.0 if n < got.shape[-1] else True


def test_minilm_attention_spec(minilm_model):
    spec = attention_spec(minilm_model)
    assert spec.family == "bert" and spec.reconstructable
    for la in spec.layers:
        assert not la.causal and not la.native and la.rotary == "none" and la.window is None
        assert math.isclose(la.scale, 32**-0.5)
    assert (minilm_model.n_layers, minilm_model.n_heads) == (6, 12)


def test_verify_passes_on_minilm_with_padding(minilm_model):
    table = verify_attention(minilm_model, SENTENCES)
    assert table["ok"].all(), table.to_string()
    assert (table[["max_err_pattern", "max_err_z", "max_outside_mask", "max_row_sum_err"]].to_numpy() < 1e-5).all()
    assert all("bidirectional" in a for a in table["applied"])


def test_verify_catches_attention_on_padding_and_a_causal_mask(minilm_model, monkeypatch):
    """Both ways verify can fail on an encoder: padding that leaks in, and a wrong (causal) mask."""
    import dataclasses

    import headlens.probes.capture as capture_module

    model = minilm_model
    real_forward = capture_module.run_forward

    def unmasked(model, tokens, *, attention_mask=None, **kwargs):
        return real_forward(model, tokens, **kwargs)

    monkeypatch.setattr(capture_module, "run_forward", unmasked)
    leaky = verify_capture(model, capture(model, SENTENCES, CaptureConfig(what=VERIFY_WHAT)))
    monkeypatch.undo()
    assert not leaky["ok"].any() and leaky["max_outside_mask"].min() > 0.01

    cap = capture(model, SENTENCES, CaptureConfig(what=VERIFY_WHAT))
    spec = attention_spec(model)
    try:
        model.extra["attention_spec"] = dataclasses.replace(spec, layers=tuple(dataclasses.replace(la, causal=True) for la in spec.layers))
        causal = verify_capture(model, cap)
    finally:
        model.extra["attention_spec"] = spec
    assert not causal["ok"].any() and causal["max_outside_mask"].min() > 0.01


def test_score_edits_pass_the_guard_on_bert(minilm_model):
    assert set(check_score_edits(minilm_model).values()) == {"interface"}
    assert all(v is None for v in minilm_model.extra["score_edit_probe"].values())


# ----------------------------------------------------------------------------- CLI


def test_verify_cli_on_minilm(minilm_dir, tmp_path, runner):
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(SENTENCES) + "\n")
    res = runner.invoke(cli, ["verify", "--model", str(minilm_dir), "--prompts", str(prompts)])
    assert res.exit_code == 0, res.output
    assert "verify: ok (6 layers" in res.output
    assert "bidirectional" in res.output and "[CLS] ... [SEP]" in res.output


@pytest.fixture()
def cached_minilm(monkeypatch, minilm_model):
    """The CLI's model loader answering with the session's MiniLM (saves a 4 s boot per command)."""
    import headlens.reports.cli.capture as cmd

    monkeypatch.setattr(cmd, "load", lambda *args, **kwargs: minilm_model)
    return minilm_model


@pytest.mark.parametrize("no_bos", [False, True])
def test_capture_cli_records_the_framing(cached_minilm, tmp_path, no_bos, runner):
    out = tmp_path / "cap"
    args = ["capture", "--model", "minilm", "--text", SENTENCES[0], "--layers", "0", "--what", "pattern", "--out", str(out)]
    res = runner.invoke(cli, args + (["--no-bos"] if no_bos else []))
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    tokens = json.loads((out / "tokens.json").read_text())["prompts"][0]["tokens"]
    if no_bos:
        assert manifest["framing"] == {"prefix": [], "suffix": [], "prefix_ids": [], "suffix_ids": []}
        assert "[CLS]" not in tokens and "[SEP]" not in tokens
    else:
        assert manifest["framing"] == {"prefix": ["[CLS]"], "suffix": ["[SEP]"], "prefix_ids": [101], "suffix_ids": [102]}
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        assert "[CLS] ... [SEP]" in res.output and "bidirectional" in res.output
    assert manifest["prepend_bos"] is (not no_bos)


# ----------------------------------------------------------------------------- RoBERTa


@pytest.fixture(scope="module")
def roberta_checkpoint(tmp_path_factory):
    """A tiny random RobertaForMaskedLM with a RoBERTa-layout BPE tokenizer built from GPT-2's files.

    ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, then GPT-2's vocabulary, ``<mask>`` last:
    RoBERTa's special-token layout, and ``pad_token_id=1`` as its position ids require.
    """
    import transformers

    from headlens.analyses.synthetic.families import INIT_STD
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    tmp = tmp_path_factory.mktemp("gpt2tok")
    load_offline_gpt2_tokenizer(tmp).save_pretrained(tmp)
    gpt2_vocab = json.loads((tmp / "vocab.json").read_text())
    merges = [tuple(line.split(" ")) for line in (tmp / "merges.txt").read_text().splitlines()[1:] if line]
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"])}
    for token, _ in sorted(gpt2_vocab.items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    vocab["<mask>"] = len(vocab)
    tok = transformers.RobertaTokenizer(vocab=vocab, merges=merges)  # pyright: ignore[reportArgumentType] - pairs work too
    config = transformers.RobertaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=130,
        initializer_range=INIT_STD,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    folder = tmp_path_factory.mktemp("roberta")
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(0)
        transformers.RobertaForMaskedLM(config).save_pretrained(folder)
    finally:
        torch.random.set_rng_state(state)
    tok.save_pretrained(folder)
    return folder


def test_roberta_capture_and_verify(roberta_checkpoint):
    import transformers

    from headlens.probes.loading import load_model

    model = load_model(model=str(roberta_checkpoint), device="cpu")
    assert model.is_encoder and type(model.bridge.original_model).__name__ == "RobertaForMaskedLM"
    assert model.framing(True)["prefix"] == ["<s>"] and model.framing(True)["suffix"] == ["</s>"]
    spec = attention_spec(model)
    assert spec.reconstructable and not any(la.causal for la in spec.layers)
    cap = capture(model, SENTENCES, CaptureConfig(what=VERIFY_WHAT))
    enc = model.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(cap.batch.tokens, enc["input_ids"])
    ref = _hf_attentions(transformers.RobertaModel, roberta_checkpoint, enc["input_ids"], enc["attention_mask"])
    for i, n in enumerate(cap.batch.lengths.tolist()):
        for layer in range(model.n_layers):
            assert float((cap.get(layer, "pattern")[i, :, :n] - ref[layer][i, :, :n]).abs().max()) <= 1e-6
    table = verify_capture(model, cap)
    assert table["ok"].all(), table.to_string()
    assert set(check_score_edits(model).values()) == {"interface"}
