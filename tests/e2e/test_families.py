"""Verify, rotation, GQA capture and the CLI on the first ten decoder families, checked against plain Hugging Face.
(Captured patterns = Hugging Face eager on every family: tests/families/test_matrix.py.)

Tiny random checkpoints (probes.families) of GPT-2, Llama, Qwen2, Mistral, Gemma, Gemma2,
GPT-NeoX, GPT-Neo, OPT and GPT-J.  The independent reference is a plain
``AutoModelForCausalLM`` forward with eager attention on the same token ids.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch

from headlens.analyses.heads.verify import VERIFY_WHAT, verify_attention, verify_capture
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.attention import attention_spec
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import UnsupportedModelError
from headlens.reports.cli.main import cli
from tests.helpers import assert_close

TEXT = (
    "Apple raised its price target. Down by the river bank, the water was calm, and by the time "
    "you reach the bank the river has settled what you meant."
)
TEXTS = [TEXT, "A short one."]
GQA = ("llama", "qwen2", "mistral", "gemma", "gemma2")


@pytest.mark.parametrize("family", FAMILIES)
def test_verify_passes_on_every_family(family, family_model):
    table = verify_attention(family_model(family), TEXTS)
    assert table["ok"].all(), table.to_string()
    assert (table[["max_err_pattern", "max_err_z", "max_outside_mask", "max_row_sum_err"]].to_numpy() < 1e-5).all()
    spec = attention_spec(family_model(family))
    for applied, la in zip(table["applied"].astype(str), spec.layers, strict=True):
        if la.window is not None:
            assert f"window {la.window}" in applied
        if la.softcap is not None:
            assert "softcap" in applied


def _rule_breakers(family: str, spec) -> dict[str, object]:
    """Spec variants that each drop one rule the family uses; verify must fail on each."""
    layers = spec.layers
    out: dict[str, list[Any]] = {"scale": [dataclasses.replace(la, scale=la.scale * 0.5) for la in layers]}
    if any(la.window for la in layers):
        out["window"] = [dataclasses.replace(la, window=None) for la in layers]
    if any(la.softcap for la in layers):
        out["softcap"] = [dataclasses.replace(la, softcap=None) for la in layers]
    return {k: dataclasses.replace(spec, layers=tuple(v)) for k, v in out.items()}


@pytest.mark.parametrize("family", ["gpt_neo", "mistral", "gemma2"])
def test_verify_fails_when_a_rule_is_left_out(family, family_model):
    """The check can fail: dropping the scale, the window or the softcap is caught."""
    model = family_model(family)
    cap = capture(model, TEXTS, CaptureConfig(what=VERIFY_WHAT))
    spec = attention_spec(model)
    try:
        for rule, broken in _rule_breakers(family, spec).items():
            model.extra["attention_spec"] = broken
            table = verify_capture(model, cap)
            assert not table["ok"].all(), f"{family}: verify passed without the {rule}"
            assert table["max_err_pattern"].max() > 1e-3
    finally:
        model.extra["attention_spec"] = spec


@pytest.mark.parametrize("family", ["gpt_neox", "gptj", "llama"])
def test_rotated_q_k_are_what_enters_the_dot_product(family, family_model):
    """Recomputing from pre-rotary q/k fails; from rot_q/rot_k it is exact."""
    model = family_model(family)
    spec = attention_spec(model)
    cap = capture(model, TEXTS, CaptureConfig(what=("q", "k", "rot_q", "rot_k", "v", "pattern", "z")))
    assert verify_capture(model, cap)["ok"].all()
    tensors = dict(cap.tensors)
    for layer in range(model.n_layers):
        tensors[f"blocks.{layer}.attn.hook_rot_q"] = cap.get(layer, "q")
        tensors[f"blocks.{layer}.attn.hook_rot_k"] = cap.get(layer, "k")
        assert not torch.equal(cap.get(layer, "q"), cap.get(layer, "rot_q"))
    unrotated = verify_capture(model, dataclasses.replace(cap, tensors=tensors))
    assert not unrotated["ok"].any()
    source = cap.info["sources"]["rot_q"]
    if spec.layers[0].rotary == "hooks":
        assert source == "hook_rot_q"
    else:
        assert source.startswith("hook_q rotated by headlens")


@pytest.mark.parametrize("family", GQA)
def test_gqa_capture_keeps_kv_heads(family, family_model, family_checkpoint, hf_eager):
    model = family_model(family)
    spec = attention_spec(model)
    n_kv = spec.n_kv_heads
    assert n_kv < model.n_heads
    cap = capture(model, TEXTS, CaptureConfig(what=("q", "k", "v", "rot_k")))
    assert cap.get(0, "q").shape[2] == model.n_heads
    for what in ("k", "v", "rot_k"):
        assert cap.get(0, what).shape[2] == n_kv
    assert cap.info["n_kv_heads"] == n_kv and cap.info["kv_map"] == {str(h): h // (model.n_heads // n_kv) for h in range(model.n_heads)}
    # independent: HF's k_proj / v_proj output of layer 0, split into KV heads
    hf = hf_eager(family_checkpoint(family))
    got: dict[str, torch.Tensor] = {}
    attn = hf.model.layers[0].self_attn
    handles = [
        attn.k_proj.register_forward_hook(lambda m, i, o: got.__setitem__("k", o)),
        attn.v_proj.register_forward_hook(lambda m, i, o: got.__setitem__("v", o)),
    ]
    try:
        n = int(cap.batch.lengths[0])
        with torch.no_grad():
            hf(cap.batch.tokens[0, :n][None])
    finally:
        for h in handles:
            h.remove()
    for what in ("k", "v"):
        ref = got[what][0].reshape(n, n_kv, -1)
        assert_close(cap.get(0, what)[0, :n], ref, "float32", f"{family} {what}")


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_gqa_head_selection_reads_the_right_kv_head(family, family_model):
    model = family_model(family)
    group = model.n_heads // attention_spec(model).n_kv_heads
    full = capture(model, TEXTS, CaptureConfig(what=("k", "v")))
    last = model.n_heads - 1
    cases = [(((0, 1),), [1 // group]), (((0, last),), [last // group]), (((0, 0), (0, last)), sorted({0, last // group}))]
    for heads, expected in cases:
        cap = capture(model, TEXTS, CaptureConfig(what=("k", "v"), heads=heads))
        assert cap.kv_heads[0] == expected
        assert torch.equal(cap.get(0, "k"), full.get(0, "k")[:, :, expected])
    per_q = capture(model, TEXTS, CaptureConfig(what=("k",), heads=((0, 0), (0, last)), kv_per_query_head=True))
    assert per_q.get(0, "k").shape[2] == 2
    assert torch.equal(per_q.get(0, "k")[:, :, 1], full.get(0, "k")[:, :, last // group])


def test_capture_cli_says_which_kv_heads(family_checkpoint, tmp_path, runner):
    out = tmp_path / "cap"
    res = runner.invoke(
        cli,
        ["capture", "-m", str(family_checkpoint("llama")), "--text", TEXT, "--heads", "0.1,0.3", "--what", "k,rot_q", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert "4 query heads share 2 KV heads" in res.output and "0.1->kv0" in res.output and "0.3->kv1" in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["capture"]["n_kv_heads"] == 2 and manifest["capture"]["kv_heads"] == {"0": [0, 1]}
    assert manifest["capture"]["kv_map"] == {"0": 0, "1": 0, "2": 1, "3": 1}
    from safetensors.torch import load_file

    tensors = load_file(str(out / "activations.safetensors"))
    assert tensors["blocks.0.attn.hook_k"].shape[2] == 2 and tensors["blocks.0.attn.hook_rot_q"].shape[2] == 2


@pytest.mark.parametrize("family", ["gpt_neo", "opt", "gptj"])
def test_attn_scores_refused_where_the_hook_holds_the_softmax(family, family_checkpoint, tmp_path, runner):
    res = runner.invoke(
        cli, ["capture", "-m", str(family_checkpoint(family)), "--text", TEXT, "--what", "attn_scores", "--out", str(tmp_path / "x")]
    )
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and family in res.output and "Traceback" not in res.output


def test_verify_refuses_a_family_it_cannot_redo(family_model, family_checkpoint):
    model = family_model("opt")
    spec = attention_spec(model)
    try:
        model.extra["attention_spec"] = dataclasses.replace(spec, family="mystery", reconstructable=False)
        with pytest.raises(UnsupportedModelError, match="mystery"):
            verify_attention(model, TEXTS)
    finally:
        model.extra["attention_spec"] = spec


@pytest.mark.parametrize("family", FAMILIES)
def test_verify_cli_on_every_family(family, family_checkpoint, runner):
    res = runner.invoke(cli, ["verify", "-m", str(family_checkpoint(family))])
    assert res.exit_code == 0, res.output
    assert "verify: ok" in res.output


def _checkpoint_with_gpt2_tokenizer(folder, model) -> str:
    from headlens.probes.tokenizer_files import load_offline_gpt2_tokenizer

    model.save_pretrained(folder)
    load_offline_gpt2_tokenizer(folder / "tok").save_pretrained(folder)
    return str(folder)


def test_models_without_reachable_heads_are_refused_in_one_line(tmp_path, runner):
    """An encoder-decoder (T5) and a state-space model (Mamba): one line naming the class, exit 2, nothing written."""
    import transformers as T

    t5 = T.T5ForConditionalGeneration(
        T.T5Config(
            vocab_size=50257,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=1,
            num_heads=4,
            decoder_start_token_id=0,  # pyright: ignore[reportCallIssue] - a PretrainedConfig keyword T5Config passes on
            pad_token_id=0,
            eos_token_id=1,
        )
    )
    mamba = T.MambaForCausalLM(T.MambaConfig(vocab_size=50257, hidden_size=32, num_hidden_layers=1))
    for name, model, cls in (("t5", t5, "T5ForConditionalGeneration"), ("mamba", mamba, "MambaForCausalLM")):
        folder = _checkpoint_with_gpt2_tokenizer(tmp_path / name, model)
        out = tmp_path / f"out_{name}"
        res = runner.invoke(cli, ["classify", "-m", folder, "--n-prompts", "2", "--out", str(out)])
        assert res.exit_code == 2, res.output
        assert cls in res.output and "Traceback" not in res.output
        assert len([line for line in res.output.splitlines() if line.startswith("headlens: error")]) == 1
        assert not out.exists()
