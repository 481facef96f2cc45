"""The capture, verify and tiny-model commands through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from headlens.reports.cli.main import cli
from tests.reports.api.conftest import session_models


@pytest.fixture()
def tiny_loaded(tiny_checkpoint, tiny_model):
    """``-m TINY`` gets the session's tiny model (a load is half a second of CPU) in the tests that
    check what the command writes or refuses, not how it loads (the first capture and verify load it for real; a missing folder is still
    loaded, and refused, for real)."""
    with session_models({str(tiny_checkpoint): tiny_model}):
        yield


def test_help_and_version(runner):
    res = runner.invoke(cli, ["-h"])
    assert res.exit_code == 0 and "capture" in res.output and "Exit codes" in res.output
    res = runner.invoke(cli, ["--version"])
    assert res.exit_code == 0 and "headlens, version" in res.output
    res = runner.invoke(cli, ["capture", "-h"])
    assert res.exit_code == 0 and "--no-bos" in res.output


def test_capture_writes_activations_tokens_manifest(runner, tiny_checkpoint, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"text": "Apple raised its price target"}\n{"text": "Hi"}\n')
    out = tmp_path / "cap"
    res = runner.invoke(
        cli,
        [
            "capture",
            "--model",
            str(tiny_checkpoint),
            "--prompts",
            str(prompts),
            "--heads",
            "1.2,0.0",
            "--what",
            "q,k,v,pattern,z",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    tensors = load_file(str(out / "activations.safetensors"))
    assert tensors["lengths"].tolist() == [6, 2]
    assert tensors["blocks.0.attn.hook_q"].shape == (2, 6, 1, 16)
    assert tensors["blocks.1.attn.hook_pattern"].shape == (2, 1, 6, 6)
    assert tensors["blocks.1.attn.hook_z"].shape == (2, 6, 1, 16)
    tokens = json.loads((out / "tokens.json").read_text())
    assert tokens["prepend_bos"] is True
    assert tokens["prompts"][0]["tokens"] == ["<|endoftext|>", "Apple", " raised", " its", " price", " target"]
    assert tokens["prompts"][0]["ids"] == [50256, 16108, 4376, 663, 2756, 2496]
    manifest = json.loads((out / "manifest.json").read_text())
    for key in ("headlens_version", "command", "model", "prepend_bos", "seed", "versions", "dtype", "device"):
        assert key in manifest, key
    assert manifest["prepend_bos"] is True and manifest["dtype"] == "float32" and manifest["device"] == "cpu"
    assert {"torch", "transformers", "transformer-lens", "headlens"} <= set(manifest["versions"])
    assert manifest["capture"]["heads"] == {"0": [0], "1": [2]}
    assert manifest["model"]["tokenizer"]["class"].startswith("GPT2Tokenizer")


def test_capture_no_bos(runner, tiny_checkpoint, tmp_path, tiny_loaded):
    out = tmp_path / "nobos"
    res = runner.invoke(
        cli,
        ["capture", "-m", str(tiny_checkpoint), "--text", "Apple raised its price target", "--no-bos", "--layers", "1", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    tensors = load_file(str(out / "activations.safetensors"))
    assert tensors["lengths"].tolist() == [5]
    assert set(tensors) == {"lengths", *(f"blocks.1.attn.hook_{w}" for w in ("q", "k", "v", "pattern"))}
    assert json.loads((out / "tokens.json").read_text())["prompts"][0]["ids"] == [16108, 4376, 663, 2756, 2496]


def test_verify_command(runner, tiny_checkpoint):
    res = runner.invoke(cli, ["verify", "--model", str(tiny_checkpoint)])
    assert res.exit_code == 0, res.output
    assert "verify: ok" in res.output


def _bad_cases(tiny_checkpoint, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    (no_tok / "config.json").write_text((tiny_checkpoint / "config.json").read_text())
    m = ["--model", str(tiny_checkpoint)]
    return [
        (["capture", "--model", str(tmp_path / "missing"), "--text", "x"], 3, "no such folder"),
        (["capture", "--model", str(no_tok), "--text", "x"], 3, "no tokenizer"),
        (["capture", *m, "--text", "x", "--layers", "7"], 2, "layers 0..1"),
        (["capture", *m, "--text", "x", "--heads", "0.9"], 2, "heads 0..3"),
        (["capture", *m, "--text", "x", "--heads", "zero"], 2, "LAYER.HEAD"),
        (["capture", *m, "--prompts", str(empty)], 2, "holds no prompt"),
        (["capture", *m, "--prompts", str(tmp_path / "nope.txt")], 2, "does not exist"),
        (["capture", *m, "--text", "word " * 300], 2, "--truncate"),
        (["capture", *m, "--text", "x", "--device", "cuda"], 5, "CUDA is not available"),
        (["capture", *m, "--text", "x", "--what", "q,attention"], 2, "cannot capture"),
        (["verify", *m, "--tolerance", "-1"], 2, "--tolerance"),
    ]


def test_bad_input_one_line_error_and_nothing_overwritten(runner, tiny_checkpoint, tmp_path, tiny_loaded):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the --device cuda case needs a machine without CUDA")
    out = tmp_path / "existing"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    for args, code, needle in _bad_cases(tiny_checkpoint, tmp_path):
        full = args + (["--out", str(tmp_path / "fresh"), "--overwrite"] if args[0] == "capture" else [])
        res = runner.invoke(cli, full)
        assert res.exit_code == code, (args, res.output)
        lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("headlens: error:"), (args, res.output)
        assert needle in lines[0], (args, lines[0])
        assert "Traceback" not in res.output
        assert not (tmp_path / "fresh").exists(), args
    res = runner.invoke(cli, ["capture", "--model", str(tiny_checkpoint), "--text", "x", "--out", str(out)])
    assert res.exit_code == 4 and "--overwrite" in res.output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"] and (out / "keep.txt").read_text() == "precious"


def test_tiny_model_command(runner, tmp_path):
    out = tmp_path / "tm"
    res = runner.invoke(cli, ["tiny-model", "--out", str(out), "--layers", "1", "--heads", "2", "--d-model", "32", "--n-ctx", "64"])
    assert res.exit_code == 0, res.output
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    res = runner.invoke(cli, ["tiny-model", "--out", str(out)])
    assert res.exit_code == 4
    res = runner.invoke(cli, ["tiny-model", "--out", str(tmp_path / "x"), "--heads", "3", "--d-model", "32"])
    assert res.exit_code == 2 and "multiple" in res.output
