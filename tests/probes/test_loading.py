"""Model loading: local folders, devices, dtypes, and the errors users meet."""

from __future__ import annotations

import shutil

import pytest
import torch

from headlens.probes.devices import resolve_device, resolve_dtype
from headlens.probes.errors import DeviceError, InputError, ModelLoadError
from headlens.probes.loading import load_model, resolve_source


def test_local_folder_loads_in_eval_mode(tiny_model):
    assert tiny_model.source == "local"
    assert (tiny_model.n_layers, tiny_model.n_heads, tiny_model.d_head, tiny_model.n_ctx) == (2, 4, 16, 128)
    assert tiny_model.bos_id == 50256
    assert not tiny_model.bridge.training
    desc = tiny_model.describe()
    assert desc["dtype"] == "float32" and desc["device"] == "cpu" and desc["tokenizer"]["vocab_size"] == 50257
    # every weight came from the checkpoint (lm_head is tied to the embeddings)
    assert desc["weights_checked"] is True and desc["new_weights"] == [] and desc["unexpected_weights"] == []
    assert desc["head_is_new"] is False and desc["allow_new_weights"] is False


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="no such folder"):
        resolve_source(str(tmp_path / "nope"))


def test_folder_without_tokenizer(tiny_checkpoint, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_checkpoint / name, bare / name)
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        load_model(model=str(bare), device="cpu")


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        resolve_source(str(tmp_path))


def test_hub_id_offline_says_how_to_pass_a_folder(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="pass a local checkpoint folder"):
        load_model(model="headlens-test/does-not-exist", device="cpu")


def test_devices_and_dtypes():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    assert resolve_dtype("float32", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16  # refusal: tests/probes/test_devices_half_precision.py
    with pytest.raises(InputError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(InputError, match="unknown device"):
        resolve_device("banana")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA is not available"):
            resolve_device("cuda")


def test_prompt_files(tmp_path):
    from headlens.probes.prompts import read_prompts

    (tmp_path / "p.txt").write_text("first prompt\n\nsecond prompt\n")
    assert read_prompts(tmp_path / "p.txt") == ["first prompt", "second prompt"]
    (tmp_path / "p.jsonl").write_text('{"text": "a b"}\n{"text": "c"}\n')
    assert read_prompts(tmp_path / "p.jsonl") == ["a b", "c"]
    (tmp_path / "bad.jsonl").write_text('{"text": "a"}\n{"txt": "c"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2"):
        read_prompts(tmp_path / "bad.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"text": "a"\n')
    with pytest.raises(InputError, match=r":1: not valid JSON"):
        read_prompts(tmp_path / "broken.jsonl")
    (tmp_path / "empty.txt").write_text("\n \n")
    with pytest.raises(InputError, match="holds no prompt"):
        read_prompts(tmp_path / "empty.txt")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="cannot read"):
        read_prompts(tmp_path / "bin.txt")


def test_the_internal_loader_names_a_wrong_config_type():
    """A model name passed where the ModelConfig goes is named as such, not read as 'config and keywords'."""
    from headlens.probes.loading import load_model as probes_load_model

    with pytest.raises(TypeError, match=r"config must be a ModelConfig, got str \(pass the model as model='gpt2'\)"):
        probes_load_model("gpt2", device="cpu")  # type: ignore[arg-type]
