"""The streaming census (q and k in query blocks, SDPA forward) equals the eager census (hook_pattern)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from headlens.analyses.heads.census import CensusConfig, run_census
from headlens.analyses.synthetic.families import FAMILIES
from headlens.probes.attention import attention_spec
from headlens.probes.errors import InputError
from headlens.probes.streaming import choose_attention, pattern_blocks, streamed_forward
from tests.helpers import assert_close

SMALL: dict[str, Any] = dict(n_prompts=3, seq_len=9, window=21, batch_size=2, n_bootstrap=20)


def _compare(model, block: int, **kw) -> None:
    eager = run_census(model, CensusConfig(**SMALL, **kw, attention="eager"))
    stream = run_census(model, CensusConfig(**SMALL, **kw, attention="streaming", query_block=block))
    assert set(eager.per_prompt) == set(stream.per_prompt)
    for name, arr in eager.per_prompt.items():
        assert np.array_equal(np.isnan(arr), np.isnan(stream.per_prompt[name])), name
        assert_close(np.nan_to_num(stream.per_prompt[name]), np.nan_to_num(arr), "float32", msg=name)
    cols = ["score", "baseline", "ci_low", "ci_high", "accuracy"]
    got, want = stream.scores[cols].to_numpy(float), eager.scores[cols].to_numpy(float)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert_close(np.nan_to_num(got), np.nan_to_num(want), "float32")
    assert (stream.scores["n"] == eager.scores["n"]).all()
    assert {v["attention"] for v in stream.stimuli.values()} == {"streaming"}
    assert {v["attention"] for v in eager.stimuli.values()} == {"eager"}


@pytest.mark.parametrize("family", FAMILIES)
def test_streaming_equals_eager_on_every_family(family_model, family):
    _compare(family_model(family), block=7)  # 7 divides none of the prompt widths


@pytest.mark.parametrize("block", [1, 5, 64])
def test_streaming_equals_eager_on_planted_model_any_block(planted_model, block):
    _compare(planted_model, block=block)


def test_streaming_ablation_equals_eager(tiny_model):
    _compare(tiny_model, block=6, detectors=("previous_token", "induction"), ablate=((0, 1), (1, 0)))


def test_streaming_never_builds_an_n_by_n_pattern(tiny_model):
    """Every float tensor the streaming forward creates (traced op by op) is smaller than one
    ``n x n`` pattern per head; the blocks handed to the detectors have at most ``block`` rows."""
    from torch.utils._python_dispatch import TorchDispatchMode

    spec = attention_spec(tiny_model)
    n, block = 48, 8
    tokens = torch.randint(100, 1000, (2, n))
    mask = torch.ones(2, n, dtype=torch.long)
    shapes: list[tuple[int, ...]] = []
    square: list[tuple[str, tuple[int, ...]]] = []

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and tuple(t.shape[-2:]) == (n, n):
                    square.append((str(func), tuple(t.shape)))
            return out

    def on_layer(la, q, k, v):
        for _q0, rows in pattern_blocks(la, q, k, mask.bool(), block):
            shapes.append(tuple(rows.shape))

    with Trace():
        streamed_forward(tiny_model, tokens, mask, on_layer, block=block)
    assert len(shapes) == len(spec.layers) * (n // block) and all(s[2] == block and s[3] == n for s in shapes)
    assert not square, square[:3]

    # the eager path does build them: the trace can see one
    from headlens.probes.patch import patched_forward

    with Trace():
        patched_forward(tiny_model, tokens, stop_after=f"blocks.{tiny_model.n_layers - 1}.attn.hook_pattern", attention_mask=mask)
    assert square


def test_streaming_restores_the_model(tiny_model):
    cfg = tiny_model.bridge.original_model.config
    before = cfg._attn_implementation
    comp = tiny_model.bridge.blocks[0].attn
    streamed_forward(tiny_model, torch.randint(100, 1000, (1, 12)), torch.ones(1, 12, dtype=torch.long), lambda *a: None)
    assert cfg._attn_implementation == before and "forward" not in comp.__dict__


def test_choose_attention_auto_and_bad_mode():
    assert choose_attention("auto", batch=1, n_heads=32, n=16384, budget=2 * 1024**3) == "streaming"
    assert choose_attention("auto", batch=16, n_heads=4, n=64) == "eager"
    assert choose_attention("eager", batch=1, n_heads=32, n=16384) == "eager"
    with pytest.raises(InputError, match="attention="):
        choose_attention("flash", batch=1, n_heads=1, n=1)


def test_streaming_equals_eager_on_the_bert_encoder(minilm_model):
    _compare(minilm_model, block=7)


def test_a_family_streaming_cannot_reach_is_refused(family_model, monkeypatch):
    from headlens.probes import streaming
    from headlens.probes.errors import UnsupportedModelError

    model = family_model("llama")
    monkeypatch.setattr(streaming, "_uses_interface", lambda module: False)
    with pytest.raises(UnsupportedModelError, match=r"streaming attention on llama: layer 0 .*use attention='eager'") as info:
        run_census(model, CensusConfig(**SMALL, detectors=("sink",), attention="streaming"))
    assert "\n" not in str(info.value)


def test_an_attention_function_that_is_never_called_is_detected(family_model, monkeypatch):
    """If the switch to headlens' attention function did not take, the run fails; it never reports eager numbers as streamed."""
    import contextlib

    from headlens.probes import streaming
    from headlens.probes.errors import UnsupportedModelError

    monkeypatch.setattr(streaming.hf_attention, "switched", lambda configs, name: contextlib.nullcontext())
    with pytest.raises(UnsupportedModelError, match="never reached"):
        streamed_forward(family_model("qwen2"), torch.randint(100, 1000, (1, 10)), torch.ones(1, 10, dtype=torch.long), lambda *a: None)


def test_detect_cli_attention_flag(runner, tiny_checkpoint, tmp_path):
    import json

    from headlens.reports.cli.main import cli

    out = tmp_path / "scores.csv"
    args = [
        "detect",
        "-m",
        str(tiny_checkpoint),
        "--n-prompts",
        "2",
        "--seq-len",
        "8",
        "--window",
        "20",
        "--detectors",
        "previous_token,induction",
        "-q",
    ]
    res = runner.invoke(cli, [*args, "--out", str(out), "--attention", "streaming", "--query-block", "5"])
    assert res.exit_code == 0, res.output
    manifest = json.loads(out.with_name("scores.manifest.json").read_text())
    assert manifest["config"]["census"]["attention"] == "streaming" and manifest["config"]["census"]["query_block"] == 5
    assert {v["attention"] for v in manifest["stimuli"].values()} == {"streaming"}
    bad = runner.invoke(cli, [*args, "--out", str(tmp_path / "b.csv"), "--attention", "flash"])
    assert bad.exit_code == 2 and "flash" in bad.output
