"""The one weights fingerprint: full-file, shared by the report's stage markers and the ablation journal."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest

import headlens.analyses.ablation.study as ablation_mod
from headlens.analyses.synthetic.tiny import TinySpec, build_tiny_checkpoint
from headlens.probes.loading import checkpoint_fingerprint, load_model, weights_fingerprint
from headlens.reports.cli.main import cli


def _flip_middle_byte(folder: Path) -> None:
    """Change the lowest mantissa byte of a float32 in the middle of model.safetensors (beyond
    its first and last MiB), so the weights stay finite but differ."""
    f = folder / "model.safetensors"
    data = bytearray(f.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    mid = start + ((len(data) - start) // 2) // 4 * 4
    assert (1 << 20) < mid < len(data) - (1 << 20)
    data[mid] ^= 1
    f.write_bytes(bytes(data))


@pytest.fixture()
def own_checkpoint(tmp_path):
    """A private tiny checkpoint (the session one must not change)."""
    return build_tiny_checkpoint(tmp_path / "ckpt", TinySpec(n_layer=1, n_head=2, d_model=32, n_ctx=128, seed=1))


def test_a_middle_byte_changes_the_fingerprint(own_checkpoint, tiny_model, tiny_checkpoint):
    before = checkpoint_fingerprint("local", str(own_checkpoint))
    assert len(before) == 64 and before == checkpoint_fingerprint("local", str(own_checkpoint))
    _flip_middle_byte(own_checkpoint)
    assert checkpoint_fingerprint("local", str(own_checkpoint)) != before
    # cached on the loaded model, equal to the manifest's weights_sha256
    fp = weights_fingerprint(tiny_model)
    assert fp is weights_fingerprint(tiny_model) and fp == checkpoint_fingerprint("local", str(tiny_checkpoint))
    assert tiny_model.describe()["weights_sha256"] == fp


def test_report_rerun_recomputes_stages_after_the_weights_change(own_checkpoint, tmp_path, runner):
    out = tmp_path / "r"
    args = [
        "report",
        "--model",
        str(own_checkpoint),
        "--out",
        str(out),
        "--quick",
        "--skip",
        "sinks,ablation_zero,ablation_mean,pruning,examples",
    ]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, args)
    assert res.exit_code == 0 and "census: finished earlier" in res.stderr, res.output
    _flip_middle_byte(own_checkpoint)
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "census: running" in res.stderr and "census: finished earlier" not in res.stderr


def test_ablation_resume_refuses_a_journal_from_other_weights(own_checkpoint, tmp_path, monkeypatch, caplog, runner):
    out = tmp_path / "t.csv"
    args = [
        "ablate",
        "-m",
        str(own_checkpoint),
        "--n-windows",
        "2",
        "--window",
        "16",
        "--heads-per-forward",
        "1",
        "--bootstrap",
        "10",
        "--no-attribution",
        "-q",
        "--out",
        str(out),
    ]
    real = ablation_mod.single_head_values
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated crash mid-sweep")
        return real(*a, **k)

    monkeypatch.setattr(ablation_mod, "single_head_values", flaky)
    res = runner.invoke(cli, args)
    assert res.exit_code != 0
    journal = out.with_name(out.name + ".journal.jsonl")
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["key"]["model"]["weights"] == checkpoint_fingerprint("local", str(own_checkpoint))
    monkeypatch.setattr(ablation_mod, "single_head_values", real)
    _flip_middle_byte(own_checkpoint)
    with caplog.at_level(logging.WARNING, logger="headlens"):
        res = runner.invoke(cli, [*args, "--resume"])
    assert res.exit_code != 0 and "cannot resume" in res.output and "model.weights" in res.output, res.output
    assert any("other model weights" in r.getMessage() for r in caplog.records), caplog.text
    assert journal.exists()  # refused, not deleted
    # a fresh load of the changed checkpoint carries the new fingerprint
    assert weights_fingerprint(load_model(model=str(own_checkpoint), device="cpu")) != header["key"]["model"]["weights"]
