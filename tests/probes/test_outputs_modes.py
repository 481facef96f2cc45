"""Every output gets a new file's mode (``0o666`` less the umask), however it was written.

safetensors' ``save_file`` (and so ``save_pretrained``) writes through its own owner-only
(``0o600``) temporary file renamed onto the target, so ``activations.safetensors`` and the demo's
``model.safetensors`` came out ``0600`` beside ``0644`` JSON.  The modes are checked under two
umasks so that no expected mode is a coincidence of the machine's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

UMASKS = (0o022, 0o027)


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _modes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): _mode(p) for p in sorted(folder.rglob("*"))}


def test_atomic_write_of_a_safetensors_file(umask, tmp_path):
    import torch
    from safetensors.torch import save_file

    from headlens.probes.outputs import atomic_write

    path = atomic_write(tmp_path / "a.safetensors", lambda p: save_file({"x": torch.zeros(2)}, str(p)))
    assert _mode(path) == 0o666 & ~umask


def test_atomic_dir_of_a_saved_model(umask, tmp_path):
    """A kept demo checkpoint (``save_pretrained`` in :func:`atomic_dir`): every file and folder."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from headlens.analyses.demo.checkpoints import save_step_checkpoint

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, n_positions=16, vocab_size=50257))
    folder = save_step_checkpoint(model, tmp_path / "step-000001", step=1, run="t")
    modes = _modes(folder)
    assert "model.safetensors" in modes
    assert {name: m for name, m in modes.items() if m != 0o666 & ~umask} == {}
    assert _mode(folder) == 0o777 & ~umask


def test_capture_outputs_share_one_mode(umask, runner, tiny_checkpoint, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "cap"
    res = runner.invoke(
        cli,
        [
            "capture",
            "--model",
            str(tiny_checkpoint),
            "--text",
            "Apple raised its price target",
            "--what",
            "q,pattern",
            "--out",
            str(out),
            "-q",
        ],
    )
    assert res.exit_code == 0, res.output
    modes = _modes(out)
    assert set(modes) == {"activations.safetensors", "tokens.json", "manifest.json"}
    assert set(modes.values()) == {0o666 & ~umask}


def test_tiny_model_checkpoint_modes(umask, runner, tmp_path):
    from headlens.reports.cli.main import cli

    out = tmp_path / "tiny"
    res = runner.invoke(cli, ["tiny-model", "--out", str(out), "--layers", "1", "--heads", "2", "--d-model", "8", "--n-ctx", "16"])
    assert res.exit_code == 0, res.output
    modes = _modes(out)
    assert "model.safetensors" in modes
    assert {name: m for name, m in modes.items() if m != 0o666 & ~umask} == {}


def test_normal_modes_keeps_links_and_execute_bits(umask, tmp_path):
    from headlens.probes.outputs import normal_modes

    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o700)
    private = tmp_path / "w.bin"
    private.write_bytes(b"x")
    os.chmod(private, 0o600)
    (tmp_path / "link").symlink_to(private)
    normal_modes(tmp_path)
    assert _mode(private) == 0o666 & ~umask
    assert _mode(script) == (0o666 & ~umask) | 0o100  # its own execute bit kept
    assert (tmp_path / "link").is_symlink()


def test_normal_modes_keeps_a_folders_setgid(umask, tmp_path):
    """A group-shared folder (setgid) keeps its group inheritance; only the permission bits are normalised."""
    from headlens.probes.outputs import normal_modes

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o2700)
    normal_modes(shared)
    assert _mode(shared) == (0o777 & ~umask) | stat.S_ISGID
