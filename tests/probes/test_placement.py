"""Models larger than one device: ``device_map``/``max_memory`` (accelerate) give the numbers of the unsplit model.

On the CPU a split is forced with accelerate's offload: block 0 and the embeddings on "cpu",
the later blocks on "disk" (weights read from disk for each forward; meta placeholders in the
module between forwards).  Every table (census, captured tensors, ablation losses with their
gradient attribution, sinks --lengths eager and streaming, W_O read outside a forward, score
edits) is compared with the same model loaded on one device, on a tiny GPT-2 and a tiny Llama
(grouped-query attention, rotary).  Bad input is one line with exit 2 (or 5 for devices).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headlens.analyses.ablation.study import AblationConfig, run_ablation
from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.measure.evalset import text_eval_set
from headlens.analyses.sinks.intervene import mean_loss, removal_edits, window_edits
from headlens.analyses.sinks.lengths import LengthsConfig, run_sink_lengths
from headlens.analyses.sinks.reductions import head_output_weights
from headlens.analyses.stimuli import eval_text
from headlens.analyses.synthetic.families import build_family_checkpoint
from headlens.probes.capture import capture
from headlens.probes.config import CaptureConfig
from headlens.probes.errors import DeviceError, InputError
from headlens.probes.loading import load_model
from headlens.probes.prompts import TokenBatch
from headlens.reports.cli.main import cli
from tests.helpers import assert_close

#: Offloading moves weights, not arithmetic: the split model's numbers equal the unsplit ones to this.
SPLIT_TOL = 1e-6
N_LAYERS = 3
FAMILIES = ("gpt2", "llama")
PROMPTS = ("When Mary and John went to the store, John gave a drink to", "The river bank was calm.")


def split_map(family: str) -> dict[str, str]:
    """Embeddings, block 0 and the head on the CPU; blocks 1 and 2 offloaded to disk."""
    if family == "gpt2":
        top = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.drop": "cpu", "transformer.ln_f": "cpu", "lm_head": "cpu"}
        blocks = "transformer.h"
    else:
        top = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
        blocks = "model.layers"
    return {**top, f"{blocks}.0": "cpu", **{f"{blocks}.{i}": "disk" for i in range(1, N_LAYERS)}}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("device_map")
    return {f: build_family_checkpoint(root / f, f, n_layers=N_LAYERS) for f in FAMILIES}


@pytest.fixture(scope="module")
def pair(checkpoints, tmp_path_factory):
    """``family -> (unsplit model, split model)``, loaded once each."""
    loaded: dict[str, tuple] = {}

    def get(family):
        if family not in loaded:
            folder = str(checkpoints[family])
            offload = tmp_path_factory.mktemp(f"offload_{family}")
            plain = load_model(model=folder, device="cpu")
            split = load_model(model=folder, device_map=split_map(family), offload_folder=str(offload))
            loaded[family] = (plain, split)
        return loaded[family]

    return get


def _close(actual, expected, what):
    a = torch.as_tensor(np.asarray(actual, dtype=float))
    e = torch.as_tensor(np.asarray(expected, dtype=float))
    torch.testing.assert_close(a, e, atol=SPLIT_TOL, rtol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def _frames_equal(a, b, what):
    assert list(a.columns) == list(b.columns), what
    num = [c for c in a.columns if a[c].dtype.kind in "fiub"]
    _close(b[num].to_numpy(float), a[num].to_numpy(float), what)
    other = [c for c in a.columns if c not in num]
    assert a[other].astype(str).equals(b[other].astype(str)), what


@pytest.mark.parametrize("family", FAMILIES)
def test_split_is_really_offloaded(pair, family):
    """Not vacuous: the split model's later blocks live on disk, with meta placeholders between forwards."""
    plain, split = pair(family)
    assert split.device_map == split_map(family)
    assert plain.placement is None and plain.device_map is None
    blocks = split.bridge.original_model.get_submodule("transformer.h" if family == "gpt2" else "model.layers")
    mlp = [p for n, p in blocks[N_LAYERS - 1].named_parameters() if ".mlp." in n]
    assert mlp and all(p.device.type == "meta" for p in mlp)
    assert split.device == torch.device("cpu")
    assert split.describe()["placement"]["realized"] == split_map(family)


