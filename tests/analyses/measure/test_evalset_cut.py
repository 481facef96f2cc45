"""``EvalSet.describe()`` says how the text windows were cut (offsets, BOS counted in the window,
stride), enough to rebuild every window and the loss by hand with plain ``transformers``; and
``EvalSet.basis()`` is the one line every printed loss carries."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from headlens.analyses.measure.evalset import repeated_tokens_eval_set, text_eval_set
from headlens.analyses.stimuli import eval_text

LOSS_TOL = 1e-5  # float32 forward of a 2-layer model: the two losses agree far closer than this


def _tokens_by_hand(tokenizer, text: str) -> list[int]:
    return [int(i) for i in tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]]


def _rebuild(tokenizer, text: str, desc: dict, bos_id: int | None) -> torch.Tensor:
    """The windows from the manifest's description alone."""
    cut, ids = desc["cut"], _tokens_by_hand(tokenizer, text)
    per = cut["text_tokens_per_window"]
    rows = [([bos_id] if cut["window_includes_bos"] else []) + ids[o : o + per] for o in cut["offsets"]]
    return torch.tensor(rows, dtype=torch.long)


@pytest.mark.parametrize("prepend_bos", [True, False])
def test_windows_rebuilt_from_describe(gpt2_tokenizer, prepend_bos):
    text = eval_text()
    data = text_eval_set(gpt2_tokenizer, text, n_windows=4, window=20, prepend_bos=prepend_bos, n_ctx=128, bos_id=50256)
    desc = json.loads(json.dumps(data.describe()))  # as a manifest holds it
    cut = desc["cut"]
    assert cut["window_includes_bos"] is prepend_bos
    assert cut["text_tokens_per_window"] == 20 - int(prepend_bos)
    assert cut["stride"] == cut["text_tokens_per_window"]
    assert len(cut["offsets"]) == 4 and cut["offsets"][0] == 0
    assert torch.equal(_rebuild(gpt2_tokenizer, text, desc, 50256), data.tokens)
    assert desc["n_predictions"] == 4 * 19


def test_loss_reproduced_by_hand_from_the_manifest(tiny_model, tiny_checkpoint):
    """The unablated loss of the ablation code == plain GPT2LMHeadModel on the windows rebuilt from describe()."""
    from transformers import GPT2LMHeadModel

    from headlens.analyses.measure.metrics import model_values

    text = eval_text()
    data = text_eval_set(
        tiny_model.tokenizer, text, n_windows=3, window=24, prepend_bos=True, n_ctx=tiny_model.n_ctx, bos_id=tiny_model.bos_id
    )
    rows = list(range(len(data)))
    with torch.inference_mode():
        ours = float(model_values(tiny_model, data.tokens, data.lengths, data, rows).mean())
    desc = json.loads(json.dumps(data.describe()))
    windows = _rebuild(tiny_model.tokenizer, text, desc, tiny_model.bos_id)
    hf = GPT2LMHeadModel.from_pretrained(tiny_checkpoint).eval()
    with torch.inference_mode():
        logits = hf(windows).logits[:, :-1].double()
    targets = windows[:, 1:]
    by_hand = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="mean"))
    assert targets.numel() == desc["n_predictions"]
    assert abs(ours - by_hand) < LOSS_TOL


def test_basis_names_windows_tokens_bos_and_text(gpt2_tokenizer):
    with_bos = text_eval_set(gpt2_tokenizer, eval_text(), n_windows=3, window=16, prepend_bos=True, n_ctx=128, bos_id=50256)
    no_bos = text_eval_set(gpt2_tokenizer, eval_text(), n_windows=3, window=16, prepend_bos=False, n_ctx=128, source="--text-file held.txt")
    assert with_bos.basis().startswith("3 windows x 16 tokens (BOS + 15 text tokens; 45 predictions) of the built-in evaluation text")
    assert no_bos.basis().startswith("3 windows x 16 tokens (16 text tokens, no BOS; 45 predictions) of the text of --text-file held.txt")
    assert with_bos.describe()["basis"] == with_bos.basis()


def test_repeated_tokens_cut_and_basis():
    data = repeated_tokens_eval_set(n=2, T=5, seed=0, vocab_size=100, bos_id=99)
    desc = data.describe()
    assert desc["cut"]["loss_from_position"] == 6 and desc["cut"]["length"] == 11
    assert desc["n_predictions"] == 2 * 4  # positions 6..9 predict tokens 7..10: the second copy after its first token
    assert data.basis().startswith("2 sequences of BOS + 5 random tokens repeated twice")


def test_encoder_framing_is_named_in_cut_and_basis(family_model):
    enc = family_model("bert")
    data = text_eval_set(enc.tokenizer, eval_text(), n_windows=2, window=16, prepend_bos=True, n_ctx=enc.n_ctx, frame=enc.frame(True))
    cut = data.describe()["cut"]
    assert cut["framing"] == {"prefix": ["[CLS]"], "suffix": ["[SEP]"]} and cut["text_tokens_per_window"] == 14
    assert cut["offsets"] == [0, 14]
    assert data.basis().startswith("2 windows x 16 tokens ([CLS] + 14 text tokens + [SEP]; 30 predictions)")
