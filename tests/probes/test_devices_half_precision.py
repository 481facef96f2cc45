"""bfloat16 and float16 against float32 (issue 23 item 2).

Half precision runs on the CPU where this torch runs the forward's operations in it
(:func:`headlens.probes.devices.cpu_supports`), so census, verify, capture and ablation are
checked here on the planted model, the demo model and a Llama-shaped checkpoint, each loaded
in float32 and in the half dtype (the same weights rounded once).  Every tolerance is
:data:`headlens.probes.devices.TOLERANCES` (one table): verify's own tolerance, and how far a
pattern, a census score or interval end, and a loss may move from float32 (the referent
``accuracy``, a share of antecedent-vs-distractor comparisons won, moves by whole items where
the two are near ties, so it is left to the roles).  Roles must be identical to float32 on the
planted and demo models.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from headlens.probes import devices
from headlens.probes.devices import TOLERANCES, cpu_supports, resolve_dtype, tolerance
from headlens.probes.errors import DeviceError
from headlens.reports.cli.main import cli

MODELS = ("planted", "demo", "llama")
#: Models whose roles must not change with the dtype.
SAME_ROLES = ("planted", "demo")
PROMPTS = ["The cat sat on the mat because it was tired.", "When Mary and John went to the store, John gave a drink to"]


def _paths(planted_checkpoint, family_checkpoint) -> dict:
    from headlens.analyses.demo import MODEL_DIR

    return {"planted": planted_checkpoint, "demo": MODEL_DIR, "llama": family_checkpoint("llama")}


def _run(path, dtype: str) -> dict:
    """Census, roles, verify, captured patterns and a zero ablation of layer 0, in ``dtype``."""
    from headlens.analyses.ablation.study import AblationConfig, run_ablation
    from headlens.analyses.heads.census import CensusConfig, run_census
    from headlens.analyses.heads.classify import classify_heads
    from headlens.analyses.heads.verify import verify_attention
    from headlens.analyses.measure.evalset import text_eval_set
    from headlens.analyses.stimuli import eval_text
    from headlens.probes.capture import capture
    from headlens.probes.config import CaptureConfig
    from headlens.probes.loading import load_model

    m = load_model(model=str(path), device="cpu", dtype=dtype)
    census = run_census(m, CensusConfig(n_prompts=24, batch_size=8, n_bootstrap=100))
    data = text_eval_set(m.tokenizer, eval_text(), n_windows=3, window=24, prepend_bos=True, n_ctx=m.n_ctx, frame=m.frame(True))
    return {
        "dtype": m.dtype,
        "scores": census.scores,
        "roles": classify_heads(census.scores).roles[["layer", "head", "role"]].reset_index(drop=True),
        "verify": verify_attention(m, PROMPTS),
        "patterns": capture(m, PROMPTS, CaptureConfig(what=("pattern",), prepend_bos=True)).tensors,
        "ablation": run_ablation(m, data, AblationConfig(attribution=False, n_bootstrap=0, layers=(0,))).table,
    }


@pytest.fixture(scope="module")
def runs(planted_checkpoint, family_checkpoint):
    paths = _paths(planted_checkpoint, family_checkpoint)
    done: dict[tuple[str, str], dict] = {}

    def get(name: str, dtype: str) -> dict:
        if (name, dtype) not in done:
            if name == "demo" and not (paths["demo"] / "model.safetensors").is_file():
                pytest.skip("the demo checkpoint is not shipped in this tree")
            done[name, dtype] = _run(paths[name], dtype)
        return done[name, dtype]

    return get


def test_bfloat16_runs_on_the_cpu_and_an_unsupported_half_is_one_line_exit_5(monkeypatch, runner, tiny_checkpoint, tmp_path):
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16
    assert cpu_supports(torch.float32)
    monkeypatch.setattr(devices, "cpu_supports", lambda dtype: dtype == torch.float32)
    with pytest.raises(DeviceError, match=r"dtype='float16': this torch .* cannot run it on the CPU"):
        resolve_dtype("float16", torch.device("cpu"))
    out = tmp_path / "cap"
    res = runner.invoke(
        cli, ["capture", "--model", str(tiny_checkpoint), "--text", "x", "--dtype", "float16", "--device", "cpu", "--out", str(out)]
    )
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert res.exit_code == 5 and len(lines) == 1 and "--dtype float16: this torch" in lines[0], res.output  # the CLI speaks its flag
    assert not out.exists()


def test_tolerances_are_stated_once_and_verify_takes_its_dtypes():
    from headlens.analyses.heads.verify import DEFAULT_TOLERANCE

    assert DEFAULT_TOLERANCE == {name: tol["verify"] for name, tol in TOLERANCES.items()}
    for what in ("verify", "pattern", "score", "loss"):
        assert tolerance(torch.float32, what) <= tolerance("float16", what) <= tolerance(torch.bfloat16, what)


@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float16", marks=pytest.mark.slow)])  # float16 matmuls are slow on the CPU
@pytest.mark.parametrize("name", MODELS)
def test_half_precision_against_float32(runs, name, dtype):
    if not cpu_supports(getattr(torch, dtype)):
        pytest.skip(f"this torch cannot run {dtype} on the CPU")
    ref, half = runs(name, "float32"), runs(name, dtype)
    assert half["dtype"] == getattr(torch, dtype)
    assert all(t.dtype == half["dtype"] for t in half["patterns"].values())  # captured in the dtype, not float32
    # verify: in tolerance for the dtype, and its tolerance is the dtype's
    v = half["verify"]
    assert v["ok"].all() and (v["tolerance"] == tolerance(dtype, "verify")).all(), v.to_string()
    # captured patterns
    gap = max(float((half["patterns"][k].float() - ref["patterns"][k].float()).abs().max()) for k in ref["patterns"])
    assert 0 < gap <= tolerance(dtype, "pattern"), gap
    # census: same cells measured, scores and interval ends close
    a, b = half["scores"], ref["scores"]
    assert a[["layer", "head", "detector", "n"]].equals(b[["layer", "head", "detector", "n"]])
    for col in ("score", "baseline", "ci_low", "ci_high"):  # not accuracy: a share of near-ties won, it moves by whole items
        x, y = a[col].to_numpy(float), b[col].to_numpy(float)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
        ok = ~np.isnan(y)
        assert np.abs(x[ok] - y[ok]).max(initial=0) <= tolerance(dtype, "score"), (col, np.abs(x[ok] - y[ok]).max())
    # ablation: per-head loss and its change
    for col in ("value", "delta"):
        d = (half["ablation"][col] - ref["ablation"][col]).abs().max()
        assert d <= tolerance(dtype, "loss"), (col, d)
    if name in SAME_ROLES:
        assert len(ref["roles"]) > 0
        assert half["roles"].equals(ref["roles"]), (half["roles"].to_string(), ref["roles"].to_string())


def test_detect_in_bfloat16_records_the_dtype_in_its_manifest(runner, planted_checkpoint, tmp_path):
    out = tmp_path / "scores.csv"
    res = runner.invoke(
        cli,
        ["detect", "-m", str(planted_checkpoint), "--device", "cpu", "--dtype", "bfloat16", "--n-prompts", "8", "-q", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "scores.manifest.json").read_text())
    assert manifest["dtype"] == "bfloat16" and manifest["model"]["dtype"] == "bfloat16"