@pytest.mark.parametrize("family", FAMILIES)
def test_census_and_capture_equal_the_unsplit_model(pair, family):
    plain, split = pair(family)
    config = CensusConfig(n_prompts=3, window=24, seq_len=8, n_bootstrap=20)
    _frames_equal(run_census(plain, config).scores, run_census(split, config).scores, "census")
    what = CaptureConfig(what=("q", "k", "v", "rot_q", "rot_k", "pattern", "attn_scores", "z"))
    a, b = capture(plain, list(PROMPTS), what), capture(split, list(PROMPTS), what)
    assert sorted(a.tensors) == sorted(b.tensors)
    for name in a.tensors:
        assert_close(b.tensors[name], a.tensors[name], "reference", msg=name)
        assert (b.tensors[name] - a.tensors[name]).abs().max() <= SPLIT_TOL, name


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method", ["mean"])
def test_ablation_losses_and_attribution_equal_the_unsplit_model(pair, family, method):
    plain, split = pair(family)
    data = text_eval_set(plain.tokenizer, eval_text(), n_windows=3, window=24, prepend_bos=True, n_ctx=plain.n_ctx)
    config = AblationConfig(method=method, attribution=True, n_bootstrap=0)
    a, b = run_ablation(plain, data, config), run_ablation(split, data, config)
    _frames_equal(a.table, b.table, f"ablation {method}")
    assert abs(a.masked_value - b.masked_value) <= SPLIT_TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_sinks_lengths_and_w_o_equal_the_unsplit_model(pair, family):
    """W_O is read outside a forward: on the split model it is a meta placeholder unless materialised."""
    plain, split = pair(family)
    for layer in range(N_LAYERS):
        w_split = head_output_weights(split, layer)
        assert w_split.device.type != "meta"
        assert torch.equal(w_split, head_output_weights(plain, layer)), layer
    for attention in ("eager", "streaming"):
        config = LengthsConfig(lengths=(16, 32), n_sequences=2, attention=attention, query_block=7)
        _frames_equal(run_sink_lengths(plain, config).table, run_sink_lengths(split, config).table, f"sinks --lengths {attention}")


@pytest.mark.parametrize("family", FAMILIES)
def test_score_edits_equal_the_unsplit_model(pair, family):
    plain, split = pair(family)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(300, 20000, (2, 30), generator=gen)
    tokens[:, 0] = 50256
    batch = TokenBatch(tokens=tokens, lengths=torch.full((2,), 30), strings=[[] for _ in tokens], prepend_bos=True, pad_id=0)
    for edits in (None, removal_edits({layer: range(plain.n_heads) for layer in range(N_LAYERS)}), window_edits(N_LAYERS, 6, 1)):
        a, _ = mean_loss(plain, batch, edits)
        b, _ = mean_loss(split, batch, edits)
        assert abs(float(a) - float(b)) <= SPLIT_TOL
    assert abs(float(mean_loss(split, batch, window_edits(N_LAYERS, 6, 1))[0]) - float(mean_loss(split, batch)[0])) > 1e-3  # the edit acted


def test_max_memory_splits_with_auto_and_gives_the_same_capture(checkpoints, pair, tmp_path):
    """``device_map="auto"`` with a CPU budget that holds the embeddings and some blocks: the rest goes to disk."""
    plain, _ = pair("gpt2")
    hf = plain.bridge.original_model
    total = sum(p.numel() * p.element_size() for p in hf.parameters())
    block = sum(p.numel() * p.element_size() for p in hf.transformer.h[0].parameters())
    model = load_model(
        model=str(checkpoints["gpt2"]), device_map="auto", max_memory={"cpu": total - 2 * block}, offload_folder=str(tmp_path / "off")
    )
    assert model.device_map is not None and "disk" in model.device_map.values() and "cpu" in model.device_map.values()
    a, b = capture(plain, list(PROMPTS), CaptureConfig()), capture(model, list(PROMPTS), CaptureConfig())
    for name in a.tensors:
        assert (b.tensors[name] - a.tensors[name]).abs().max() <= SPLIT_TOL, name


def test_library_errors(checkpoints):
    folder = str(checkpoints["gpt2"])
    cases = [
        (dict(device_map="everywhere"), InputError, "not auto, balanced"),
        (dict(device_map={"transformer.nothing": "cpu", "": "cpu"}), InputError, "'transformer.nothing' is not a module"),
        (dict(device_map={"transformer.h": "cpu"}), InputError, "places no device for"),
        (dict(device_map={"": "meta"}), InputError, "'meta'"),
        (dict(max_memory={"cpu": "1GiB"}), InputError, "needs device_map"),
        (dict(device="cpu", device_map="auto"), InputError, "give one"),
        (dict(device_map="auto", max_memory={"cpu": "lots"}), InputError, "not a size"),
        (dict(device_map="auto", max_memory={"cpu": "1KB"}), DeviceError, "cannot hold any module"),
        (dict(device_map={"transformer": 0, "lm_head": "disk"}), DeviceError, "offloads others"),
    ]
    if not torch.cuda.is_available():
        cases.append((dict(device_map={"": 0}), DeviceError, "CUDA is not available"))
    for kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            load_model(model=folder, **kwargs)


def test_cli_device_map_file_manifest_and_errors(runner, checkpoints, tmp_path):
    folder = str(checkpoints["llama"])
    map_file = tmp_path / "map.json"
    map_file.write_text(json.dumps(split_map("llama")))
    outs = {}
    for tag, extra in (("plain", ["--device", "cpu"]), ("split", ["--device-map", str(map_file)])):
        outs[tag] = tmp_path / tag
        res = runner.invoke(cli, ["capture", "-m", folder, *extra, "--text", PROMPTS[0], "--out", str(outs[tag])])
        assert res.exit_code == 0, res.output
    from safetensors.torch import load_file

    a, b = load_file(outs["plain"] / "activations.safetensors"), load_file(outs["split"] / "activations.safetensors")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    manifest = json.loads((outs["split"] / "manifest.json").read_text())
    assert manifest["placement"]["device_map"] == split_map("llama")
    assert manifest["placement"]["device_map_source"] == str(map_file.resolve())
    assert manifest["placement"]["realized"] == split_map("llama")
    assert json.loads((outs["plain"] / "manifest.json").read_text())["placement"] is None

    not_json = tmp_path / "bad.json"
    not_json.write_text("{transformer: cpu")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model.nothing": "cpu", "": "cpu"}))
    bad = [
        (["--device-map", "everywhere"], 2),
        (["--device-map", str(not_json)], 2),
        (["--device-map", str(unknown)], 2),
        (["--device-map", "auto", "--max-memory", "cpu"], 2),
        (["--max-memory", "cpu=1GiB"], 2),
        (["--device-map", "auto", "--max-memory", "cpu=1KB"], 5),
    ]
    if not torch.cuda.is_available():
        bad.append((["--device-map", "auto", "--max-memory", "0=1GiB"], 5))
    for extra, code in bad:
        out = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        res = runner.invoke(cli, ["capture", "-m", folder, *extra, "--text", "hi", "--out", str(out)])
        lines = [line for line in res.output.splitlines() if line.startswith("headlens: error")]
        assert res.exit_code == code, (extra, res.output)
        assert len(lines) == 1 and "Traceback" not in res.output, (extra, res.output)
        assert not (out / "activations.safetensors").exists()
